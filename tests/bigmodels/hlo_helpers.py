"""Reading the compiled train step: collectives per computation, and their wire bytes per device."""

import re

from graphpar.dump.hlo import parse_collectives, wire_bytes  # the project's unit of collective bytes


def computations(hlo_text: str) -> dict[str, str]:
    """The text of each computation of an HLO module, by name."""
    out, name, lines = {}, None, []
    for line in hlo_text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            name = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
            lines = []
            continue
        if line.startswith("}") and name is not None:
            out[name] = "\n".join(lines)
            name = None
            continue
        if name is not None:
            lines.append(line)
    return out


def loop_bodies(hlo_text: str) -> set[str]:
    """Computations that run as while-loop bodies, and every computation they call."""
    comps = computations(hlo_text)
    bodies = set(re.findall(r"body=%?([\w.\-]+)", hlo_text))
    todo = list(bodies)
    while todo:
        text = comps.get(todo.pop(), "")
        for callee in re.findall(r"(?:to_apply|calls|body|condition|branch_computations)=\{?%?([\w.\-]+)", text):
            if callee not in bodies:
                bodies.add(callee)
                todo.append(callee)
    return bodies


def step_collectives(hlo_text: str, n_devices: int = 8) -> list:
    """Collectives outside loop bodies (each runs once per step)."""
    comps, bodies = computations(hlo_text), loop_bodies(hlo_text)
    return [c for name, text in comps.items() if name not in bodies for c in parse_collectives(text, n_devices)]


def loop_collectives(hlo_text: str, n_devices: int = 8) -> list:
    comps, bodies = computations(hlo_text), loop_bodies(hlo_text)
    return [c for name, text in comps.items() if name in bodies for c in parse_collectives(text, n_devices)]


def step_wire_bytes(hlo_text: str, n_devices: int = 8, trips: int = 1) -> float:
    """Wire bytes per device of one step: collectives outside loops once, inside the loop ``trips`` times."""
    once = sum(wire_bytes(c.kind, c.nbytes, len(c.groups[0]) if c.groups else n_devices)
               for c in step_collectives(hlo_text, n_devices))
    looped = sum(wire_bytes(c.kind, c.nbytes, len(c.groups[0]) if c.groups else n_devices)
                 for c in loop_collectives(hlo_text, n_devices))
    return once + trips * looped

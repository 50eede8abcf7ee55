"""Runs of nodes lowered as one shared ``jit`` call each: the lowering interpreter's unit above a single node.

Why: once every distinct node body is one shared ``jit`` (``plan.shared_calls``), JAX's cost of lowering a
training step is a cost per *call site*: each call is bound, linearized, transposed, dead-code-eliminated and emitted
as an MLIR ``call`` on its own, so a 256-layer MLP pays for 771 forward and 771 backward call sites. A network
repeats runs of nodes (a layer's matmul, bias add and activation; a block's projections), and a run that computes
what another run computes — the same node bodies and pins, wired alike, with the same values leaving it — can be one
call of one function, so the call sites drop to one per repeated run.

Which runs (:func:`plan_units`): a Cell call's nodes are consecutive in the graph and share its scope
(``Default/.../3-Dense``); every Cell call, outermost first, is a candidate, and where a Cell call cannot be one
group its nodes are cut into maximal chain-like runs (a transformer block: the query projection and its reshapes, the
key's, the value's with the attention and the output projection up to the residual add, the feed-forward part),
and a run that does not repeat either is looked into one Cell level deeper (a deep MLP's layers). A run must be *chain-like*: no value is read twice
inside it, and no value it computes is read both inside and after it. Then its backward pass sums no cotangents
inside the call, so every cotangent is summed where and in the order the per-node lowering sums it, and the program
XLA compiles is the per-node program (same instructions, same numbers). A run that fans out inside (a residual
block) is left to its parts: summing a cotangent inside a call changes the order of the additions, and with it the
numbers and XLA's fusion decisions. A candidate becomes a :class:`Group` when its structural key (:func:`group_key`)
occurs at least twice; each member is pinned in full inside the call, the outputs the per-node lowering leaves to
XLA's propagation (``pins.implied_outputs``) included, since inside a call the partitioner would otherwise
place them differently.

Names: a node's collectives are attributed by the named scope it runs under (``dump.hlo``). Inside a shared call the
names must be the same for every call, so a member runs under its scope relative to the group's scope with its node
id as an offset from the group's first node (``dense_q-Linear/bias_add+1``), and the call runs under
``{scope}/graphpar_group+{first node id}``; the dump adds the two (XLA's op names keep ``+``; an ``@`` ends
a name there). Offsets and relative names are part of the key, so
two runs share a function only when that sum names their own nodes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from graphpar.ir.graph import Graph

GROUP_FN = "graphpar_group"  # the shared function's name: ``jit(graphpar_group)`` in op names


@dataclass(frozen=True)
class Group:
    """Consecutive steps evaluated as one call: ``inputs`` (value ids read from outside, in first-use order) to
    ``outputs`` (value ids read after the group or returned by the graph)."""

    steps: tuple[Any, ...]  # pins.Step, in graph order
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    scope: str  # the scope every member runs under (the members' common Cell scope)
    share: Any  # the structural key: equal for two groups one function computes

    @property
    def base(self) -> int:
        return self.steps[0].node.id

    @property
    def call_scope(self) -> str:
        return f"{self.scope}/{GROUP_FN}+{self.base}" if self.scope else f"{GROUP_FN}+{self.base}"


def relative_label(scope: str, node: Any, base: int) -> str:
    """``node``'s name inside a group under ``scope`` whose first node is ``base``."""
    rest = node.scope[len(scope) + 1:] if scope else node.scope
    return f"{rest}/{node.instance_name}+{node.id - base}" if rest else f"{node.instance_name}+{node.id - base}"


@functools.lru_cache(maxsize=4096)
def _scope_parts(scope: str) -> tuple[str, ...]:
    """A Cell scope's levels (``Default/network-WithLossCell/...``), split once per scope string: planning the units
    of a deep network splits each node's scope at every level it looks into, and a few scopes repeat over
    hundreds of nodes."""
    return tuple(scope.split("/")) if scope else ()


def _common_scope(steps: Sequence[Any]) -> str:
    parts = _scope_parts(steps[0].node.scope)
    for step in steps[1:]:
        other = _scope_parts(step.node.scope)
        if other[:len(parts)] == parts:
            continue
        n = 0
        while n < min(len(parts), len(other)) and parts[n] == other[n]:
            n += 1
        parts = parts[:n]
    return "/".join(parts)


@functools.cache
def _narrow_float(dtype: Any) -> bool:
    """Whether ``dtype`` is a float narrower than 32 bits (``dtype`` may be an extended dtype, PRNG keys, which
    np.dtype refuses). Cached per dtype: keying a deep network's runs asks it thousands of times of a few dtypes, and
    ``jnp.issubdtype`` and ``jnp.finfo`` cost microseconds each."""
    return bool(jnp.issubdtype(dtype, jnp.floating)) and jnp.finfo(dtype).bits < 32


class _Keys:
    """Structural keys of runs, with the graph facts they read."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.results = frozenset(graph.outputs)
        self.bodies: dict[Any, int] = {}  # Step.share -> small int (hashing a body key once)

    def low_precision(self, v: int) -> bool:
        """A float narrower than 32 bits (amp's O2/O3 values). Runs that touch one stay per-node calls: measured on
        ResNet-18 at O3, XLA's CPU compile of a grouped call rounds bfloat16 differently (the loss moved by one
        bfloat16 ulp), and the per-node program is the one that equals the hand-written JAX casts bit for bit."""
        return _narrow_float(self.graph.values[v].dtype)

    def read_after(self, v: int, members: set[int]) -> bool:
        return v in self.results or any(n not in members for n, _ in self.graph.values[v].consumers)

    def chains(self, steps: Sequence[Any]) -> list[list[Any]]:
        """``steps`` cut greedily into maximal chain-like runs (see the module docstring); a step that cannot be
        shared (``Step.share`` None) is a run of its own."""
        runs: list[list[Any]] = []
        current: list[Any] = []
        read: set[int] = set()
        made: dict[int, int] = {}  # value -> its consumers count (values made in the current run)
        for step in steps:
            node = step.node
            fits = step.share is not None and current and all(
                v not in read and (v not in made or (made[v] == 1 and v not in self.results)) for v in node.inputs)
            if not fits:
                if current:
                    runs.append(current)
                current, read, made = [], set(), {}
                if step.share is None:
                    runs.append([step])
                    continue
            current.append(step)
            read.update(node.inputs)
            for v in node.outputs:
                made[v] = len(self.graph.values[v].consumers)
        if current:
            runs.append(current)
        return runs

    def key(self, steps: Sequence[Any], scope: str) -> tuple[Any, tuple[int, ...], tuple[int, ...]] | None:
        """``(key, inputs, outputs)`` of the run ``steps`` named under ``scope``; None when it is not a candidate
        (a member that cannot be shared, or a run that is not chain-like). The key holds each member's body and
        pins, where each of its inputs comes from (an input of the run, in first-use order, or a member's output),
        which outputs leave the run, and each member's relative name."""
        members = {step.node.id for step in steps}
        produced: dict[int, tuple[int, int]] = {}
        ext: dict[int, int] = {}
        read: set[int] = set()
        base = steps[0].node.id
        parts: list[Any] = []
        for j, step in enumerate(steps):
            if step.share is None:
                return None
            node = step.node
            if any(self.low_precision(v) for v in (*node.inputs, *node.outputs)):
                return None
            wires = []
            for v in node.inputs:
                if v in read:
                    return None  # read twice inside: its cotangent would be summed inside the call
                read.add(v)
                src = produced.get(v)
                if src is not None and self.read_after(v, members):
                    return None  # read inside and after: likewise
                wires.append(src if src is not None else ext.setdefault(v, len(ext)))
            parts.append((self.bodies.setdefault(step.share, len(self.bodies)), tuple(wires),
                          relative_label(scope, node, base)))
            for o, v in enumerate(node.outputs):
                produced[v] = (j, o)
        leaving = [v for step in steps for v in step.node.outputs if self.read_after(v, members)]
        return (tuple(parts), tuple(produced[v] for v in leaving)), tuple(ext), tuple(leaving)


def _cell_runs(steps: Sequence[Any], depth: int) -> list[tuple[str | None, list[Any]]]:
    """Consecutive runs of ``steps`` under the same Cell ``depth`` scope levels down; a step of a shallower Cell
    is a run of its own with scope None."""
    runs: list[tuple[str | None, list[Any]]] = []
    current: tuple[str, ...] | None = None
    for step in steps:
        parts = _scope_parts(step.node.scope)
        prefix = parts[:depth] if len(parts) >= depth else None
        if prefix is not None and prefix == current:
            runs[-1][1].append(step)
        else:
            runs.append(("/".join(prefix) if prefix is not None else None, [step]))
        current = prefix
    return runs


def plan_units(graph: Graph, segments: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """Per segment (consecutive steps evaluated plainly), its units in order: a :class:`Group` for every candidate
    run whose key occurs twice or more in the graph, a single step elsewhere (see the module docstring).

    Top down through the Cells: a Cell call's run of nodes is one group if it is a repeated candidate; otherwise it
    is cut into maximal chain-like runs (:meth:`_Keys.chains`), each one group if repeated, and each of the rest is
    looked into one Cell level deeper. A first pass counts every key the second pass can meet (which runs are
    looked at does not depend on the counts)."""
    keys = _Keys(graph)
    count: dict[Any, int] = {}
    keyed: dict[tuple[int, int, str], Any] = {}  # (first node id, length, scope) -> (key, inputs, outputs) | None

    total = sum(len(steps) for steps in segments)

    def repeated(run: Sequence[Any], scope: str | None, counting: bool) -> Group | None:
        """``run`` as a group if its key repeats (``scope`` None: the members' common scope)."""
        if 2 * len(run) > total:  # no room for a second instance: not worth keying
            return None
        scope = _common_scope(run) if scope is None else scope
        ident = (run[0].node.id, len(run), scope)
        if ident not in keyed:
            found = keyed[ident] = keys.key(run, scope)
            if found is not None:
                count[found[0]] = count.get(found[0], 0) + 1
        found = keyed[ident]
        if counting or found is None or count[found[0]] < 2:
            return None
        return Group(tuple(run), found[1], found[2], scope, found[0])

    def units(steps: Sequence[Any], depth: int, counting: bool) -> list[Any]:
        out: list[Any] = []
        for scope, run in _cell_runs(steps, depth):
            if scope is None or len(run) < 2:
                out.extend(run)
                continue
            whole = repeated(run, scope, counting)
            if whole is not None:
                out.append(whole)
                continue
            for chain in keys.chains(run):
                group = repeated(chain, None, counting) if len(chain) > 1 else None
                if group is not None:
                    out.append(group)
                elif len(chain) > 1:
                    out.extend(units(chain, depth + 1, counting))
                else:
                    out.extend(chain)
        return out

    for steps in segments:
        units(steps, 1, True)
    return [units(steps, 1, False) for steps in segments]


def group_function(group: Group, evaluate_step: Callable[[Any, list[Any]], list[Any]]) -> Callable[..., list[Any]]:
    """The shared ``jit`` function of ``group``'s key, built from this instance (the key makes it every
    instance's): the members evaluated in order (``evaluate_step(step, inputs) -> outputs``, every output pinned),
    each under its relative name."""
    labels = [relative_label(group.scope, step.node, group.base) for step in group.steps]

    def graphpar_group(*xs: Any) -> list[Any]:
        env = dict(zip(group.inputs, xs))
        for step, label in zip(group.steps, labels):
            with jax.named_scope(label):
                env.update(zip(step.node.outputs, evaluate_step(step, [env[v] for v in step.node.inputs])))
        return [env[v] for v in group.outputs]

    return jax.jit(graphpar_group)

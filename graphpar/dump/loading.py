"""Finding dumps on disk: a file, a ``rank_R`` directory or ``ir_dumps/`` → the :class:`DumpSet` of one graph."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from graphpar.dump.model import Dump, DumpError, Node, TensorType
from graphpar.dump.reader import read_dump
from graphpar.ir.notebook import html_of

_BEGIN_FILE = re.compile(r"^step_parallel_begin_(\d+)\.ir$")
_EXEC_FILE = re.compile(r"^(\d+)_execute_(\d+)\.ir$")


@dataclass
class DumpSet:
    """The dumps of one graph on one rank: its ``step_parallel_begin`` and (once compiled) ``execute`` files."""

    source: str  # what the user named
    index: int | None
    begin: Dump | None = None
    execute: Dump | None = None
    indexes: list[int] = field(default_factory=list)  # every graph counter found next to it
    ranks: list[int] = field(default_factory=list)  # every rank directory found (when given ir_dumps/)

    @property
    def main(self) -> Dump:
        """The execute dump when there is one (per-device shapes and collectives), else the begin dump."""
        return self.execute or self.begin  # type: ignore[return-value]

    @property
    def rank(self) -> int | None:
        return self.main.rank

    def _repr_html_(self) -> str | None:
        """Notebooks: the views of this graph's begin and execute dumps (graphpar.viz, through the registry of
        graphpar.ir.notebook)."""
        return html_of(self)

    def global_types(self, node: Node) -> tuple[list[TensorType], list[TensorType]] | None:
        """Input and output types of ``node`` with global shapes (from the begin dump)."""
        if self.begin is None:
            return None
        twin = self.begin.node(node.id)
        return (twin.input_types, twin.output_types) if twin is not None else None


def _dump_files(directory: Path) -> dict[int, dict[str, Path]]:
    found: dict[int, dict[str, Path]] = {}
    for p in sorted(directory.iterdir()):
        if (m := _BEGIN_FILE.match(p.name)):
            found.setdefault(int(m.group(1)), {})["begin"] = p
        elif (m := _EXEC_FILE.match(p.name)):
            found.setdefault(int(m.group(2)), {})["execute"] = p
    return found


def _purpose(path: Path) -> str:
    """The ``purpose:`` of a dump, from its header alone."""
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                if not line.startswith("#"):
                    break
                if (m := re.match(r"^# graph: .*  purpose: (\S*)", line)):
                    return m.group(1)
    except (OSError, UnicodeDecodeError):
        pass
    return ""


def _rank_dirs(directory: Path) -> dict[int, Path]:
    out = {}
    for p in directory.iterdir():
        if p.is_dir() and (m := re.fullmatch(r"rank_(\d+)", p.name)):
            out[int(m.group(1))] = p
    return dict(sorted(out.items()))


def _load(files: dict[str, Path], dset: DumpSet) -> DumpSet:
    if "begin" in files:
        dset.begin = read_dump(files["begin"])
    if "execute" in files:
        dset.execute = read_dump(files["execute"])
    return dset


def load(path: str | Path, index: int | None = None, rank: int | None = None) -> DumpSet:
    """The dumps of one graph, from a ``.ir`` file (with its same-counter twin), a ``rank_R`` directory, or the
    ``ir_dumps`` directory (rank ``rank``, by default the lowest). In a directory the graph is ``index`` (the NNNN
    counter), by default the newest ``train`` graph (the newest graph when none is a train graph)."""
    p = Path(path)
    if not p.exists():
        raise DumpError(path, "no such file or directory")
    if p.is_file():
        m = _BEGIN_FILE.match(p.name) or _EXEC_FILE.match(p.name)
        if m is None:  # a renamed dump: just this file
            dump = read_dump(p)
            begin = dump.kind == "step_parallel_begin"
            return DumpSet(str(path), None, dump if begin else None, None if begin else dump)
        index = int(m.groups()[-1])
        kind = "begin" if m.re is _BEGIN_FILE else "execute"
        return _load({**_dump_files(p.parent).get(index, {}), kind: p}, DumpSet(str(path), index))
    ranks = _rank_dirs(p)
    if ranks:
        chosen = min(ranks) if rank is None else rank
        if chosen not in ranks:
            raise DumpError(path, f"no rank_{rank} directory; found ranks {', '.join(map(str, ranks))}")
        dset = load(ranks[chosen], index)
        dset.source, dset.ranks = str(path), list(ranks)
        return dset
    found = _dump_files(p)
    if not found:
        raise DumpError(path, "no IR dumps here (expected step_parallel_begin_NNNN.ir / NN_execute_NNNN.ir, or "
                              "rank_R directories holding them)")
    if index is not None and index not in found:
        raise DumpError(path, f"no dump with index {index:04d}; found " + ", ".join(f"{i:04d}" for i in found))
    if index is None:
        trains = [i for i, files in found.items() if _purpose(files.get("execute") or files["begin"]) == "train"]
        index = max(trains or found)
    dset = _load(found[index], DumpSet(str(path), index, indexes=sorted(found)))
    return dset


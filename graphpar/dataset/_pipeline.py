"""``Dataset`` and the operations chained on it: map, batch, shuffle, repeat, take, skip, project, rename.

One module, because each chaining method makes a node of a class defined here and each such class is a ``Dataset``.
Every operation is a pipeline node (see ``_node``): it knows its columns and length from its child's, builds its
part of a pass on grain (``grain.MapDataset`` methods), and has a row-by-row version for pipelines over Python
iterables.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from graphpar.dataset import _batched, _rng
from graphpar.dataset._mapfn import ApplyOps, Select, StackRows
from graphpar.dataset._node import DatasetNode
from graphpar.dataset._rows import Row, names, positions, stack_rows
from graphpar.dataset._stream import Build, Mapped, Passes, Permuted, Tagged
from graphpar.dataset.transforms._base import num_inputs
from graphpar.errors import DatasetError


class Dataset(DatasetNode):
    """Base of every dataset: a pipeline node (``DatasetNode``) with MindSpore's chaining methods."""

    # ----- chaining (MindSpore names) -----
    def batch(self, batch_size: int, drop_remainder: bool = False, num_parallel_workers: int | None = None) -> Dataset:
        """Stack ``batch_size`` consecutive rows per column; the last smaller batch is kept unless
        ``drop_remainder``."""
        return BatchDataset(self, batch_size, drop_remainder, num_parallel_workers)

    def repeat(self, count: int | None = None) -> Dataset:
        """``count`` passes per epoch, each shuffled and augmented afresh (None or -1: endless, see docs)."""
        return RepeatDataset(self, count)

    def shuffle(self, buffer_size: int) -> Dataset:
        """Shuffle rows. Random-access pipelines shuffle globally per pass (``buffer_size`` only checked);
        iterables use a ``buffer_size`` buffer as MindSpore does."""
        return ShuffleDataset(self, buffer_size)

    def map(self, operations: Callable[..., Any] | Sequence[Callable[..., Any]],
            input_columns: str | Sequence[str] | None = None, output_columns: str | Sequence[str] | None = None,
            num_parallel_workers: int | None = None, python_multiprocessing: bool = False) -> Dataset:
        """Apply ``operations`` in order to ``input_columns`` (see docs/datasets.md for the column layout)."""
        return MapDataset(self, operations, input_columns, output_columns, num_parallel_workers,
                          python_multiprocessing)

    def take(self, count: int = -1) -> Dataset:
        """The first ``count`` outputs of every epoch (-1: all)."""
        return TakeDataset(self, count)

    def skip(self, count: int) -> Dataset:
        """Every epoch without its first ``count`` outputs."""
        return SkipDataset(self, count)

    def project(self, columns: str | Sequence[str]) -> Dataset:
        """Keep only ``columns``, in that order."""
        return ProjectDataset(self, columns)

    def rename(self, input_columns: str | Sequence[str], output_columns: str | Sequence[str]) -> Dataset:
        return RenameDataset(self, input_columns, output_columns)

    def get_batch_size(self) -> int:
        return next((n.batch_size for n in self._chain() if isinstance(n, BatchDataset)), 1)

    def get_repeat_count(self) -> int:
        return next((n.count for n in self._chain() if isinstance(n, RepeatDataset)), 1)


_INT32_MAX = 2**31 - 1


def _int_arg(who: str, name: str, value: Any, lowest: int, allow_minus_one: bool = False) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= lowest or
                                                                      (allow_minus_one and value == -1))
    if not ok or value > _INT32_MAX:
        extra = " or -1" if allow_minus_one else ""
        raise DatasetError(f"{who}: {name} must be an int >= {lowest}{extra}, got {value!r}")
    return value


class MapDataset(Dataset):
    """``dataset.map(operations, input_columns, output_columns)``."""

    def __init__(self, child: Dataset, operations: Any, input_columns: Any, output_columns: Any,
                 num_parallel_workers: int | None, python_multiprocessing: bool):
        super().__init__(child, num_parallel_workers)
        ops = list(operations) if isinstance(operations, (list, tuple)) else [operations]
        if not ops or not all(callable(op) for op in ops):
            raise DatasetError(f"map: operations must be a callable or a non-empty list of callables, "
                               f"got {operations!r}")
        child_cols = child.get_col_names()
        in_names = names(input_columns, "map: input_columns")
        if in_names is None:
            wanted = num_inputs(ops[0])
            in_names = child_cols[:wanted] if wanted is not None else list(child_cols)
        out_names = names(output_columns, "map: output_columns") or list(in_names)
        in_pos = positions(in_names, child_cols, "map: input_columns")
        replace = len(out_names) == len(in_names)
        if replace:
            columns = list(child_cols)
            for p, name in zip(in_pos, out_names):
                columns[p] = name
            keep_pos: tuple[int, ...] = ()
        else:
            keep_pos = tuple(i for i in range(len(child_cols)) if i not in in_pos)
            columns = list(out_names) + [child_cols[i] for i in keep_pos]
        if len(set(columns)) != len(columns):
            raise DatasetError(f"map: output_columns {out_names} repeat a column that is kept ({child_cols}); "
                               "choose new names or list that column in input_columns")
        self._cols = columns
        self.python_multiprocessing = bool(python_multiprocessing)
        self._fn = ApplyOps(ops, in_pos, len(out_names), replace, keep_pos, in_names, out_names)

    def _columns(self) -> list[str]:
        return self._cols

    def _length(self) -> int | None:
        return self._child._length()

    def _grain(self, build: Build) -> Any:
        return self._grain_on(self._child._grain(build), build)

    def _grain_on(self, parent: Any, build: Build, keep: int | None = None) -> Any:
        """This map over ``parent`` (its first ``keep`` operations only, when the rest run per batch)."""
        fn = self._fn if keep is None else self._fn.prefix(keep)
        if not fn.ops:
            return parent
        return Mapped(parent, fn, self.streams(build) if fn.uses_rng() else None)

    def streams(self, build: Build) -> _rng.SampleStreams:
        """The per-sample generators of this map in the pass ``build`` names."""
        return _rng.SampleStreams(build.op_seed(self._depth))

    def _rows(self, build: Build) -> Iterator[Row]:
        seed = build.op_seed(self._depth)
        for i, row in enumerate(self._child._rows(build)):
            yield self._fn(row, _rng.generator(seed, i))


class BatchDataset(Dataset):
    """``dataset.batch(batch_size, drop_remainder)``: rows stacked along a new first axis."""

    def __init__(self, child: Dataset, batch_size: int, drop_remainder: bool, num_parallel_workers: int | None):
        super().__init__(child, num_parallel_workers)
        if callable(batch_size):
            raise DatasetError("batch: a callable batch_size (per-batch sizes) is not supported; pass an int")
        self.batch_size = _int_arg("batch", "batch_size", batch_size, 1)
        if not isinstance(drop_remainder, bool):
            raise DatasetError(f"batch: drop_remainder must be a bool, got {drop_remainder!r}")
        self.drop_remainder = drop_remainder

    def _length(self) -> int | None:
        n = self._child._length()
        if n is None:
            return None
        return n // self.batch_size if self.drop_remainder else -(-n // self.batch_size)

    def deferral(self) -> _batched.Deferral | None:
        """Which operations of the maps below run once per batch (``_batched.plan``), or None."""
        stages, node = [], self._child
        while isinstance(node, (MapDataset, ShuffleDataset)):
            stages.append(_batched.Stage(node, node._fn if isinstance(node, MapDataset) else None))
            node = node._child
        return _batched.plan(stages)

    def _grain(self, build: Build) -> Any:
        deferral = self.deferral()
        if deferral is None:
            return self._child._grain(build).batch(self.batch_size, drop_remainder=self.drop_remainder,
                                                   batch_fn=StackRows(self._columns()))
        # the maps' batchable tails run once per batch (dataset/_batched.py); the rest is built as usual
        chain, node = [], self._child
        while id(node) in deferral.keep or isinstance(node, (MapDataset, ShuffleDataset)):
            chain.append(node)
            node = node._child
        ds = node._grain(build)
        tagged = {id(n) for n in deferral.tagged()}
        for n in reversed(chain):
            if isinstance(n, MapDataset):
                ds = n._grain_on(ds, build, deferral.keep.get(id(n)))
                if id(n) in tagged:  # its rows carry their index: the moved draws come from that sample's stream
                    ds = Tagged(ds)
            else:
                ds = n._grain_on(ds, build)
        names = ", ".join(type(op).__name__ for m in deferral.ops for op in m.ops)
        streams = {id(n): n.streams(build) for n in deferral.tagged()}
        stack = StackRows(self._columns(), _batched.BatchOps(deferral.ops, streams, self._columns()),
                          f"batch: the batched [{names}]")
        return ds.batch(self.batch_size, drop_remainder=self.drop_remainder, batch_fn=stack)

    def _rows(self, build: Build) -> Iterator[Row]:
        rows = iter(self._child._rows(build))
        columns = self._columns()
        while chunk := list(itertools.islice(rows, self.batch_size)):
            if len(chunk) < self.batch_size and self.drop_remainder:
                return
            yield stack_rows(chunk, columns)


class ShuffleDataset(Dataset):
    """``dataset.shuffle(buffer_size)``.

    Random-access pipelines get a seeded global shuffle of each pass (grain's ``shuffle``): every order is
    reachable, which a buffer of ``buffer_size`` cannot give, and it costs no memory. Pipelines over iterables use
    MindSpore's buffer algorithm with a seeded generator.
    """

    def __init__(self, child: Dataset, buffer_size: int):
        super().__init__(child)
        self.buffer_size = _int_arg("shuffle", "buffer_size", buffer_size, 2)

    def _length(self) -> int | None:
        return self._child._length()

    def _grain(self, build: Build) -> Any:
        return self._grain_on(self._child._grain(build), build)

    def _grain_on(self, parent: Any, build: Build) -> Any:
        return Permuted(parent, build.op_seed(self._depth))

    def _rows(self, build: Build) -> Iterator[Row]:
        rng = _rng.generator(build.op_seed(self._depth))
        buffer: list[Row] = []
        for row in self._child._rows(build):
            if len(buffer) < self.buffer_size:
                buffer.append(row)
                continue
            k = int(rng.integers(len(buffer)))
            yield buffer[k]
            buffer[k] = row
        while buffer:
            yield buffer.pop(int(rng.integers(len(buffer))))


class RepeatDataset(Dataset):
    """``dataset.repeat(count)``: one epoch holds ``count`` passes over the child, each built afresh.

    ``count`` None or -1 repeats without end; as in MindSpore the dataset size is then one pass, and here each
    epoch is one pass (epoch ``e`` is pass ``e``).
    """

    def __init__(self, child: Dataset, count: int | None):
        super().__init__(child)
        self.count = -1 if count is None else _int_arg("repeat", "count", count, 1, allow_minus_one=True)

    def _length(self) -> int | None:
        n = self._child._length()
        if n is None or self.count == -1:
            return n
        return n * self.count

    def _grain(self, build: Build) -> Any:
        if self.count == -1:
            return self._child._grain(build)
        return Passes(self._child, build.seed, build.key, 0, self.count, self._child.get_dataset_size())

    def _rows(self, build: Build) -> Iterator[Row]:
        if self.count == -1:
            yield from self._child._rows(build)
            return
        for p in range(self.count):
            yield from self._child._rows(build.child(p))


class TakeDataset(Dataset):
    """``dataset.take(count)``: the first ``count`` outputs of each epoch (-1: all)."""

    def __init__(self, child: Dataset, count: int):
        super().__init__(child)
        self.count = _int_arg("take", "count", count, 1, allow_minus_one=True)

    def _length(self) -> int | None:
        n = self._child._length()
        return n if n is None or self.count == -1 else min(n, self.count)

    def _grain(self, build: Build) -> Any:
        ds = self._child._grain(build)
        return ds if self.count == -1 else ds[:self.count]

    def _rows(self, build: Build) -> Iterator[Row]:
        rows = self._child._rows(build)
        return rows if self.count == -1 else itertools.islice(rows, self.count)


class SkipDataset(Dataset):
    """``dataset.skip(count)``: each epoch without its first ``count`` outputs."""

    def __init__(self, child: Dataset, count: int):
        super().__init__(child)
        self.count = _int_arg("skip", "count", count, 0)

    def _length(self) -> int | None:
        n = self._child._length()
        return None if n is None else max(n - self.count, 0)

    def _grain(self, build: Build) -> Any:
        return self._child._grain(build)[self.count:]

    def _rows(self, build: Build) -> Iterator[Row]:
        return itertools.islice(self._child._rows(build), self.count, None)


class ProjectDataset(Dataset):
    """``dataset.project(columns)``: only ``columns``, in that order."""

    def __init__(self, child: Dataset, columns: str | Sequence[str]):
        super().__init__(child)
        self._cols = names(columns, "project: columns")
        self._select = Select(positions(self._cols, child.get_col_names(), "project"))

    def _columns(self) -> list[str]:
        return list(self._cols)

    def _length(self) -> int | None:
        return self._child._length()

    def _grain(self, build: Build) -> Any:
        return self._child._grain(build).map(self._select)

    def _rows(self, build: Build) -> Iterator[Row]:
        return map(self._select, self._child._rows(build))


class RenameDataset(Dataset):
    """``dataset.rename(input_columns, output_columns)``: new names, same data."""

    def __init__(self, child: Dataset, input_columns: str | Sequence[str], output_columns: str | Sequence[str]):
        super().__init__(child)
        old = names(input_columns, "rename: input_columns")
        new = names(output_columns, "rename: output_columns")
        if len(old) != len(new):
            raise DatasetError(f"rename: {len(old)} input_columns {old} but {len(new)} output_columns {new}")
        columns = child.get_col_names()
        for p, name in zip(positions(old, columns, "rename"), new):
            columns[p] = name
        if len(set(columns)) != len(columns):
            raise DatasetError(f"rename: the new names {new} clash with existing columns; columns would be {columns}")
        self._cols = columns

    def _columns(self) -> list[str]:
        return list(self._cols)

    def _length(self) -> int | None:
        return self._child._length()

    def _grain(self, build: Build) -> Any:
        return self._child._grain(build)

    def _rows(self, build: Build) -> Iterator[Row]:
        return self._child._rows(build)


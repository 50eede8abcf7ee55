"""GeneratorDataset and the chained operations, with MindSpore's semantics."""

import jax
import numpy as np
import pytest

import graphpar.dataset as ds
from graphpar.errors import DatasetError


def _seed_004_source(batch_size=2, in_dim=32, out_dim=16, step_per_epoch=4):
    np.random.seed(1)
    input_data = np.random.rand(batch_size, in_dim).astype(np.float32)
    label_data = np.random.rand(batch_size, out_dim).astype(np.float32)

    def generate():
        for _ in range(step_per_epoch):
            yield (input_data, label_data)

    return generate, input_data, label_data


class Indexed:
    """A random-accessible source: row i is (i, 10 * i)."""

    def __init__(self, n=10):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.array(i), np.array(10 * i)


class Iterable:
    def __init__(self, n=5):
        self.n = n

    def __iter__(self):
        return iter([(np.array([i], np.float32),) for i in range(self.n)])

    def __len__(self):
        return self.n


def _first_column(dataset, epoch=0):
    return [r[0].tolist() for r in dataset.iter_epoch(epoch)]


def test_seed_004_generator_function():
    generate, x, y = _seed_004_source()
    data = ds.GeneratorDataset(generate, ["input", "label"])
    assert data.get_dataset_size() == 4 and data.get_col_names() == ["input", "label"]
    rows = list(data)
    assert len(rows) == 4
    assert isinstance(rows[0][0], jax.Array) and rows[0][0].shape == (2, 32)
    np.testing.assert_array_equal(np.asarray(rows[3][1]), y)
    assert len(list(data)) == 4  # the function is called again for every epoch
    assert data.shard_info() == (None, None)
    epochs = [[np.asarray(r[0]) for r in data.iter_epoch(e)] for e in (0, 1)]
    assert all(np.array_equal(a, x) for e in epochs for a in e)


def test_iterable_and_random_access_sources():
    assert _first_column(ds.GeneratorDataset(Iterable(), "x")) == [[0.0], [1.0], [2.0], [3.0], [4.0]]
    assert ds.GeneratorDataset(Iterable(), "x").get_dataset_size() == 5
    assert _first_column(ds.GeneratorDataset(Iterable(), "x", num_samples=2)) == [[0.0], [1.0]]
    assert ds.GeneratorDataset(Iterable(), "x", num_samples=2).get_dataset_size() == 2
    ordered = ds.GeneratorDataset(Indexed(), ["a", "b"], shuffle=False)
    assert _first_column(ordered) == list(range(10))
    shuffled = ds.GeneratorDataset(Indexed(), ["a", "b"])  # random access: shuffled by default
    first, second = _first_column(shuffled, 0), _first_column(shuffled, 1)
    assert sorted(first) == list(range(10)) and first != list(range(10)) and first != second
    rows = [(np.array(i),) for i in range(3)]  # a list is random accessible too
    assert sorted(_first_column(ds.GeneratorDataset(rows, ["c"]))) == [0, 1, 2]
    assert _first_column(ds.GeneratorDataset(Indexed(), ["a", "b"], shuffle=False, num_samples=3)) == [0, 1, 2]
    scalar = next(ds.GeneratorDataset(Indexed(), ["a", "b"], shuffle=False).iter_epoch(0))[0]
    assert isinstance(scalar, np.ndarray) and scalar.shape == ()


def test_generator_error_cases():
    generate, _, _ = _seed_004_source()
    for kwargs, pattern in (({"shuffle": True}, "shuffle needs a random-accessible source"),
                            ({"num_shards": 2, "shard_id": 0}, "num_shards needs a random-accessible"),
                            ({"sampler": [0, 1]}, "sampler needs a random-accessible")):
        with pytest.raises(DatasetError, match=pattern):
            ds.GeneratorDataset(generate, ["input", "label"], **kwargs)
    with pytest.raises(DatasetError, match="given together"):
        ds.GeneratorDataset(Indexed(), ["a", "b"], num_shards=2)
    with pytest.raises(DatasetError, match=r"shard_id must be in \[0, 1\]"):
        ds.GeneratorDataset(Indexed(), ["a", "b"], num_shards=2, shard_id=2)
    with pytest.raises(DatasetError, match="sampler and shuffle"):
        ds.GeneratorDataset(Indexed(), ["a", "b"], shuffle=True, sampler=ds.SequentialSampler())
    with pytest.raises(DatasetError, match="callable, iterable or random accessible"):
        ds.GeneratorDataset(42, ["a"])
    with pytest.raises(DatasetError, match="column_names is required"):
        ds.GeneratorDataset(generate)
    with pytest.raises(DatasetError, match="2 value"):
        list(ds.GeneratorDataset(generate, ["only"]).iter_epoch(0))
    with pytest.raises(DatasetError, match="dtype float32 but column_types says int32"):
        list(ds.GeneratorDataset(generate, ["input", "label"], column_types=[np.int32, np.float32]).iter_epoch(0))
    with pytest.raises(DatasetError, match="dict"):
        list(ds.GeneratorDataset(lambda: iter([{"a": 1}]), ["a"]).iter_epoch(0))


def test_batch_repeat_take_skip_and_sizes():
    data = ds.GeneratorDataset(Indexed(10), ["a", "b"], shuffle=False)
    batched = data.batch(3)
    assert batched.get_dataset_size() == 4 and batched.get_batch_size() == 3
    assert _first_column(batched) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert data.batch(3, drop_remainder=True).get_dataset_size() == 3
    repeated = data.batch(4, True).repeat(3)
    assert repeated.get_dataset_size() == 6 and repeated.get_repeat_count() == 3
    across = data.repeat(2).batch(4)  # repeat before batch: batches span the passes
    assert across.get_dataset_size() == 5 and _first_column(across)[2] == [8, 9, 0, 1]
    assert _first_column(data.skip(7)) == [7, 8, 9] and _first_column(data.take(2)) == [0, 1]
    assert data.skip(20).get_dataset_size() == 0 and list(data.skip(20).iter_epoch(0)) == []
    assert data.batch(4).output_shapes() == [[4], [4]] and data.output_types() == [np.dtype(int)] * 2
    endless = data.repeat()
    assert endless.get_dataset_size() == 10 and endless.get_repeat_count() == -1
    with pytest.raises(DatasetError, match="batch_size must be an int >= 1"):
        data.batch(0)
    with pytest.raises(DatasetError, match="buffer_size must be an int >= 2"):
        data.shuffle(1)
    with pytest.raises(DatasetError, match="count must be an int >= 1 or -1"):
        data.repeat(0)
    with pytest.raises(DatasetError, match="different shapes"):
        list(ds.GeneratorDataset([(np.zeros(2),), (np.zeros(3),)], ["v"], shuffle=False).batch(2).iter_epoch(0))


def test_shuffle_is_a_per_epoch_permutation_for_both_kinds_of_source():
    indexed = ds.GeneratorDataset(Indexed(20), ["a", "b"], shuffle=False).shuffle(4)
    iterable = ds.GeneratorDataset(lambda: ((np.array(i),) for i in range(20)), ["a"]).shuffle(4)
    for data in (indexed, iterable):
        e0, e1 = _first_column(data, 0), _first_column(data, 1)
        assert sorted(e0) == sorted(e1) == list(range(20))
        assert e0 != list(range(20)) and e0 != e1
        assert _first_column(data, 0) == e0


def test_map_column_semantics():
    data = ds.GeneratorDataset(Indexed(3), ["a", "b"], shuffle=False)
    swapped = data.map(lambda a, b: (b, a), input_columns=["a", "b"])  # same count: replaced in place
    assert swapped.get_col_names() == ["a", "b"] and _first_column(swapped) == [0, 10, 20]
    split = data.map(lambda b: (b + 1, b + 2), input_columns="b", output_columns=["p", "q"])
    assert split.get_col_names() == ["p", "q", "a"]  # outputs first, then the columns the map did not read
    assert [list(map(int, r)) for r in split.iter_epoch(0)][1] == [11, 12, 1]
    renamed = data.map([lambda a: a * 2, lambda a: a + 1], input_columns="a", output_columns="c")
    assert renamed.get_col_names() == ["c", "b"] and _first_column(renamed) == [1, 3, 5]
    assert data.map(lambda a: a + 5).get_col_names() == ["a", "b"]  # no input_columns: the first column
    summed = data.map(lambda a, b: a + b, output_columns="s")  # no input_columns: as many as the function takes
    assert summed.get_col_names() == ["s"] and _first_column(summed) == [0, 11, 22]
    assert data.project(["b"]).get_col_names() == ["b"] and _first_column(data.project("b")) == [0, 10, 20]
    assert data.rename(["a"], ["x"]).get_col_names() == ["x", "b"]
    with pytest.raises(DatasetError, match=r"column\(s\) \['zz'\] do not exist"):
        data.map(lambda z: z, input_columns="zz")
    with pytest.raises(DatasetError, match="returned 2 column"):
        list(data.map(lambda a: (a, a), input_columns="a").iter_epoch(0))
    with pytest.raises(DatasetError, match="ZeroDivisionError"):
        list(data.map(lambda a: 1 // 0).iter_epoch(0))


def test_iterators_tuple_dict_columns_and_epochs():
    data = ds.GeneratorDataset(Indexed(4), ["a", "b"], shuffle=False).batch(2)
    it = data.create_tuple_iterator(num_epochs=2)
    first = [[np.asarray(v).tolist() for v in row] for row in it]
    second = [row for row in it]
    assert first == [[[0, 1], [0, 10]], [[2, 3], [20, 30]]] and len(second) == 2 and list(it) == []
    assert isinstance(second[0][0], jax.Array)
    only_b = next(data.create_tuple_iterator(columns=["b"], output_numpy=True))
    assert len(only_b) == 1 and isinstance(only_b[0], np.ndarray) and only_b[0].tolist() == [0, 10]
    row = next(data.create_dict_iterator(output_numpy=True))
    assert set(row) == {"a", "b"} and row["b"].tolist() == [0, 10]
    with pytest.raises(DatasetError, match="num_epochs"):
        data.create_tuple_iterator(num_epochs=0)

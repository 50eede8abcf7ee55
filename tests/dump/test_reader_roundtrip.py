"""The reader parses every line the dump writers produce, and the values it reads are the plan's.

Dumps come from seed 004's network trained one step on 8 CPU devices (``ir_dumps`` fixture, conftest.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from graphpar.dump.loading import load
from graphpar.dump.reader import (
    DumpError, parse_provenance, parse_text, parse_tuple, parse_value, read_dump, split_attrs)


def _files(root: Path) -> list[Path]:
    """graphpar's dumps (AUTO_PARALLEL also writes MindSpore's step_auto_parallel_begin form, which is not read)."""
    return sorted(p for p in root.glob("rank_*/*.ir") if not p.name.startswith("step_auto_parallel_begin_"))


@pytest.mark.parametrize("mode", ["semi", "auto", "data"])
def test_every_written_line_is_read(ir_dumps, mode):
    files = _files(ir_dumps[mode])
    assert len(files) == 16  # 8 ranks x (begin, execute)
    mindspore_form = sorted(ir_dumps[mode].glob("rank_*/step_auto_parallel_begin_*.ir"))
    assert len(mindspore_form) == (8 if mode == "auto" else 0)
    for path in files:
        dump = read_dump(path)
        lines = path.read_text().splitlines()
        assert dump.format_version == 1
        assert dump.comments == [], f"{path}: lines the reader did not recognise"
        read = {i.line for i in dump.inputs} | {n.line for n in dump.nodes} | {c.line for c in dump.collectives}
        written = {k for k, line in enumerate(lines, start=1) if line.startswith("%")}
        assert read == written
        assert dump.graph == "WithLossCell_train" and dump.purpose == "train"
        assert dump.n_ranks == 8 and dump.mesh == ({"m0": 1} if mode == "data" else {"m0": 2, "m1": 2, "m2": 2})
        assert [n.instance_name for n in dump.nodes] == ["matmul", "relu", "matmul2", "sub", "square",
                                                         "reduce_mean"]
        if dump.kind == "execute":
            assert dump.total_bytes == sum(c.bytes for c in dump.collectives) > 0
            assert dump.rank == int(path.parent.name.removeprefix("rank_"))
        else:
            assert dump.kind == "step_parallel_begin" and dump.returns == ["%9"] and not dump.collectives


def test_semi_auto_strategies_and_provenance(ir_dumps):
    dset = load(ir_dumps["semi"])
    matmul, relu, matmul2 = dset.begin.nodes[:3]
    assert matmul.kind == "MatMul" and matmul.in_strategy == ((2, 4), (4, 1)) and matmul.hint == ((2, 4), (4, 1))
    assert matmul.provenance.kind == "user" and matmul.device_matrix == (2, 4, 1)
    assert matmul.primitive_attrs["transpose_a"] is False and matmul.primitive_attrs["out_strategy"] is None
    assert matmul.in_layouts == [(("m0",), ("m1", "m2")), (("m1", "m2"), ())]
    assert matmul.scope == "Default/network-WithLossCell/_backbone-Net"
    assert relu.in_strategy == ((8, 1),) and relu.hint is None
    assert (relu.provenance.kind, relu.provenance.detail) == ("default", "data parallel")
    assert matmul2.in_strategy == ((8, 1), (1, 1))


def test_auto_propagation_from_the_hint(ir_dumps):
    dset = load(ir_dumps["auto"])
    matmul, relu, matmul2 = dset.begin.nodes[:3]
    assert matmul.provenance.kind == "user"
    assert relu.in_strategy == ((2, 4),)
    assert (relu.provenance.kind, relu.provenance.source, relu.provenance.source_name, relu.provenance.cost) == (
        "propagated", 0, "matmul", 0.0)
    # the cost model's record of the choice survives the dump: no edge bytes (the AllReduce + slice is a
    # ReduceScatter whose saving pays the backward gather), the op's own work and memory
    assert relu.provenance.breakdown["edge_bytes"] == 0.0 and relu.provenance.breakdown["flops"] > 0
    assert relu.provenance.breakdown["memory_bytes"] > 0
    assert matmul2.in_strategy == ((2, 4), (4, 1)) and matmul2.provenance.source_name == "relu"
    weight = dset.begin.inputs[0]
    assert (weight.name, weight.role, weight.type.shape) == ("%para0_w", "Parameter", (32, 16))
    assert weight.layout == (("m1", "m2"), ()) and weight.split == (4, 1)


@pytest.mark.parametrize("rank, group", [(0, (0, 1, 2, 3)), (4, (4, 5, 6, 7))])
def test_execute_groups_and_per_device_shapes(ir_dumps, rank, group):
    dset = load(ir_dumps["auto"], rank=rank)
    assert dset.rank == rank and dset.ranks == list(range(8))
    matmul = dset.execute.nodes[0]
    assert [t.shape for t in matmul.input_types] == [(8, 8), (8, 16)]
    assert [t.shape for t in matmul.output_types] == [(8, 16)]
    assert matmul.input_types[0].dtype == "Float32"
    partial_sum = [c for c in matmul.collectives if c.kind == "AllReduce" and c.cause == "operator"]
    assert len(partial_sum) == 1
    c = partial_sum[0]
    assert (c.op, c.group, c.pass_, c.node, c.bytes) == ("sum", group, "forward", 0, 8 * 16 * 4)
    assert c.attrs["group_ranks"] == "-".join(map(str, group)) and c.arg == "%4"
    assert dset.execute.inputs[0].type.shape == (8, 16)  # para0_w split (4, 1)
    assert dset.global_types(matmul)[0][0].shape == (16, 32)


def test_directory_picks_the_newest_train_graph(ir_dumps, tmp_path):
    rank_dir = tmp_path / "rank_0"
    shutil.copytree(ir_dumps["auto"] / "rank_0", rank_dir)
    begin = next(rank_dir.glob("step_parallel_begin_*.ir"))
    train_index = int(begin.stem.rsplit("_", 1)[1])
    forward = begin.read_text().replace("WithLossCell_train  purpose: train", "WithEvalCell_forward  purpose: forward")
    (rank_dir / "step_parallel_begin_0099.ir").write_text(forward)
    assert load(rank_dir).index == train_index
    assert load(tmp_path).index == train_index  # ir_dumps/ -> rank_0
    chosen = load(rank_dir, index=99)
    assert (chosen.begin.purpose, chosen.execute, chosen.indexes) == ("forward", None, sorted({train_index, 99}))
    absent = next(i for i in range(1, 100) if i not in (train_index, 99))  # the index counts the process's graphs
    with pytest.raises(DumpError, match=f"no dump with index {absent:04d}; found"):
        load(rank_dir, index=absent)
    with pytest.raises(DumpError, match="no rank_3 directory"):
        load(tmp_path, rank=3)


def test_a_file_brings_its_twin(ir_dumps):
    execute = next((ir_dumps["semi"] / "rank_2").glob("*_execute_*.ir"))
    dset = load(execute)
    assert dset.execute.path == str(execute) and dset.begin is not None and dset.rank == 2


def test_errors_name_file_and_line(tmp_path, ir_dumps):
    path = tmp_path / "x.ir"
    lines = next((ir_dumps["auto"] / "rank_0").glob("*_execute_*.ir")).read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("%4(out) = MatMul("))
    lines[k] = lines[k].replace("} primitive_attrs", " primitive_attrs", 1)  # the instance name's brace lost
    path.write_text("\n".join(lines))
    with pytest.raises(DumpError) as err:
        read_dump(path)
    assert err.value.line == k + 1 and str(err.value).startswith(f"{path}:{k + 1}: cannot parse")
    with pytest.raises(DumpError, match="no such file"):
        read_dump(tmp_path / "missing.ir")
    path.write_text("hello\n")
    with pytest.raises(DumpError, match=r":1: not a graphpar IR dump"):
        read_dump(path)
    with pytest.raises(DumpError, match=r":2: cannot parse: format 2 is newer"):
        parse_text("# graphpar IR dump: execute\n# format: graphpar-ir 2\n", path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DumpError, match="no IR dumps here"):
        load(tmp_path / "empty")


def test_value_grammar():
    assert parse_tuple("((8), (), ())") == ((8,), (), ())  # MindSpore prints one-element tuples without comma
    assert parse_tuple("(2, 4, 1)") == (2, 4, 1) and parse_tuple("(8,)") == (8,)
    assert parse_value("true") is True and parse_value("None") is None and parse_value("0.5") == 0.5
    assert parse_value("0-1-2-3") == "0-1-2-3"
    assert parse_value("redistribution of input 0") == "redistribution of input 0"
    attrs = split_attrs("dimension_numbers: (((1), (0)), ((), ())), name: f(a, b: c), axis: -1")
    assert attrs == {"dimension_numbers": (((1,), (0,)), ((), ())), "name": "f(a, b: c)", "axis": -1}
    assert split_attrs("odd: ((, b: 1") == {"odd": "((", "b": 1}  # an unbalanced string value
    assert split_attrs("") == {}
    fallback = parse_provenance("fallback: no sharding rule for 'cumsum': replicated")
    assert (fallback.kind, fallback.detail) == ("fallback", "no sharding rule for 'cumsum': replicated")
    assert parse_provenance("propagated from dense.matmul (node 12) at cost 1.5e+06 B").cost == 1.5e6


def test_mixed_network_lines(ir_dumps):
    """Dense layers, a raw jnp equation with a constant, a two-output op, a parameter conflict, unattributed
    collectives, and an eval graph next to the train graph."""
    for path in _files(ir_dumps["mixed"]):
        dump = read_dump(path)
        read = {i.line for i in dump.inputs} | {n.line for n in dump.nodes} | {c.line for c in dump.collectives}
        written = {k for k, line in enumerate(path.read_text().splitlines(), start=1) if line.startswith("%")}
        assert dump.comments == [] and read == written
    rank_dir = ir_dumps["mixed"] / "rank_0"
    assert len(list(rank_dir.glob("step_parallel_begin_*.ir"))) == 2  # train and eval graphs
    dset = load(rank_dir)
    assert dset.begin.purpose == "train" and dset.execute is not None and len(dset.indexes) == 2
    eval_index = max(dset.indexes) if max(dset.indexes) != dset.index else min(dset.indexes)
    assert load(rank_dir, index=eval_index).begin.purpose == "forward"
    nodes = dset.execute.nodes
    assert [n.instance_name for n in nodes].count("matmul") == 3  # dense.matmul, matmul, out.matmul
    mul = next(n for n in nodes if n.kind == "mul")
    assert mul.args[1].startswith("%const") and mul.in_strategy == ((8, 1), ())
    loss = next(n for n in nodes if n.kind == "SoftmaxCrossEntropyWithLogits")
    assert len(loss.outputs) == 2 and len(loss.output_types) == 2
    (conflict,) = dset.begin.conflicts
    assert conflict.parameter == "w" and [w[0] for w in conflict.wanted] == ["matmul", "matmul_b"]
    assert ("matmul", conflict.wanted[0][1], (("m1", "m2"), ())) == conflict.wanted[0]
    assert dset.execute.unattributed and all(c.node is None and c.arg == "" for c in dset.execute.unattributed)
    assert dset.execute.total_bytes == sum(c.bytes for c in dset.execute.collectives)


@pytest.mark.parametrize("mode", ["semi", "auto", "mixed"])
def test_fused_gradient_reductions_name_their_parameters(ir_dumps, mode):
    dset = load(ir_dumps[mode])
    fused = [c for c in dset.execute.collectives if c.cause == "gradient reduction"]
    params = {i.name.removeprefix("%para").split("_", 1)[-1] for i in dset.execute.inputs if i.role == "Parameter"}
    for c in fused:  # one fused AllReduce carries several parameters' gradients, listed by name
        assert c.kind == "AllReduce" and c.pass_ == "backward" and c.node is None
        assert c.parameters and set(c.parameters) <= params, (c.parameters, params)
    # every collective counts once in the totals, measured and predicted in the same unit
    ex = dset.execute
    assert ex.total_wire_bytes == pytest.approx(sum(c.wire_bytes for c in ex.collectives))
    assert ex.total_predicted_bytes == pytest.approx(sum(n.predicted_bytes for n in ex.nodes))
    if mode != "mixed":
        assert fused

"""``graphpar.parallel.plan``: the in-memory plan is what the dumps say, its views are what ``graphpar ir`` prints."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
import graphpar.parallel
from graphpar.cli.main import main as cli
from graphpar.dump.reader import read_dump
from graphpar.nn import Momentum, MSELoss, TrainOneStepCell, WithLossCell
from graphpar.parallel.plan_api import PlanError
from graphpar.train import Model
from graphpar.viz.plan import PlanView

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from quickstart import Net  # noqa: E402  (seed 004's network, as the example ships it)


def _auto(dumps: Path | None = None, mode: str = "auto_parallel") -> None:
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=dumps is not None,
                   **({"save_graphs_path": str(dumps)} if dumps is not None else {}))
    ms.set_auto_parallel_context(parallel_mode=mode, search_mode="sharding_propagation",
                                 dataset_strategy="data_parallel")


def _batch():
    rng = np.random.default_rng(1)
    return rng.random((16, 32), dtype=np.float32), rng.random((16, 16), dtype=np.float32)


def _cell():
    net = Net(32, 16, 16)
    return TrainOneStepCell(WithLossCell(net, MSELoss()), Momentum(net.trainable_params(), 0.2, 0.1))


def _cli(capsys, *argv: str) -> str:
    capsys.readouterr()
    assert cli(list(argv)) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def auto_plan(tmp_path_factory):
    """Seed 004's train step planned in memory under AUTO_PARALLEL, with save_graphs on (so its dumps exist)."""
    from graphpar import _context

    dumps = tmp_path_factory.mktemp("plan") / "ir_dumps"
    _context.reset_context()
    _context.reset_auto_parallel_context()
    _auto(dumps)
    plan = graphpar.parallel.plan(_cell(), *_batch())
    _context.reset_context()
    _context.reset_auto_parallel_context()
    return plan, dumps


def test_summary_equals_the_cli_on_the_same_programs_dumps(auto_plan, capsys):
    plan, dumps = auto_plan
    printed = _cli(capsys, "ir", "summary", str(dumps))
    assert plan.summary() == printed
    assert "matmul2" in printed and "total collective bytes per step (rank 0)" in printed
    for rank in (3, 6):  # other ranks: their own collective groups
        assert plan.summary(rank) == _cli(capsys, "ir", "summary", str(dumps), "--rank", str(rank))
    assert plan.explain("matmul2") == _cli(capsys, "ir", "explain", str(dumps), "matmul2")


def test_in_memory_dumps_are_the_files(auto_plan):
    plan, dumps = auto_plan
    for rank in (0, 5):
        dset = plan.dumps(rank)
        for mine, path in ((dset.begin, dset.begin.path), (dset.execute, dset.execute.path)):
            assert Path(path).parent == dumps / f"rank_{rank}"
            other = read_dump(path)
            assert [(n.id, n.instance_name, n.in_strategy, n.output_types, [c.bytes for c in n.collectives])
                    for n in mine.nodes] == \
                   [(n.id, n.instance_name, n.in_strategy, n.output_types, [c.bytes for c in n.collectives])
                    for n in other.nodes]
            assert mine.total_bytes == other.total_bytes


def test_collectives_memory_json(auto_plan):
    plan, _ = auto_plan
    execute = plan.dumps().execute
    rows = plan.collectives()
    assert len(rows) == len(execute.collectives) > 0
    assert sum(r["bytes"] for r in rows) == execute.total_bytes
    assert {r["op"] for r in rows} >= {"matmul", "matmul2"}
    assert "AllReduce" in str(rows)
    memory = {r["name"]: r for r in plan.memory()}
    # w (32, 16) float32 split 4 ways on its rows: 2048 B global, 512 B per device
    assert (memory["%para0_w"]["bytes"], memory["%para0_w"]["device_bytes"]) == (2048, 512)
    assert memory["total Parameter"]["device_bytes"] == 512 + 256
    assert memory["XLA temp bytes"]["device_bytes"] >= 0
    data = json.loads(plan.to_json())
    assert data["summary"]["total_collective_bytes"] == execute.total_bytes
    assert set(data["ranks"]) == {str(r) for r in range(8)}
    assert len(data["ranks"]["7"]["execute"]["nodes"]) == len(execute.nodes)


def test_html_views_have_one_row_per_op(auto_plan):
    plan, dumps = auto_plan
    html = plan._repr_html_()
    n = len(plan.dumps().main.nodes)
    assert html.count('<tr class="op-row">') == n
    begin = plan.dumps().begin  # a device grid for every value: graph inputs and op outputs
    assert set(re.findall(r'data-value="([^"]+)"', html)) == ({i.name for i in begin.inputs}
                                                            | {out for n in begin.nodes for out in n.outputs})
    assert "<svg" in html and "gp-layout-change" in html  # matmul's input 0 is redistributed (an AlltoAll)
    assert plan.summary()._repr_html_().count('<tr class="op-row">') == n
    assert 'data-tensor="input 1 %para1_w2"' in plan.explain("matmul2")._repr_html_()
    dump = read_dump(plan.dumps().execute.path)
    assert dump._repr_html_().count('<tr class="op-row">') == n
    loaded = PlanView.from_dumps(dumps)
    assert loaded.ranks == list(range(8)) and loaded.summary() == plan.summary()


def test_diff_of_two_plans_equals_the_cli(auto_plan, tmp_path, capsys):
    plan, dumps = auto_plan
    semi_dumps = tmp_path / "semi"
    _auto(semi_dumps, "semi_auto_parallel")
    semi = graphpar.parallel.plan(_cell(), *_batch())
    diff = semi.diff(plan)
    assert diff == _cli(capsys, "ir", "diff", str(semi_dumps), str(dumps))
    changed = {o["instance_name"]: o for o in diff.data["ops"] if o["status"] == "changed"}
    assert changed["matmul2"]["strategy_a"] == [[8, 1], [1, 1]]
    assert changed["matmul2"]["strategy_b"] == [[2, 4], [4, 1]]
    assert 'class="diff-row' in diff._repr_html_()


def test_plan_of_a_trained_model_and_of_a_network(tmp_path, capsys):
    dumps = tmp_path / "ir_dumps"
    _auto(dumps)
    x, y = _batch()
    net = Net(32, 16, 16)
    model = Model(net, MSELoss(), Momentum(net.trainable_params(), 0.2, 0.1))
    with pytest.raises(PlanError, match="has not run a step yet"):
        graphpar.parallel.plan(model)
    model.train(1, ds.GeneratorDataset(lambda: iter([(x[:2], y[:2])]), ["input", "label"]))
    plan = graphpar.parallel.plan(model)
    assert plan.summary() == _cli(capsys, "ir", "summary", str(dumps))
    assert plan.dumps().main.nodes[0].in_strategy == ((2, 4), (4, 1))
    forward = graphpar.parallel.plan(net, x)
    assert forward.dumps().main.purpose == "forward"
    assert [n.instance_name for n in forward.dumps().main.nodes] == ["matmul", "relu", "matmul2"]
    from graphpar.compile.runtime.forward import program_for

    graph = program_for(net).planned(x).graph  # a planned Graph shows itself too
    assert graph._repr_html_().count('<tr class="op-row">') == 3
    with pytest.raises(PlanError, match="example inputs are needed"):
        graphpar.parallel.plan(net)


def test_pynative_has_no_plan():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    with pytest.raises(PlanError, match="PYNATIVE_MODE .* set_context\\(mode=GRAPH_MODE\\)"):
        graphpar.parallel.plan(_cell(), *_batch())


def test_html_page_without_a_browser(auto_plan, tmp_path, capsys):
    """The page itself (the Chromium test checks it renders): every rank's table has one row per op."""
    plan, dumps = auto_plan
    page = tmp_path / "plan.html"
    assert cli(["ir", "html", str(dumps), "-o", str(page)]) == 0
    text = page.read_text()
    n = len(plan.dumps().main.nodes)
    for rank in range(8):
        table = re.search(rf'<table class="gp-table op-table" data-rank="{rank}"[^>]*data-kind="summary">(.*?)'
                          r"</table>", text, re.S)
        assert table is not None and table.group(1).count('<tr class="op-row">') == n
    assert text.count('class="gp-panel"') == 8 and "<script>" in text and "<svg" in text
    capsys.readouterr()
    assert cli(["ir", "html", str(tmp_path / "missing"), "-o", str(page)]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_a_report_shows_as_printed_in_a_terminal_repl(auto_plan):
    """A terminal REPL shows ``plan.explain(...)``'s repr: the report's lines, not an escaped one-line string."""
    report = auto_plan[0].explain("matmul2")
    assert repr(report) == str(report) and "\n" in repr(report) and "\\n" not in repr(report)


def test_the_lazy_subpackages_are_in_dir_for_tab_completion():
    assert {"parallel", "train", "dataset", "communication", "amp"} <= set(dir(ms))


def test_a_data_parallel_plan_says_it_runs_one_replica_per_device():
    """DATA_PARALLEL plans the graph unsplit (mesh m0=1) and runs it on every device: the views say so instead of
    showing a one-device mesh on 8 devices."""
    from graphpar import _context

    _context.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="data_parallel")
    try:
        plan = graphpar.parallel.plan(_cell(), *_batch())
    finally:
        _context.reset_auto_parallel_context()
    assert "8 data-parallel replicas of the unsplit graph (mesh m0=1)" in repr(plan)
    assert "data_parallel / recursive_programming, 8 data-parallel replicas" in plan.summary()


def test_collective_groups_read_as_rank_lists_and_the_gradient_reduction_is_named(auto_plan):
    """"ranks 0-4" read as the range 0..4 where the group is {0, 4}; the gradient AllReduce was the largest bar of
    the charts under "(not attributed)"."""
    plan, _ = auto_plan
    summary = plan.summary(wide=True)
    assert "ranks 0,1,2,3" in summary and "ranks 0,4 [gradient reduction]" in summary
    assert "ranks 0-4" not in summary
    html = plan._repr_html_()
    assert "(gradient reduction)" in html and "(not attributed)" not in html

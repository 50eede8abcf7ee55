"""``graphpar plan``'s documented argument forms, ``--all``, ``--json``, ``--dump DIR``, the note on replicated
devices, and the reading methods of ``plan_for_devices``'s result (issue 26: only ``graphpar plan --devices N --
SCRIPT ARGS`` worked, the table stopped at 60 ops, and a plan hinted for 8 devices was printed for 1,024 without a
word that the others only repeat the work)."""

import json
import textwrap

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.cli.main import main
from graphpar.dump.loading import load

# A script with arguments of its own: --depth sets how many ReLU + Add pairs it stacks (2 ops each).
SCRIPT = textwrap.dedent('''
    import argparse
    import numpy as np
    import graphpar as ms
    from graphpar import nn, ops
    from graphpar.train import Model

    parser = argparse.ArgumentParser()
    parser.add_argument("--depth", type=int, required=True)
    parser.add_argument("--verbose", action="store_true")
    depth = parser.parse_args().depth

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.dense = nn.Dense(16, 16)
            self.dense.matmul.shard(((2, 4), (1, 4)))
            for i in range(depth):  # named relu0, add0, relu1, ...: their attribute names
                setattr(self, f"relu{i}", ops.ReLU())
                setattr(self, f"add{i}", ops.Add())
            self.depth = depth

        def construct(self, x):
            x = self.dense(x)
            for i in range(self.depth):
                x = getattr(self, f"add{i}")(getattr(self, f"relu{i}")(x), x)
            return x

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    net = Net()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    train(np.ones((64, 16), np.float32), np.ones((64, 16), np.float32))
''')


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.setenv("SAVE_GRAPHS_PATH", str(tmp_path / "ir_dumps"))
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    yield str(path)
    ms.reset_auto_parallel_context()


@pytest.mark.parametrize("form", [
    ["{s}", "--devices", "8", "--depth", "3"],
    ["{s}", "--devices", "8", "--", "--depth", "3"],
    ["--devices", "8", "{s}", "--depth", "3", "--verbose"],
    ["--devices", "8", "--", "{s}", "--depth", "3"],
    ["--devices=8", "{s}", "--depth=3"],
])
def test_every_documented_argument_form_plans_the_script_with_its_arguments(script, form, capsys):
    assert main(["plan"] + [t.format(s=script) for t in form]) == 0
    out = capsys.readouterr().out
    assert out.startswith("plan for 8 devices (semi_auto_parallel")
    assert "relu2" in out and "relu3" not in out  # --depth 3 reached the script: relu0, relu1, relu2


def test_all_lists_every_op_where_the_default_stops_at_60(script, capsys):
    assert main(["plan", script, "--devices", "8", "--depth", "40"]) == 0
    short = capsys.readouterr().out
    assert "more ops (graphpar plan --all" in short and "relu39" not in short
    assert main(["plan", script, "--devices", "8", "--all", "--depth", "40"]) == 0
    full = capsys.readouterr().out
    assert "relu39" in full and "more ops" not in full


def test_json_is_the_plan_as_data(script, capsys):
    assert main(["plan", "--json", "--devices", "8", script, "--depth", "2"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["devices"] == 8 and plan["parallel_mode"] == "semi_auto_parallel"
    matmul = next(op for op in plan["ops"] if op["instance_name"] == "matmul")
    assert matmul["strategy"] == [[2, 4], [1, 4]] and matmul["provenance"] == "user"
    assert plan["predicted"]["collective_bytes_per_step"] > 0 and plan["replica_note"] is None


def test_dump_writes_a_begin_dump_graphpar_ir_reads(script, tmp_path, capsys):
    assert main(["plan", script, "--devices", "8", "--dump", str(tmp_path / "plan"), "--depth", "2"]) == 0
    assert "graphpar plan: wrote" in capsys.readouterr().out
    dumps = load(tmp_path / "plan" / "rank_0")
    assert dumps.begin is not None and dumps.execute is None
    matmul = next(n for n in dumps.begin.nodes if n.instance_name == "matmul")
    assert matmul.in_strategy == ((2, 4), (1, 4))
    assert main(["ir", "explain", str(tmp_path / "plan" / "rank_0"), "relu1"]) == 0
    assert "relu1" in capsys.readouterr().out


def test_a_plan_hinted_for_8_devices_says_the_other_devices_only_repeat_it(script, capsys):
    assert main(["plan", script, "--devices", "1024", "--depth", "1"]) == 0
    out = capsys.readouterr().out
    note = next(line for line in out.splitlines() if line.startswith("note:"))
    assert "1 of 7 ops split their work over fewer than the 1024 devices" in note
    assert "matmul on 8 (x128)" in note


class _Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(32, 16)
        self.dense.matmul.shard(((2, 4), (1, 4)))
        self.relu = ops.ReLU()

    def construct(self, x):
        return self.relu(self.dense(x))


def test_plan_for_devices_reads_as_text_json_explanation_and_html():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    try:
        plan = ms.parallel.plan_for_devices(nn.WithLossCell(_Net(), nn.MSELoss()), np.ones((64, 32), np.float32),
                                            np.ones((64, 16), np.float32), devices=8)
    finally:
        ms.reset_auto_parallel_context()
    assert plan.summary().startswith("plan for 8 devices") and str(plan) == plan.text()
    assert json.loads(plan.to_json())["mesh"] == dict(plan.mesh.shape)
    why = plan.explain("relu")
    assert why.splitlines()[0].startswith("relu") and "strategy" in why
    html = plan._repr_html_()
    assert "matmul" in html and "<table" in html

"""``graphpar plan SCRIPT --devices N`` on the seed 004 port whose hint does not fit N devices: the answer is one
line naming the op, scope, strategy and a strategy that fits (it was a Python traceback), exit status 2."""

from pathlib import Path

from graphpar.cli.main import main

QUICKSTART = Path(__file__).parents[2] / "examples" / "quickstart.py"


def test_a_strategy_that_does_not_fit_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SAVE_GRAPHS_PATH", str(tmp_path / "ir_dumps"))
    assert main(["plan", str(QUICKSTART), "--devices", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"graphpar plan: {QUICKSTART} on 4 devices: StrategyError: op 'matmul' in scope "
                              "Default/network-WithLossCell/_backbone-Net: invalid strategy ((2, 4), (4, 1))")
    assert err[-1].endswith("e.g. ((2, 2), (2, 1))")


def test_a_fitting_device_count_still_plans(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SAVE_GRAPHS_PATH", str(tmp_path / "ir_dumps"))
    assert main(["plan", str(QUICKSTART), "--devices", "16"]) == 0
    assert "collective bytes per step" in capsys.readouterr().out

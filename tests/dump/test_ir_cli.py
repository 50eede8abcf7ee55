"""``graphpar ir show|summary|diff|explain`` on real dumps, with and without ``--json``, and their errors.

(Here rather than in tests/cli/ so that it shares the ``ir_dumps`` fixture of tests/dump/conftest.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphpar.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["ir", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def execute_file(root: Path, rank: int = 0) -> Path:
    return next((root / f"rank_{rank}").glob("*_execute_*.ir"))


def test_show(ir_dumps, capsys):
    path = execute_file(ir_dumps["auto"], 4)
    code, out, _ = run(capsys, "show", path)
    assert code == 0
    assert "execute dump (format 1)" in out and "rank 4 of 8" in out
    assert "%para0_w" in out and "(m1.m2, -)" in out
    assert "AllReduce(sum) fwd 512 B ranks 4,5,6,7" in out
    assert "total collective bytes per step (rank 4):" in out
    code, wide, _ = run(capsys, "show", path, "--wide")  # one line per node, its scope in a column
    assert code == 0 and "AllReduce(sum) fwd 512 B ranks 4,5,6,7" in wide and "scope Default/" in out
    assert "Default/network-WithLossCell/_backbone-Net" in wide and "scope Default/" not in wide
    code, out, _ = run(capsys, "show", path, "--json")
    data = json.loads(out)
    assert code == 0 and data["kind"] == "execute" and data["rank"] == 4
    matmul = data["nodes"][0]
    assert matmul["strategy"] == [[2, 4], [4, 1]] and matmul["provenance"]["kind"] == "user"
    assert [t["shape"] for t in matmul["input_types"]] == [[8, 8], [8, 16]]
    assert data["total_collective_bytes"] == sum(c["bytes"] for n in data["nodes"] for c in n["collectives"]) + sum(
        c["bytes"] for c in data["unattributed_collectives"])


def test_summary(ir_dumps, capsys):
    code, out, _ = run(capsys, "summary", ir_dumps["auto"] / "rank_0")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("0 "))
    assert "matmul" in row and "((2, 4), (4, 1))" in row and "user" in row and "(8, 8), (8, 16) -> (8, 16)" in row
    assert "from matmul (node 0), 0 B" in out
    assert "total collective bytes per step (rank 0):" in out
    assert "collective wire bytes per step (rank 0): measured " in out and ", predicted " in out
    code, out, _ = run(capsys, "summary", ir_dumps["auto"], "--rank", "4", "--json")
    data = json.loads(out)
    assert set(data) == {"source", "graph", "purpose", "index", "indexes", "rank", "n_ranks", "ranks",
                         "parallel_mode", "search_mode", "mesh", "note", "begin", "execute", "ops",
                         "unattributed_collectives", "parameter_conflicts", "total_collective_bytes",
                         "total_wire_bytes", "total_predicted_bytes"}
    assert data["rank"] == 4 and data["ranks"] == list(range(8))
    matmul = data["ops"][0]
    assert set(matmul) == {"node", "instance_name", "kind", "scope", "strategy", "hint", "provenance",
                           "device_matrix", "global_shapes", "device_shapes", "collectives", "collective_bytes",
                           "wire_bytes", "measured_bytes", "predicted_bytes"}
    assert matmul["global_shapes"]["inputs"] == [[16, 32], [32, 16]]
    assert matmul["device_shapes"] == {"inputs": [[8, 8], [8, 16]], "outputs": [[8, 16]]}
    assert any(c["kind"] == "AllReduce" and c["group"] == [4, 5, 6, 7] for c in matmul["collectives"])
    assert matmul["collective_bytes"] == sum(c["bytes"] for c in matmul["collectives"])
    # predicted (cost model) and measured (HLO) wire bytes, per op and in total: this plan is predicted exactly
    assert matmul["wire_bytes"] == sum(c["wire_bytes"] for c in matmul["collectives"]) > 0
    assert matmul["predicted_bytes"] is not None
    # measured counted as predicted is (graphpar.dump.attribution): equal op by op here
    assert all(o["measured_bytes"] == pytest.approx(o["predicted_bytes"]) for o in data["ops"])
    assert data["total_wire_bytes"] > 0 and abs(data["total_predicted_bytes"] - data["total_wire_bytes"]) <= \
        0.1 * data["total_wire_bytes"]


def test_diff(ir_dumps, capsys):
    semi, auto = ir_dumps["semi"] / "rank_0", ir_dumps["auto"] / "rank_0"
    code, out, _ = run(capsys, "diff", semi, auto)
    assert code == 0
    relu = next(line for line in out.splitlines() if line.startswith("relu "))
    assert "changed" in relu and "((8, 1))" in relu and "((2, 4))" in relu
    assert "total collective bytes per step: A " in out
    code, out, _ = run(capsys, "diff", execute_file(ir_dumps["semi"]), execute_file(ir_dumps["auto"]), "--json")
    data = json.loads(out)
    ops = {o["instance_name"]: o for o in data["ops"]}
    assert ops["matmul2"]["status"] == "changed"
    assert (ops["matmul2"]["strategy_a"], ops["matmul2"]["strategy_b"]) == ([[8, 1], [1, 1]], [[2, 4], [4, 1]])
    assert ops["matmul"]["status"] == "same"
    assert data["total_collective_bytes_delta"] == data["total_collective_bytes_b"] - data[
        "total_collective_bytes_a"]
    assert ops["matmul2"]["collective_bytes_delta"] == (ops["matmul2"]["collective_bytes_b"]
                                                        - ops["matmul2"]["collective_bytes_a"])


def test_explain(ir_dumps, capsys):
    code, out, _ = run(capsys, "explain", ir_dumps["auto"], "matmul2")
    assert code == 0
    assert out.splitlines()[0] == "matmul2 \u2190 relu \u2190 matmul (user hint ((2, 4), (4, 1)))"
    assert "redistribution cost along the chain: 0 B per device" in out
    code, out, _ = run(capsys, "explain", ir_dumps["auto"] / "rank_0", "node:2", "--json")
    data = json.loads(out)
    assert [c["instance_name"] for c in data["chain"]] == ["matmul2", "relu", "matmul"]
    assert [c["edge_cost"] for c in data["chain"]] == [0.0, 0.0, None]
    assert data["root"] == {"node": 0, "instance_name": "matmul", "reason": "user", "hint": [[2, 4], [4, 1]]}
    code, out, _ = run(capsys, "explain", ir_dumps["semi"], "relu")
    assert out.splitlines()[0] == "relu (default: data parallel)"


def test_rich_table_on_a_terminal(ir_dumps, capsys, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, _ = run(capsys, "explain", ir_dumps["auto"], "matmul2")
    assert code == 0 and "\u2503" in out and "matmul2" in out  # rich's heavy box border


def test_console_script(ir_dumps):
    script = Path(sys.executable).with_name("graphpar")
    if not script.exists():
        pytest.skip("the graphpar console script is not installed in this environment")
    proc = subprocess.run([str(script), "ir", "summary", str(ir_dumps["auto"]), "--json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ops"][1]["provenance"]["source_name"] == "matmul"


def test_errors(ir_dumps, capsys, tmp_path):
    code, out, err = run(capsys, "show", tmp_path / "x.ir")
    assert code == 2 and f"{tmp_path / 'x.ir'}: no such file" in err and "Traceback" not in err
    garbled = tmp_path / "x.ir"
    lines = execute_file(ir_dumps["auto"]).read_text().splitlines()
    lines[6] = "%4(out) = MatMul("
    garbled.write_text("\n".join(lines))
    code, out, err = run(capsys, "show", garbled)
    assert code == 2 and err.startswith(f"{garbled}:7: cannot parse") and "Traceback" not in err
    (tmp_path / "empty").mkdir()
    code, out, err = run(capsys, "summary", tmp_path / "empty")
    assert code == 2 and "no IR dumps here" in err
    code, out, err = run(capsys, "explain", ir_dumps["auto"], "conv9")
    assert code == 2 and "no op 'conv9'; ops: matmul, relu, matmul2" in err
    code, out, err = run(capsys, "diff", ir_dumps["auto"], tmp_path / "empty")
    assert code == 2 and "empty: no IR dumps here" in err
    with pytest.raises(SystemExit) as exit_:
        main(["ir", "summary", str(ir_dumps["auto"]), "--index", "abc"])
    assert exit_.value.code == 2


def test_ambiguous_op_and_unattributed_rows(ir_dumps, capsys):
    code, out, err = run(capsys, "explain", ir_dumps["mixed"], "matmul")
    assert code == 2 and "'matmul' names 3 ops: node:0 (" in err and "pick one with node:N" in err
    code, out, _ = run(capsys, "explain", ir_dumps["mixed"], "Default/network-WithLossCell/_backbone-MixedNet/matmul")
    assert code == 0 and out.startswith("matmul (user hint ((2, 4), (4, 1)))")
    code, out, _ = run(capsys, "summary", ir_dumps["mixed"])
    assert code == 0 and "(not attributed)" in out and "parameter conflict: w stored as" in out
    assert "other graphs here:" in out

"""The example notebooks run top to bottom, headless, on 8 simulated CPU devices (nbclient + this venv's kernel).

The kernel is registered in a temporary prefix by ``python -m ipykernel install`` with the interpreter running the
tests, so a fresh clone needs nothing by hand. Each notebook runs in its own temporary directory (with the example
files it imports), so dumps and data land there, not in ``examples/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need the test extra: pip install -e '.[test]'")
nbclient = pytest.importorskip("nbclient", reason="the notebook tests need the test extra: pip install -e '.[test]'")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KERNEL = "graphpar-tests"


@pytest.fixture(scope="session")
def kernel(tmp_path_factory):
    """A Jupyter kernel spec for this interpreter, in a temporary prefix found through JUPYTER_PATH."""
    prefix = tmp_path_factory.mktemp("jupyter")
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(prefix), "--name", KERNEL],
                   check=True, capture_output=True)
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(prefix / "share" / "jupyter") + (os.pathsep + old if old else "")
    spec = json.loads((prefix / "share" / "jupyter" / "kernels" / KERNEL / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    yield KERNEL
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old


def run_notebook(name: str, kernel: str, workdir: Path, extra: tuple[str, ...] = (), timeout: int = 900):
    for f in extra:
        shutil.copy(EXAMPLES / f, workdir / f)
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    env_before = os.environ.get("GRAPHPAR_PROGRESS")
    os.environ.pop("GRAPHPAR_PROGRESS", None)  # the notebook decides by itself that it is a notebook
    try:
        client = nbclient.NotebookClient(nb, kernel_name=kernel, timeout=timeout,
                                         resources={"metadata": {"path": str(workdir)}})
        client.execute()
    finally:
        if env_before is not None:
            os.environ["GRAPHPAR_PROGRESS"] = env_before
    return nb


def _outputs(cell, mime: str) -> list[str]:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream" and mime == "text/plain":
            out.append(o["text"])
        elif mime in o.get("data", {}):
            value = o["data"][mime]
            out.append(value if isinstance(value, str) else "".join(value))
    return out


def _cell(nb, text: str):
    return next(c for c in nb.cells if c.cell_type == "code" and text in c.source)


def test_committed_notebooks_have_no_outputs():
    for path in sorted(EXAMPLES.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: strip the outputs"


def _widget_text(nb) -> str:
    """Text the widgets (rich's live progress display) captured, from the stored widget state."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    return json.dumps(state)


def test_quickstart_notebook(kernel, tmp_path):
    nb = run_notebook("quickstart.ipynb", kernel, tmp_path)
    shown = "".join(_outputs(_cell(nb, "plan = graphpar.parallel.plan("), "text/html"))
    assert shown.count('<tr class="op-row">') == 6 and "gp-layout-change" in shown
    summary = "".join(_outputs(_cell(nb, "print(plan.summary())"), "text/plain"))
    assert "matmul2" in summary and "total collective bytes per step (rank 0)" in summary
    explain = "".join(_outputs(_cell(nb, 'plan.explain("matmul2")'), "text/html"))
    assert "matmul2 \u2190 relu \u2190 matmul (user hint ((2, 4), (4, 1)))" in explain
    train = _cell(nb, "model.train(epoch_size")
    assert _outputs(train, "image/png"), "HistoryPlot draws the loss curve inline"
    progress = _widget_text(nb)  # rich's live bar, in an ipywidgets Output
    assert "epoch 5/5" in progress and "step 4/4" in progress and "img/s" in progress
    assert "epoch: 5 step: 4, loss is" in "".join(_outputs(train, "text/plain"))  # monitor lines next to it
    assert "same plan as before training: True" in "".join(_outputs(_cell(nb, "trained = "), "text/plain"))
    assert (tmp_path / "ir_dumps" / "rank_7").is_dir()


@pytest.mark.slow
def test_transformer_plans_notebook(kernel, tmp_path):
    nb = run_notebook("transformer_plans.ipynb", kernel, tmp_path)
    diff = "".join(_outputs(_cell(nb, "print(diff)"), "text/plain"))
    assert "changed" in diff and "total collective bytes per step: A" in diff
    bytes_cell = "".join(_outputs(_cell(nb, "def bytes_by("), "text/plain"))
    assert "A (hints):" in bytes_cell and "B (data parallel):" in bytes_cell
    # the Megatron hints as MindSpore's transformer sets them leave propagation nothing inconsistent to warn of
    said = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")
    assert "redistribution inserted" in said  # the INFO lines are there (the loss's AllToAll the hints ask for)
    assert "WARNING" not in said


@pytest.mark.slow
def test_resnet_cifar_notebook(kernel, tmp_path):
    nb = run_notebook("resnet_cifar.ipynb", kernel, tmp_path, extra=("make_cifar_like.py",))
    train = _cell(nb, "model.train(4, train_set")
    assert _outputs(train, "image/png")
    assert "epoch 4/4" in _widget_text(nb)
    assert "epoch: 4 step: " in "".join(_outputs(train, "text/plain"))
    said = re.search(r"steps per epoch: (\d+)", "".join(_outputs(_cell(nb, "steps per epoch"), "text/plain")))
    steps = int(said.group(1))  # what the notebook says is what Model.train runs (it said 2 while training 20)
    assert f"step {steps}/{steps}" in _widget_text(nb)
    assert "test accuracy:" in "".join(_outputs(_cell(nb, "model.eval(test_set)"), "text/plain"))

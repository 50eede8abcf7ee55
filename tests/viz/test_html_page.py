"""``graphpar ir html`` opened in headless Chromium (Debian's ``chromium``): no console errors, one table row per
op of every rank's dump, and a screenshot."""

from __future__ import annotations

import os
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import graphpar as ms
import graphpar.parallel
from graphpar.cli.main import main as cli
from graphpar.dump.loading import load
from graphpar.nn import Momentum, MSELoss, TrainOneStepCell, WithLossCell

from .test_plan import Net

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                "(`make test` installs it with apt-get when it can: apt-get install chromium)")


def _chromium(tmp_path: Path, url: str, *mode: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"  # a fresh profile per run
    argv = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
            "--enable-logging=stderr", "--v=0", *mode, url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HOME": str(tmp_path)})


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


class _Rows(HTMLParser):
    """Counts ``tr.op-row`` per ``table.op-table`` (keyed by its data-kind and data-rank)."""

    def __init__(self):
        super().__init__()
        self.tables: dict[tuple[str, str, str], int] = {}
        self._current = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "op-table" in (a.get("class") or ""):
            self._current = (a.get("data-graph"), a.get("data-kind"), a.get("data-rank"))
            self.tables.setdefault(self._current, 0)
        elif tag == "tr" and a.get("class") == "op-row" and self._current is not None:
            self.tables[self._current] += 1

    def handle_endtag(self, tag):
        if tag == "table":
            self._current = None


def _dumps(directory: Path, mode: str) -> Path:
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=True, save_graphs_path=str(directory))
    ms.set_auto_parallel_context(parallel_mode=mode, search_mode="sharding_propagation",
                                 dataset_strategy="data_parallel")
    net = Net(32, 16, 16)
    cell = TrainOneStepCell(WithLossCell(net, MSELoss()), Momentum(net.trainable_params(), 0.2, 0.1))
    rng = np.random.default_rng(0)
    graphpar.parallel.plan(cell, rng.random((16, 32), dtype=np.float32), rng.random((16, 16), dtype=np.float32))
    return directory


def test_page_renders_without_errors_one_row_per_op(tmp_path):
    dumps = _dumps(tmp_path / "ir_dumps", "auto_parallel")
    page = tmp_path / "plan.html"
    assert cli(["ir", "html", str(dumps), "-o", str(page)]) == 0
    text = page.read_text()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text

    run = _chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    assert _console(run.stderr) == []
    parser = _Rows()
    parser.feed(run.stdout)
    for rank in range(8):
        execute = load(dumps, rank=rank).execute
        assert execute is not None
        for kind in ("summary", "execute"):
            assert parser.tables[(execute.graph, kind, str(rank))] == len(execute.nodes) == 6

    shot = tmp_path / "plan.png"
    run = _chromium(tmp_path, page.as_uri(), "--window-size=1400,1800", f"--screenshot={shot}")
    assert run.returncode == 0, run.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_diff_page_renders_and_the_console_check_works(tmp_path):
    a = _dumps(tmp_path / "semi", "semi_auto_parallel")
    b = _dumps(tmp_path / "auto", "auto_parallel")
    page = tmp_path / "diff.html"
    assert cli(["ir", "html", str(a), "--diff", str(b), "-o", str(page)]) == 0
    run = _chromium(tmp_path, page.as_uri(), "--dump-dom")
    assert run.returncode == 0 and _console(run.stderr) == []
    assert run.stdout.count('class="diff-row') == 6
    broken = tmp_path / "broken.html"  # the check above would see an error
    broken.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert any("undefinedFunction" in line for line in _console(_chromium(tmp_path, broken.as_uri(),
                                                                          "--dump-dom").stderr))


@pytest.mark.slow
def test_the_graph_picture_zooms_in_chromium(tmp_path):
    """The page's zoom control in a browser: + scales the picture by 1.25, Ctrl + wheel up zooms in at the
    pointer, 100% restores the drawn size, fit makes it fit its box; no console error."""
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    page_file = tmp_path / "plan.html"
    assert cli(["ir", "html", str(_dumps(tmp_path / "ir_dumps", "auto_parallel")), "--rank", "0",
                "-o", str(page_file)]) == 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_file.as_uri())
            box = page.locator("section .gp-zoom").first
            svg = box.locator("svg")
            width = float(svg.get_attribute("width"))
            box.locator("button[data-zoom-step=in]").click()
            assert svg.bounding_box()["width"] == pytest.approx(1.25 * width, abs=1)
            assert box.locator(".gp-zoom-level").text_content() == "125%"
            scroll = box.locator(".gp-scroll").bounding_box()
            page.mouse.move(scroll["x"] + 40, scroll["y"] + 40)
            page.keyboard.down("Control")
            page.mouse.wheel(0, -100)
            page.keyboard.up("Control")
            page.wait_for_function("document.querySelector('section .gp-zoom').getAttribute('data-zoom') > 1.3")
            box.locator("button[data-zoom-step=reset]").click()
            assert svg.bounding_box()["width"] == pytest.approx(width, abs=1)
            box.locator("button[data-zoom-step=fit]").click()
            fitted, inner = svg.bounding_box(), box.locator(".gp-scroll").bounding_box()
            assert fitted["width"] <= inner["width"] + 1 and fitted["height"] <= inner["height"] + 1
            assert errors == []
        finally:
            browser.close()

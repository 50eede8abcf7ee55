"""``graphpar ir html``'s single-file page read as HTML (no browser): a device grid for every value of the plan,
and zoom controls on every graph picture with the script that drives them, nothing fetched from the network."""

from __future__ import annotations

import math
import re
from html.parser import HTMLParser
from pathlib import Path

from graphpar.cli.main import main as cli
from graphpar.dump.model import layout_text
from graphpar.dump.reader import parse_text
from graphpar.viz.blocks import splits
from graphpar.viz.grids import value_grids
from graphpar.viz.page import ZOOM_JS

from .test_plan import auto_plan  # noqa: F401  (the module-scoped fixture: the quickstart's plan and its dumps)


class _Page(HTMLParser):
    """The grids (``div.gp-grid``: value, layout, block cells) and zoom boxes (``div.gp-zoom``: buttons, svg) of the
    page's first graph section, and its scripts."""

    def __init__(self):
        super().__init__()
        self.grids: list[dict] = []
        self.zooms: list[dict] = []
        self.scripts: list[str] = []
        self._in_script = False
        self._sections = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "section":
            self._sections += 1
        if self._sections != 1 and tag != "script":
            return
        if tag == "div" and "gp-grid" in cls:
            self.grids.append({"value": a.get("data-value"), "layout": a.get("data-layout"), "blocks": 0})
        elif tag == "td" and "gp-block" in cls:
            self.grids[-1]["blocks"] += 1
        elif tag == "div" and "gp-zoom" in cls:
            self.zooms.append({"zoom": a.get("data-zoom"), "steps": [], "svgs": 0})
        elif tag == "button" and a.get("data-zoom-step"):
            self.zooms[-1]["steps"].append(a["data-zoom-step"])
        elif tag == "svg" and self.zooms and "gp-graph" in cls:
            self.zooms[-1]["svgs"] += 1
        elif tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def _page(auto_plan, tmp_path) -> tuple[_Page, str]:
    _, dumps = auto_plan
    out = tmp_path / "plan.html"
    assert cli(["ir", "html", str(dumps), "--rank", "0", "-o", str(out)]) == 0
    text = out.read_text()
    parser = _Page()
    parser.feed(text)
    return parser, text


def test_every_value_has_a_device_grid_in_every_layout_it_is_read_in(auto_plan, tmp_path):
    """Each graph input in its stored layout, each op output in the layout the op leaves it in (the dump's
    out_layouts), and each other layout an op reads it in (a redistribution) has its grid, one cell per block."""
    plan, _ = auto_plan
    begin = plan.dumps(0).begin
    page, _ = _page(auto_plan, tmp_path)
    drawn = {(g["value"], g["layout"]): g["blocks"] for g in page.grids}
    wanted = {(i.name, layout_text(i.layout)): i.layout for i in begin.inputs}
    for node in begin.nodes:
        assert len(node.out_layouts) == len(node.outputs)
        wanted.update({(out, layout_text(lay)): lay for out, lay in zip(node.outputs, node.out_layouts)})
    made = {out: (node, j) for node in begin.nodes for j, out in enumerate(node.outputs)}
    redistributed = 0
    for node in begin.nodes:
        for arg, lay in zip(node.args, node.in_layouts):
            redistributed += (arg, layout_text(lay)) not in wanted
            wanted[(arg, layout_text(lay))] = lay
    assert redistributed > 0  # the quickstart's AUTO_PARALLEL plan reads some value in another layout
    assert set(drawn) == set(wanted)
    for (value, _), layout in wanted.items():
        assert drawn[(value, layout_text(layout))] == math.prod(splits(layout, begin.mesh))
    assert {v for v, _ in drawn} == {i.name for i in begin.inputs} | set(made)


def test_every_graph_picture_zooms_offline(auto_plan, tmp_path):
    page, text = _page(auto_plan, tmp_path)
    assert page.zooms and all(z["steps"] == ["out", "in", "fit", "reset"] and z["svgs"] == 1 and z["zoom"] == "1"
                              for z in page.zooms)
    script = "".join(page.scripts)
    assert ZOOM_JS in script and "addEventListener('wheel'" in script and "passive: false" in script
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text


def test_a_dump_without_out_layouts_draws_its_values_as_their_readers_use_them(auto_plan):
    """A begin dump written before ``out_layouts`` existed still reads; its op outputs are drawn in the layouts
    their readers use them in, and the page says so."""
    plan, _ = auto_plan
    begin = plan.dumps(0).begin
    old = parse_text(re.sub(r"  # out_layouts: [^#\n]*?(?=  #|$)", "", Path(begin.path).read_text(), flags=re.M),
                     begin.path)
    assert all(not n.out_layouts for n in old.nodes) and [n.in_layouts for n in old.nodes] == [
        n.in_layouts for n in begin.nodes]
    html = value_grids(old)
    assert "this dump has no out_layouts" in html
    read = {arg for n in old.nodes for arg in n.args}
    assert {out for n in old.nodes for out in n.outputs if out in read} <= set(re.findall(r'data-value="([^"]+)"',
                                                                                           html))

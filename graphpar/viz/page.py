"""Self-contained HTML pages of dump directories (``graphpar ir html``): every graph, every rank, both dump kinds.

The page inlines its CSS, its SVG pictures and a few lines of JavaScript (rank tabs, zooming the pictures); it
loads nothing, so it opens offline and can be mailed around. A second directory gives a diff page of two plans.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from graphpar.dump.loading import DumpSet, load
from graphpar.dump.views import diff_data
from graphpar.viz import html as views
from graphpar.viz.grids import value_grids
from graphpar.viz.plan import diff_views
from graphpar.viz.svg import graph_picture

_PAGE_CSS = """
body{margin:16px;background:#fff}
.gp-ranks{margin:6px 0}.gp-ranks button{border:1px solid #adb5bd;background:#f8f9fa;padding:2px 8px;margin:0 2px 2px 0;
cursor:pointer;border-radius:3px;font-size:12px}
.gp-ranks button.gp-on{background:#339af0;color:#fff;border-color:#1c7ed6}
section.gp-section{border-top:2px solid #dee2e6;margin-top:14px;padding-top:6px}
.gp-side{display:flex;gap:16px;align-items:flex-start}.gp-side>div{flex:1;min-width:0}
"""

# rank tabs: show the panel of the clicked rank, hide the others of the same graph
_PAGE_JS = """
document.querySelectorAll('.gp-ranks').forEach(function (bar) {
  bar.addEventListener('click', function (event) {
    var rank = event.target.getAttribute('data-show');
    if (rank === null) { return; }
    bar.parentNode.querySelectorAll('.gp-panel').forEach(function (panel) {
      panel.style.display = panel.getAttribute('data-rank') === rank ? 'block' : 'none';
    });
    bar.querySelectorAll('button').forEach(function (b) { b.classList.toggle('gp-on', b === event.target); });
  });
});
"""

# zoom: the buttons of a .gp-zoom box and Ctrl/Cmd + wheel over its picture scale the SVG (its viewBox keeps the
# drawing sharp); the wheel keeps the point under the pointer in place
ZOOM_JS = """
function gpZoomTo(box, z) {
  var svg = box.querySelector('svg');
  z = Math.min(8, Math.max(0.05, z));
  box.setAttribute('data-zoom', String(z));
  svg.style.width = (parseFloat(svg.getAttribute('width')) * z) + 'px';
  svg.style.height = (parseFloat(svg.getAttribute('height')) * z) + 'px';
  box.querySelector('.gp-zoom-level').textContent = Math.round(z * 100) + '%';
}
document.querySelectorAll('.gp-zoom').forEach(function (box) {
  var scroll = box.querySelector('.gp-scroll'), svg = scroll.querySelector('svg');
  box.querySelector('.gp-zoom-bar').addEventListener('click', function (event) {
    var step = event.target.getAttribute('data-zoom-step'), z = parseFloat(box.getAttribute('data-zoom'));
    if (step === 'in') { z *= 1.25; } else if (step === 'out') { z /= 1.25; } else if (step === 'reset') { z = 1; }
    else if (step === 'fit') {
      if (!scroll.clientWidth) { return; }
      z = Math.min(scroll.clientWidth / parseFloat(svg.getAttribute('width')),
                   scroll.clientHeight / parseFloat(svg.getAttribute('height')));
    } else { return; }
    gpZoomTo(box, z);
  });
  scroll.addEventListener('wheel', function (event) {
    if (!(event.ctrlKey || event.metaKey)) { return; }
    event.preventDefault();
    var r = scroll.getBoundingClientRect(), dx = event.clientX - r.left, dy = event.clientY - r.top;
    var old = parseFloat(box.getAttribute('data-zoom'));
    gpZoomTo(box, old * (event.deltaY < 0 ? 1.1 : 1 / 1.1));
    var k = parseFloat(box.getAttribute('data-zoom')) / old;
    scroll.scrollLeft = (scroll.scrollLeft + dx) * k - dx;
    scroll.scrollTop = (scroll.scrollTop + dy) * k - dy;
  }, {passive: false});
});
"""


def _document(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{views.CSS}{_PAGE_CSS}</style></head>"
            f'<body class="gp-root">{body}<script>{_PAGE_JS}{ZOOM_JS}</script></body></html>\n')


def _rank_panel(dset: DumpSet, visible: bool) -> str:
    rank = dset.main.rank
    kinds = ""
    if dset.begin is not None:
        kinds += ("<details><summary>begin dump (global shapes): " + escape(dset.begin.path) + "</summary>"
                  + f'<div class="gp-scroll">{views.op_table(dset.begin, None, "begin")}</div></details>')
    if dset.execute is not None:
        kinds += ("<details><summary>execute dump (per-device shapes, collectives): " + escape(dset.execute.path)
                  + "</summary>" + f'<div class="gp-scroll">{views.op_table(None, dset.execute, "execute")}</div>'
                  "</details>")
    return (f'<div class="gp-panel" data-rank="{rank}" style="display:{"block" if visible else "none"}">'
            + views.dump_views(dset.begin, dset.execute, grids=False, picture=False) + kinds + "</div>")


def _graph_section(sets: list[DumpSet]) -> str:
    first = sets[0]
    main = first.main
    index = f"{first.index:04d}" if first.index is not None else "-"
    buttons = "".join(f'<button data-show="{d.main.rank}"{" class=gp-on" if k == 0 else ""}>rank {d.main.rank}'
                      "</button>" for k, d in enumerate(sets))
    panels = "".join(_rank_panel(d, k == 0) for k, d in enumerate(sets))
    grids = value_grids(first.begin) if first.begin is not None else "<p>no begin dump</p>"
    return (f'<section class="gp-section" data-index="{index}"><h2>graph {escape(main.graph)} '
            f"({escape(main.purpose)}), index {index}</h2>"
            f'<div class="gp-ranks">{buttons}</div>{panels}'
            "<h3>device grids: which device holds which block of every value (by the Cell that makes it)</h3>"
            + grids + "<h3>graph</h3>" + views.graph_pictures(main) + "</section>")


def dump_page(path: str | Path, index: int | None = None, rank: int | None = None) -> str:
    """The page of every graph and every rank in ``path`` (``ir_dumps``, a ``rank_R`` directory or a file); only
    graph ``index`` and only ``rank`` when given."""
    first = load(path, index, rank)
    ranks = [rank] if rank is not None else first.ranks or [None]
    indexes = [first.index] if index is not None else first.indexes or [first.index]
    sections = []
    for index in indexes:
        sets = [load(path, index, r) for r in ranks] if index is not None else [first]
        sections.append(_graph_section(sets))
    body = (f"<h1>graphpar plan: {escape(str(path))}</h1><p class=\"gp-meta\">{len(indexes)} graph(s), "
            f"{len(ranks)} rank(s); click a rank to see its per-device shapes and collective groups</p>"
            + "".join(sections))
    return _document(f"graphpar plan {path}", body)


def diff_page(a: str | Path, b: str | Path, index: int | None = None, rank: int | None = None) -> str:
    """Two plans side by side: ops whose strategy or collective bytes changed, bytes per op, both graphs."""
    da, db = load(a, index, rank), load(b, index, rank)
    data = diff_data(da, db)
    body = (f"<h1>graphpar plan diff</h1>{diff_views(da, db, data)}"
            "<h3>graphs</h3>" + views.legend()
            + f'<div class="gp-side"><div><h4>A</h4>{views.zoom_box(graph_picture(da.main))}</div>'
              f'<div><h4>B</h4>{views.zoom_box(graph_picture(db.main))}</div></div>'
            + f"<h3>A: {escape(str(a))}</h3>" + views.dump_views(da.begin, da.execute, picture=False)
            + f"<h3>B: {escape(str(b))}</h3>" + views.dump_views(db.begin, db.execute, picture=False))
    return _document(f"graphpar plan diff {a} vs {b}", body)

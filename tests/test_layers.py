"""The layers of docs/architecture.md hold: imports only go down, no cycle anywhere, few function-local imports.

The contracts live in pyproject.toml (``[tool.importlinter]``) and are checked by import-linter, whose import graph
counts function-local imports as well as module-level ones. The last two tests show that the contracts are not
vacuous: an upward import, or a cycle hidden in a function body, added to a copy of the package breaks them.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "graphpar"
LINT = Path(sys.executable).with_name("lint-imports")
MAX_LINES = 400
MAX_LOCAL_IMPORTS = 10


def _lint(package_parent: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the package found first on ``package_parent`` with this repository's contracts."""
    if not LINT.exists():
        pytest.fail(f"{LINT} is missing: the test extra installs import-linter (make test does)")
    env = dict(os.environ, PYTHONPATH=str(package_parent))
    return subprocess.run([str(LINT), "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")], cwd=package_parent,
                          env=env, capture_output=True, text=True, timeout=120)


def test_contracts_are_kept():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


def _local_imports() -> list[tuple[str, int, str]]:
    """(file, line, text) of every import into graphpar inside a function body."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(n == "graphpar" or n.startswith("graphpar.") for n in names):
                    found.append((str(path.relative_to(ROOT)), node.lineno, lines[node.lineno - 1].strip()))
    return sorted(set(found))


def test_few_function_local_imports_each_with_its_reason():
    local = _local_imports()
    listing = "\n".join(f"{f}:{n}: {t}" for f, n, t in local)
    assert len(local) <= MAX_LOCAL_IMPORTS, f"{len(local)} function-local imports into graphpar:\n{listing}"
    for file, line, _ in local:
        text = (ROOT / file).read_text().splitlines()
        nearby = " ".join(text[max(0, line - 4): line])  # the import line or the three lines above it
        assert "# local:" in nearby, f"{file}:{line}: a function-local import needs a '# local: <reason>' comment"


def test_no_module_over_the_line_budget():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _broken_copy(tmp_path: Path, module: str, line: str) -> Path:
    copy = tmp_path / "graphpar"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(target.read_text() + "\n" + line + "\n")
    return tmp_path


def test_an_upward_import_breaks_the_contract(tmp_path):
    # the IR (a low layer) reaching up to the runtime: the kind of shortcut the layers forbid
    parent = _broken_copy(tmp_path, "ir/graph.py", "from graphpar.compile.runtime import program  # noqa")
    result = _lint(parent)
    assert result.returncode != 0
    assert "graphpar.ir is not allowed to import graphpar.compile" in result.stdout


def test_a_cycle_inside_a_function_breaks_the_contract(tmp_path):
    # the planner's dimension labels reaching the strategies from a function body (strategy imports dims)
    parent = _broken_copy(tmp_path, "planner/dims.py",
                          "def _late():\n    from graphpar.planner import strategy  # noqa\n    return strategy")
    result = _lint(parent)
    assert result.returncode != 0
    assert "No cycles are allowed in graphpar.planner" in result.stdout


def test_importing_graphpar_leaves_the_heavy_optional_parts_unloaded():
    # grain (and orbax through it) cost ~0.5 s and set up absl's root logging; only a dataset or a checkpoint
    # needs them: the two function-local imports in train/ keep it so
    code = ("import sys, graphpar; heavy = sorted({m.split('.')[0] for m in sys.modules} & {'grain', 'orbax'}); "
            "print(','.join(heavy))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"import graphpar loaded {result.stdout.strip()}"

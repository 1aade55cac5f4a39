"""The package's layers, enforced: import-linter's contracts (pyproject.toml, [tool.importlinter])
hold, inside functions too; no import cycle anywhere in decentlearn; no ``from x import _name``
across packages; and the optional dependencies are imported lazily only.

Each check is also shown to fail: the contracts on a copy of the package with one upward import
planted inside a function, the cycle finder on a planted cycle.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp", reason="import-linter not installed (pip install '.[test]')")
nx = pytest.importorskip("networkx")

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "decentlearn"


def _lint(root: Path) -> subprocess.CompletedProcess:
    """lint-imports with the project's contracts on the package found under ``root``."""
    code = ("import sys; from importlinter.cli import lint_imports_command; "
            "sys.exit(lint_imports_command())")
    return subprocess.run([sys.executable, "-c", code, str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=root, capture_output=True, text=True,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_contracts_hold():
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout and proc.stdout.count("KEPT") >= 3


def test_contracts_catch_an_upward_import_inside_a_function(tmp_path):
    copy = tmp_path / "decentlearn"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    with open(copy / "state.py", "a") as f:  # L0 reaching up to the CLI, lazily
        f.write("\n\ndef _planted():\n    from decentlearn.cli import main\n    return main\n")
    proc = _lint(tmp_path)
    assert proc.returncode != 0 and "BROKEN" in proc.stdout
    assert "decentlearn.state -> decentlearn.cli" in proc.stdout


def _cycles(package: str) -> list[list[str]]:
    graph = grimp.build_graph(package, cache_dir=None)
    g = nx.DiGraph()
    for module in graph.modules:
        g.add_node(module)
        for imported in graph.find_modules_directly_imported_by(module):
            g.add_edge(module, imported)
    return [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]


def test_no_import_cycle_anywhere():
    assert _cycles("decentlearn") == []


def test_cycle_finder_finds_a_planted_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "planted"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from planted import b\n")
    (pkg / "b.py").write_text("from planted import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles("planted") == [["planted.a", "planted.b"]]


def _package_of(module: str) -> str:
    return module.rsplit(".", 1)[0]


def test_no_private_name_imported_across_packages():
    found = []
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        here = module if path.name == "__init__.py" else _package_of(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and node.module.startswith("decentlearn"):
                source = node.module
                for alias in node.names:
                    if not alias.name.startswith("_") or alias.name.startswith("__"):
                        continue
                    if (ROOT / Path(*f"{source}.{alias.name}".split("."))).is_dir() or any(
                            (ROOT / Path(*source.split("."))).glob(f"{alias.name}.*")):
                        continue  # a private module, checked by the private_modules contract
                    owner = source if (ROOT / Path(*source.split("."))).is_dir() \
                        else _package_of(source)
                    if not (here == owner or here.startswith(owner + ".")):
                        found.append(f"{module}: from {source} import {alias.name}")
    assert found == []


def test_optional_dependencies_are_lazy(tmp_path):
    """Importing every module of the core (all but the PyTorch adapter) loads none of the
    optional dependencies."""
    skip = ("decentlearn.torch", "decentlearn.__main__")
    modules = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                     for p in PACKAGE.rglob("*.py"))
    modules = [m for m in modules if not m.startswith(skip)]
    code = f"""
import importlib, sys
for name in {modules!r}:
    importlib.import_module(name)
print(",".join(sorted(n for n in ("torch", "mpi4py", "matplotlib", "tqdm", "tensorboardX",
                                  "mlflow", "pandas") if n in sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path)  # the installed package, not the checkout
    assert out.stdout.strip() == ""

"""The documentation site builds with ``mkdocs build --strict`` (warnings are errors) and documents
every CLI option of every subcommand and every public function and class of the package."""

import argparse
import html
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import decentlearn
from decentlearn.cli import build_parser

pytest.importorskip("mkdocs", reason="the docs test needs the docs extras")
pytest.importorskip("mkdocstrings_handlers.python", reason="the docs test needs mkdocstrings[python]")

ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / "mkdocs.yml").is_file():  # pragma: no cover - an installed package without docs
    pytest.skip("no mkdocs.yml beside the tests", allow_module_level=True)
sys.path.insert(0, str(ROOT / "tools"))
try:
    import mkdocs_hooks
finally:
    sys.path.remove(str(ROOT / "tools"))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONWARNINGS="ignore")
    # The CLI page comes from the decentlearn under test (the checkout's in-place build or the
    # installed package); cwd is not the checkout, whose decentlearn/ (without a built extension
    # when the package is installed) would shadow it through sys.path[0].
    root = str(Path(decentlearn.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
                          capture_output=True, text=True, env=env, cwd=tmp_path_factory.getbasetemp())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    return out


def _text(path: Path) -> str:
    return html.unescape(path.read_text(encoding="utf-8"))


def _subcommands():
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, subs.choices


def test_cli_reference_lists_every_subcommand_and_option(site):
    page = _text(site / "cli" / "index.html")
    parser, subs = _subcommands()
    assert len(subs) >= 4
    missing = []
    for name, sub in subs.items():
        if f"decentlearn {name}" not in page:
            missing.append(f"subcommand {name}")
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings or [action.metavar or action.dest]:
                if option not in page:
                    missing.append(f"{name} {option}")
            # The help text is there too (its first words, as the page escapes nothing else).
            if action.help and action.help.replace("%%", "%")[:30] not in page:
                missing.append(f"{name} {action.dest}: help text")
    assert not missing, missing
    assert "--version" in page


def test_every_cli_option_has_help():
    """The reference can only say what the parser says: every option and positional of every
    subcommand carries a help text."""
    _, subs = _subcommands()
    missing = [f"{name} {a.option_strings[0] if a.option_strings else a.dest}"
               for name, sub in subs.items() for a in sub._actions
               if not isinstance(a, argparse._HelpAction) and not a.help]
    assert not missing, f"CLI options without help=: {missing}"


def _public_objects():
    """(module, name, object) for every public function and class that a public module defines
    or re-exports from the package (C-extension types re-exported are documented at their home)."""
    for module, subs in mkdocs_hooks.public_modules():
        for name in [module, *subs]:
            try:
                mod = importlib.import_module(name)
            except ModuleNotFoundError as e:  # a bridge to an optional library not installed
                if e.name.split(".")[0] in ("torch", "mpi4py"):
                    continue
                raise
            for attr, obj in vars(mod).items():
                if attr.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                    continue
                home = getattr(obj, "__module__", "")
                if home.startswith("decentlearn") and not any(
                        part.startswith("_") for part in home.split(".")):
                    yield name, attr, obj


def test_api_reference_has_every_public_function_and_class(site):
    ids = set()
    for page in (site / "api").rglob("*.html"):
        ids |= set(re.findall(r'id="(decentlearn[\w.]*)"', page.read_text(encoding="utf-8")))
    objects = list(_public_objects())
    names = {(m, a) for m, a, _ in objects}
    # The modules the issue names are all there, with their main entry points.
    for module, attr in [("decentlearn.topology", "make"), ("decentlearn.compress", "make"),
                         ("decentlearn.sim", "simulate"), ("decentlearn.sim", "RunConfig"),
                         ("decentlearn.ops", "gossip"), ("decentlearn.outputs.rundir", "RunWriter")]:
        assert (module, attr) in names, (module, attr)
    missing = [f"{m}.{a}" for m, a, obj in objects
               if f"{obj.__module__}.{obj.__qualname__}" not in ids and f"{m}.{a}" not in ids]
    assert not missing, missing
    # Every public module has a page, and the top-level package documents show_config.
    for module, _ in mkdocs_hooks.public_modules():
        assert (site / "api" / module.split(".", 1)[1] / "index.html").is_file(), module
    assert "decentlearn.show_config" in ids


def test_every_docs_page_is_in_the_site(site):
    for page in (ROOT / "docs").rglob("*.md"):
        rel = page.relative_to(ROOT / "docs").with_suffix("")
        built = site / ("index.html" if rel.name == "index" else rel / "index.html")
        assert built.is_file(), page

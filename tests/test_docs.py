"""The documentation site builds with ``mkdocs build --strict`` (warnings are errors, and the test
fails on any WARNING line of the build's log: it does not pass ``-q``, which would hide them),
documents every CLI option of every subcommand and every public function and class of the package,
typesets its formulas as MathML, renders every notebook executed with its figures, and loads
nothing from another host (no script, style sheet, font or image: it works offline).

The build is in the default suite: the test extras install the docs extras. Under CI (``$CI``
set) a missing docs package is an error, not a skip, so that the check cannot vanish silently."""

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

DOCS_MODULES = ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_jupyter",
                "latex2mathml")
for _module in DOCS_MODULES:
    if os.environ.get("CI"):
        importlib.import_module(_module)  # CI installs the test extras: a failure, not a skip
    else:
        pytest.importorskip(_module, reason=f"the docs test needs the docs extras ({_module})")

ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / "mkdocs.yml").is_file():  # pragma: no cover - an installed package without docs
    pytest.skip("no mkdocs.yml beside the tests", allow_module_level=True)
sys.path.insert(0, str(ROOT / "tools"))
try:
    import mkdocs_hooks
finally:
    sys.path.remove(str(ROOT / "tools"))


def build(out: Path, docs_dir: Path | None = None, execute: bool = True
          ) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of this checkout's site into ``out`` (with the notebooks run in
    their short version), its whole log kept: no ``-q``."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONWARNINGS="ignore",
               DECENTLEARN_NOTEBOOK_QUICK="1")
    # The CLI page comes from the decentlearn under test (the checkout's in-place build or the
    # installed package); cwd is not the checkout, whose decentlearn/ (without a built extension
    # when the package is installed) would shadow it through sys.path[0].
    root = str(Path(decentlearn.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    env.pop("MPLBACKEND", None)  # figures render inline in the notebooks' kernel, as in Jupyter
    env["DECENTLEARN_DOCS_EXECUTE"] = "true" if execute else "false"
    config = ROOT / "mkdocs.yml"
    if docs_dir is not None:  # the same site from another docs folder (a copy, in a test)
        config = out.parent / "mkdocs.yml"
        text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
        text = text.replace("docs_dir: docs", f"docs_dir: {docs_dir}")
        text = text.replace("tools/mkdocs_hooks.py", str(ROOT / "tools" / "mkdocs_hooks.py"))
        config.write_text(text, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(config), "-d", str(out)],
                          capture_output=True, text=True, env=env, cwd=out.parent)


def warnings_of(proc: subprocess.CompletedProcess) -> list[str]:
    """The build's WARNING (and ERROR) lines: what --strict turns into a failure."""
    return [line for line in (proc.stdout + proc.stderr).splitlines()
            if re.match(r"\s*(WARNING|ERROR)\b", line)]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "site"
    proc = build(out)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0 and not warnings_of(proc), log[-6000:]
    # The log is whole (INFO lines included): a quiet build would hide the warnings checked above.
    assert "INFO" in log and "Documentation built" in log, log[-2000:]
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


@pytest.mark.slow
def test_strict_build_fails_on_a_broken_anchor(tmp_path):
    """The check of the site fixture can fail: the same docs with one link to an anchor that does
    not exist (the kind of drift it missed when it ran with -q) do not build."""
    import shutil
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")  # images the pages take from there
    page = docs / "data.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee [torch.md](torch.md#no-such-anchor).\n",
                    encoding="utf-8")
    proc = build(tmp_path / "site", docs_dir=docs, execute=False)
    assert proc.returncode != 0
    assert any("no-such-anchor" in line for line in warnings_of(proc)), proc.stderr[-3000:]


def test_warnings_of_reads_the_build_log():
    """The check that the site fixture makes on the log: mkdocs' own WARNING lines count, INFO
    lines do not. (The whole check was seen to fail once with a planted broken anchor: the build
    aborts with 'WARNING - Doc file ... contains a link ..., but the doc ... does not contain an
    anchor'.)"""
    proc = subprocess.CompletedProcess([], 1, stdout="", stderr=(
        "INFO    -  Cleaning site directory\n"
        "WARNING -  Doc file 'data.md' contains a link 'torch.md#x', but the doc 'torch.md' does "
        "not contain an anchor '#x'.\n"
        "Aborted with 1 warnings in strict mode!\n"))
    assert warnings_of(proc) == [proc.stderr.splitlines()[1]]


#: Elements whose src/href the browser loads by itself (not <a>, which a reader follows).
_LOADED = re.compile(r"<(script|link|img|iframe|source|audio|video|embed|object|image|use)\b[^>]*>",
                     flags=re.I)
_URL_ATTR = re.compile(r"\b(src|href|srcset|data|xlink:href)\s*=\s*[\"']([^\"']*)[\"']", flags=re.I)
_INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)[^>]*>(.*?)</script>", flags=re.S | re.I)
_JS_URL = re.compile(r"[\"'`](?:https?:)?//[^\"'`\s]+")
_CSS_URL = re.compile(r"(?:url\(\s*[\"']?|@import\s+[\"'])((?:https?:)?//[^\"')\s]+)", flags=re.I)


def remote_urls(site: Path) -> list[str]:
    """Every URL on another host that a page of ``site`` makes the browser load: src/href of
    scripts, style sheets, images, frames, media; url() and @import in style sheets and <style>."""
    found = []
    for path in sorted(site.rglob("*")):
        if path.suffix not in (".html", ".css", ".js") or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        rel = path.relative_to(site)
        if path.suffix == ".html":
            for tag in _LOADED.finditer(text):
                for _, url in _URL_ATTR.findall(tag.group(0)):
                    if re.match(r"\s*(https?:)?//", url):
                        found.append(f"{rel}: {tag.group(0)[:160]}")
            # Inline scripts: a URL in a script's text is one it may fetch (import(), fetch()).
            for body in _INLINE_SCRIPT.findall(text):
                found += [f"{rel}: inline script: {url}" for url in _JS_URL.findall(body)]
        if path.suffix in (".html", ".css"):
            found += [f"{rel}: {url}" for url in _CSS_URL.findall(text)]
    return found


def test_remote_urls_are_found():
    """The scanner below sees what the site must not contain (so its empty answer means
    something): MathJax from a CDN, a Google font, a remote image, a font in a style sheet."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "a.html").write_text(
            '<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>'
            '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
            '<img alt="x" src="//example.org/a.png"><a href="https://arxiv.org/abs/1">paper</a>'
            '<script src="../assets/local.js"></script>'
            '<script type="module">const m = await import("https://cdn.x/mermaid.mjs");</script>'
            '<script>var local = "./search.js";</script>')
        (tmp / "b.css").write_text("@font-face{src:url(https://fonts.gstatic.com/r.woff2)}")
        found = remote_urls(tmp)
    assert len(found) == 5, found
    assert not any("arxiv" in f or "local.js" in f or "search.js" in f for f in found), found


def test_site_loads_nothing_from_another_host(site):
    assert not remote_urls(site), remote_urls(site)


def test_formulas_are_typeset_as_mathml(site):
    """Every $...$ of the pages became MathML (none is left for a script to typeset), and the
    formulas of simulator.md and topology.md are there, as MathML elements."""
    pages = list(site.rglob("*.html"))
    left = [str(p.relative_to(site)) for p in pages if 'class="arithmatex"' in p.read_text("utf-8")]
    assert not left, left
    simulator = (site / "simulator" / "index.html").read_text(encoding="utf-8")
    assert simulator.count("<math") >= 8
    # x_i <- sum_j W_ij x_j - eta g_i(x_i): the subscripts are MathML, not text.
    assert "<msub><mi>W</mi><mrow><mi>i</mi><mi>j</mi></mrow></msub>" in simulator
    topology = (site / "topology" / "index.html").read_text(encoding="utf-8")
    assert 'display="block"' in topology and "<mfrac>" in topology
    assert "\U0001D7CF" in simulator and 'mathvariant="bold"' not in topology  # W = 11^T/n


NOTEBOOK_PATHS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[p.name for p in NOTEBOOK_PATHS])
def test_notebook_page_shows_its_executed_figures(site, path):
    """Each notebook is a page of the site, executed by the build: its figures are in the page
    (PNG data of this checkout's run), with no error output. A notebook that needs what this
    machine lacks (tests/test_notebooks.py's metadata) is rendered unexecuted, and skipped here."""
    page = (site / "notebooks" / path.stem / "index.html").read_text(encoding="utf-8")
    assert "jp-Notebook" in page
    missing = mkdocs_hooks.notebook_missing_needs(path)
    if missing:
        pytest.skip(f"{path.name} is not executed by this build: {'; '.join(missing)}")
    assert page.count('src="data:image/png;base64,') >= 1, path.name
    assert "Traceback" not in page, path.name


def test_formula_conversion_and_its_warnings(caplog):
    """A formula becomes MathML (compared with the MathML written by hand); one that
    latex2mathml cannot parse, or that uses a command it does not know, is a build warning
    (so a --strict build fails on it) naming the page and the formula."""
    pytest.importorskip("latex2mathml")
    got = mkdocs_hooks.to_mathml(r"x_i \le \frac{1}{n}", False, "page.md")
    assert got == ('<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline"><mrow>'
                   "<msub><mi>x</mi><mi>i</mi></msub><mo>&#x02264;</mo>"
                   "<mfrac><mrow><mn>1</mn></mrow><mrow><mi>n</mi></mrow></mfrac></mrow></math>")
    assert not caplog.records
    # \mathbf{1} (the all-ones vector): browsers ignore mathvariant="bold", so the MathML holds
    # the Mathematical Bold digit itself
    ones = mkdocs_hooks.to_mathml(r"\mathbf{1}\mathbf{1}^\top", False, "page.md")
    assert "mathvariant" not in ones and ones.count("<mn>\U0001D7CF</mn>") == 2
    with caplog.at_level("WARNING", logger="mkdocs"):
        mkdocs_hooks.to_mathml(r"\frac{1}{", True, "page.md")
        mkdocs_hooks.to_mathml(r"\notacommand{x}", False, "page.md")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all(m.startswith("page.md: ") for m in messages), messages
    assert "cannot typeset" in messages[0] and "\\notacommand" in messages[1]
    assert all(r.name.startswith("mkdocs.") and r.levelname == "WARNING" for r in caplog.records)

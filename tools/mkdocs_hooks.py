"""mkdocs hooks of the documentation site (``mkdocs.yml`` names this file under ``hooks:``).

Three pages are generated at build time so that they cannot drift from the code:

* ``cli.md``: every subcommand and option of ``decentlearn.cli.build_parser()`` with its help,
  default, choices and metavar;
* ``api/<module>.md``: one API page per public module or subpackage of ``decentlearn`` (found on
  disk, so a new module gets its page without editing anything), rendered by mkdocstrings;
* the nav: the ``api/index.md`` entry grows the module pages as children, and every page of
  ``docs/`` that ``mkdocs.yml``'s nav does not list is appended under "More" (so a page added on
  another branch builds under ``--strict`` before someone places it).

Images that the Markdown pages take from outside ``docs/`` (``../benchmarks/...``, so that they
also render on a code host) are copied into the site under ``assets/`` and the links rewritten.

The notebooks of ``notebooks/`` become pages under "Notebooks" (``notebooks/<name>/``), which the
mkdocs-jupyter plugin executes during the build; one whose metadata names an optional module or a
data set that this machine lacks (``"decentlearn": {"requires": [...], "datasets": [...]}``, as
tests/test_notebooks.py reads it) is rendered without running it, and the build log says why.

Formulas (``$...$`` and ``$$...$$`` in the pages, which ``pymdownx.arithmatex`` marks) are
converted to MathML at build time by latex2mathml, so that the browser typesets them with no script
and no font download (the notebooks' Markdown cells hold no formula). A formula that latex2mathml
cannot read is a build warning (so an error under ``--strict``). The script tags that nbconvert's
template points at other hosts (MathJax, mermaid) are removed from the notebook pages: the site
makes no request to another host.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import logging
import re
import sys
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "decentlearn"
#: Modules and packages that are not public API: the extension, the entry point, the NumPy
#: references of the C kernels (documented as the spec in docs/testing.md), private modules.
SKIP = {"__main__", "__init__", "_core"}
#: Where external images land in the site.
ASSETS = "assets/external"
NOTEBOOKS = ROOT / "notebooks"
log = logging.getLogger("mkdocs.hooks.decentlearn")


# ----------------------------------------------------------------------------- API pages


def public_modules() -> list[tuple[str, list[str]]]:
    """(top-level module, [its public submodules]) for every public module of the package, in
    alphabetical order, read from the file tree (nothing is imported)."""
    out = []
    for path in sorted(PACKAGE.iterdir()):
        name = path.stem
        if name in SKIP or name.startswith("_"):
            continue
        if path.is_dir() and (path / "__init__.py").is_file():
            subs = sorted(p.stem for p in path.glob("*.py")
                          if not p.stem.startswith("_") and p.stem not in SKIP)
            out.append((f"decentlearn.{name}", [f"decentlearn.{name}.{s}" for s in subs]))
        elif path.suffix == ".py":
            out.append((f"decentlearn.{name}", []))
    return out


def _api_page(module: str, submodules: list[str]) -> str:
    lines = [f"# `{module}`", "", f"::: {module}", ""]
    if submodules:
        # The package's own page lists what __init__ defines; each submodule gets its section.
        lines[2] = f"::: {module}\n    options:\n      show_submodules: false"
        for sub in submodules:
            lines += [f"## `{sub}`", "", f"::: {sub}", "    options:", "      heading_level: 3", ""]
    return "\n".join(lines)


def _api_index(modules: list[tuple[str, list[str]]]) -> str:
    lines = ["# API reference", "",
             "Generated from the docstrings at build time. `import decentlearn as dl` imports the "
             "submodules lazily (`dl.topology`, `dl.compress`, `dl.sim`, ...), and `dl.simulate`"
             " / `dl.RunConfig` are re-exported from `decentlearn.sim`.", "",
             "| module | summary |", "|---|---|"]
    for module, _ in modules:
        lines.append(f"| [`{module}`]({module.split('.', 1)[1]}.md) | {_summary(module)} |")
    lines += ["", "## `decentlearn`", "", "::: decentlearn", "    options:",
              "      show_submodules: false", "      heading_level: 3", ""]
    return "\n".join(lines)


def _summary(module: str) -> str:
    """The first sentence of a module's docstring, read without importing it."""
    import ast

    rel = module.split(".", 1)[1].replace(".", "/")
    path = PACKAGE / f"{rel}.py"
    if not path.is_file():
        path = PACKAGE / rel / "__init__.py"
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = doc.strip().split("\n\n", 1)[0].replace("\n", " ")
    return first.replace("|", "\\|")


# ----------------------------------------------------------------------------- CLI page


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _option_row(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or action.dest.upper()
            names += f" `{metavar}`"
    else:
        names = f"`{action.metavar or action.dest}` (positional)"
    help_text = (action.help or "").replace("%%", "%")
    if "%(" in help_text:
        help_text = help_text % {"default": action.default, "prog": "decentlearn"}
    extra = []
    if action.choices is not None and not isinstance(action.choices, dict):
        extra.append("choices: " + ", ".join(f"`{c}`" for c in action.choices))
    if action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
        extra.append(f"default: `{action.default}`")
    if isinstance(action, argparse.BooleanOptionalAction):
        extra.append("flag (with a `--no-` form)")
    elif action.nargs == 0:
        extra.append("flag")
    text = _escape(help_text)
    if extra:
        text = f"{text} ({'; '.join(extra)})" if text else "; ".join(extra)
    return f"| {names} | {text} |"


def cli_reference() -> str:
    """Markdown reference of every subcommand and option of ``decentlearn``."""
    try:  # the decentlearn on the path (an installed one, whose extension is built) ...
        from decentlearn.cli import build_parser
    except ImportError:  # ... else this checkout's
        sys.path.insert(0, str(ROOT))
        try:
            from decentlearn.cli import build_parser
        finally:
            sys.path.remove(str(ROOT))
    parser = build_parser()
    lines = ["# Command-line reference", "",
             "Generated at build time from `decentlearn.cli.build_parser()`: every subcommand and "
             "option that the installed `decentlearn` accepts, with its help. "
             "`decentlearn SUBCOMMAND --help` prints the same. Without a subcommand, "
             "`decentlearn` runs `run` with the defaults.", "",
             "```text", parser.format_usage().strip(), "```", ""]
    top = [a for a in parser._actions
           if a.option_strings and not isinstance(a, argparse._HelpAction)]
    if top:
        lines += ["| option | meaning |", "|---|---|"] + [_option_row(a) for a in top] + [""]
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in subs._choices_actions}
    for name, sub in subs.choices.items():
        lines += [f"## `decentlearn {name}`", ""]
        if helps.get(name):
            lines += [_escape(helps[name][0].upper() + helps[name][1:]) + ".", ""]
        if sub.description:
            lines += [_escape(sub.description), ""]
        lines += ["```text", sub.format_usage().strip(), "```", ""]
        # Options in a help group of their own (e.g. the per-algorithm options of `run`) get
        # their own table under the group's title, as `--help` prints them.
        groups = [g for g in sub._action_groups[2:] if g._group_actions]
        grouped = {id(a) for g in groups for a in g._group_actions}
        actions = [a for a in sub._actions
                   if not isinstance(a, argparse._HelpAction) and id(a) not in grouped]
        if actions:
            lines += ["| option | meaning |", "|---|---|"] + [_option_row(a) for a in actions]
        elif not groups:
            lines.append("No options.")
        lines.append("")
        for g in groups:
            lines += [f"### `decentlearn {name}`: {g.title}", ""]
            if g.description:
                lines += [_escape(g.description[0].upper() + g.description[1:]) + ".", ""]
            lines += ["| option | meaning |", "|---|---|"]
            lines += [_option_row(a) for a in g._group_actions] + [""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- hooks


def _nav_files(nav) -> set[str]:
    found: set[str] = set()
    for item in nav or []:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            found |= _nav_files(value)
        else:
            found.add(value)
    return found


def on_config(config):
    modules = public_modules()
    api_nav = [{"Overview": "api/index.md"}]
    api_nav += [{m.split(".", 1)[1]: f"api/{m.split('.', 1)[1]}.md"} for m, _ in modules]

    def expand(items):
        out = []
        for item in items:
            if isinstance(item, dict):
                (title, value), = item.items()
                if value == "api/index.md":
                    value = api_nav
                elif isinstance(value, list):
                    value = expand(value)
                out.append({title: value})
            else:
                out.append(item)
        return out

    nav = expand(config["nav"] or [])
    notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))
    if notebooks:
        nav.append({"Notebooks": [{_notebook_title(p): f"notebooks/{p.name}"} for p in notebooks]})
    jupyter = config["plugins"].get("mkdocs-jupyter")
    if jupyter is not None and jupyter.config["execute"]:
        for path in notebooks:
            missing = notebook_missing_needs(path)
            if missing:
                log.info("notebooks/%s is rendered without running it: %s", path.name,
                         "; ".join(missing))
                jupyter.config["execute_ignore"].append(f"*/notebooks/{path.name}")
    listed = _nav_files(nav)
    docs = Path(config["docs_dir"])
    extra = sorted(str(p.relative_to(docs)).replace("\\", "/") for p in docs.rglob("*.md"))
    extra = [p for p in extra if p not in listed]
    if extra:
        nav.append({"More": extra})
    config["nav"] = nav
    return config


@event_priority(100)  # before the plugins: mkdocs-jupyter must see the notebooks added here
def on_files(files, config):
    modules = public_modules()
    files.append(File.generated(config, "cli.md", content=cli_reference()))
    files.append(File.generated(config, "api/index.md", content=_api_index(modules)))
    for module, subs in modules:
        files.append(File.generated(config, f"api/{module.split('.', 1)[1]}.md",
                                    content=_api_page(module, subs)))
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        uri = f"notebooks/{path.name}"
        if files.get_file_from_path(uri) is None:
            files.append(_notebook_file(path, uri, config))
    # Images referenced from outside docs/ (../benchmarks/...): copied into the site.
    docs = Path(config["docs_dir"])
    for page in docs.rglob("*.md"):
        for target in _EXTERNAL.findall(page.read_text(encoding="utf-8")):
            source = (page.parent / target).resolve()
            uri = f"{ASSETS}/{source.relative_to(ROOT).as_posix()}"
            if source.is_file() and files.get_file_from_path(uri) is None:
                files.append(File.generated(config, uri, abs_src_path=str(source)))
    return files


#: Image links that leave docs/: ![alt](../something.png)
_EXTERNAL = re.compile(r"!\[[^\]]*\]\((\.\./[^)\s]+)\)")


def on_page_markdown(markdown, page, config, files):
    def rewrite(match):
        target = match.group(1)
        source = (Path(page.file.abs_src_path).parent / target).resolve()
        if not source.is_file():
            return match.group(0)  # left for mkdocs to report as a broken link
        depth = page.file.src_uri.count("/")
        uri = "../" * depth + f"{ASSETS}/{source.relative_to(ROOT).as_posix()}"
        return match.group(0).replace(f"({target})", f"({uri})")

    if page.file.abs_src_path is None:
        return markdown
    return _EXTERNAL.sub(rewrite, markdown)


# ----------------------------------------------------------------------------- notebooks


def _notebook_title(path: Path) -> str:
    """The notebook's first Markdown heading, else its file name."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            match = re.search(r"^#+\s+(.+)$", "".join(cell.get("source", "")), flags=re.M)
            if match:
                return match.group(1).strip()
    return path.stem


def notebook_missing_needs(path: Path) -> list[str]:
    """What the notebook needs beyond the docs extras and this machine lacks, one line each (the
    metadata tests/test_notebooks.py reads: ``"decentlearn": {"requires": [...], "datasets":
    [...]}``); empty when it can run."""
    needs = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("decentlearn", {})
    missing = [f"needs {m}, which is not installed" for m in needs.get("requires", [])
               if importlib.util.find_spec(m) is None]
    for name in needs.get("datasets", []):
        try:
            from decentlearn.data import load_dataset
            load_dataset(name)
        except FileNotFoundError:
            missing.append(f"needs the {name} data set, which is not on this machine")
    return missing


def _notebook_file(path: Path, uri: str, config) -> File:
    """A File of the site at ``uri`` whose source is a notebook outside docs/; mkdocs-jupyter's
    ``on_files``, which runs after this hook's (see ``on_files``), makes it a page."""
    return File(uri, src_dir=str(ROOT), dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"])


# ----------------------------------------------------------------------------- formulas

#: pymdownx.arithmatex (generic mode) output: \(...\) in a span, \[...\] in a div.
_ARITHMATEX = re.compile(
    r'<(span|div) class="arithmatex">\s*\\([\(\[])(.*?)\\[\)\]]\s*</\1>', flags=re.S)
#: What nbconvert's template adds for MathJax and mermaid, both fetched from a CDN: a script with a
#: remote (or, with no MathJax URL given, empty) src, MathJax's inline configuration, and the
#: module that imports mermaid from a CDN when a page has a diagram.
_REMOTE_SCRIPT = re.compile(
    r'<script[^>]*\ssrc="(?:(?:https?:)?//[^"]*)?"[^>]*>\s*</script>'
    r'|<script type="text/x-mathjax-config">.*?</script>'
    r'|<script type="module">(?:(?!</script>).)*?(?:https?:)?//(?:(?!</script>).)*</script>',
    flags=re.S)


def _bold(ch: str) -> str:
    """The Mathematical Bold character of an ASCII letter or digit (U+1D400..., U+1D7CE...)."""
    if "0" <= ch <= "9":
        return chr(0x1D7CE + ord(ch) - ord("0"))
    if "A" <= ch <= "Z":
        return chr(0x1D400 + ord(ch) - ord("A"))
    if "a" <= ch <= "z":
        return chr(0x1D41A + ord(ch) - ord("a"))
    return ch


def _bold_as_characters(mathml: str) -> str:
    r"""``\mathbf`` becomes ``mathvariant="bold"``, which MathML Core (what browsers implement)
    ignores: the all-ones vector rendered as a plain 1. Bold tokens are written with the Unicode
    Mathematical Bold characters instead, which every MathML font has."""
    return re.sub(r'<(m[ion])([^>]*?) mathvariant="bold"([^>]*)>([^<]*)</\1>',
                  lambda m: f"<{m.group(1)}{m.group(2)}{m.group(3)}>"
                            f"{''.join(_bold(c) for c in m.group(4))}</{m.group(1)}>",
                  mathml)


def to_mathml(tex: str, display: bool, where: str) -> str:
    """MathML for one formula; a formula latex2mathml cannot read is a build warning (an error
    under ``--strict``) and stays as its TeX source."""
    from latex2mathml.converter import convert

    try:
        mathml = convert(tex, display="block" if display else "inline")
    except Exception as e:  # noqa: BLE001 - latex2mathml raises many types for bad input
        log.warning("%s: cannot typeset the formula %r: %s", where, tex, e)
        return html.escape(tex)
    mathml = _bold_as_characters(mathml)
    # latex2mathml keeps a command it does not know as text (<mi>\foo</mi>): the reader would see
    # the backslash, so that is a warning too.
    unknown = re.findall(r"<m[io][^>]*>(\\[A-Za-z]+)</m[io]>", mathml)
    if unknown:
        log.warning("%s: the formula %r uses %s, which latex2mathml does not know", where, tex,
                    ", ".join(dict.fromkeys(unknown)))
    return mathml


def on_page_content(content, page, config, files):
    where = page.file.src_uri
    content = _ARITHMATEX.sub(
        lambda m: to_mathml(html.unescape(m.group(3)).strip(), m.group(2) == "[", where), content)
    if where.endswith(".ipynb"):
        content = _REMOTE_SCRIPT.sub("", content)
    return content

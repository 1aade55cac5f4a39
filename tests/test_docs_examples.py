"""Every code block of README.md and docs/ either runs here or says why not.

* Every fenced block names its language (```python, ```bash, ```text, ```toml, ...), so that a
  reader and this test know what it is.
* ``python`` blocks of a page run in order in one namespace (one process per page, in a
  temporary folder); ``bash`` blocks run each with ``bash -e`` in a folder of their own, with
  ``decentlearn`` the decentlearn under test (``python -m decentlearn``).
* A block preceded by ``<!-- not-run: REASON -->`` is not run: it is listed as a skipped test
  with its reason (``pytest -ra`` prints the list). A block preceded by ``<!-- slow: REASON -->``
  runs with the slow tests only (``pytest -m slow``). A block preceded by ``<!-- file: NAME -->`` is
  saved as NAME in the page's folder before its Python blocks run (a module the page imports).
* Runs are shortened: ``--rounds``, ``--eval-every`` and ``--checkpoint-every`` of a
  ``decentlearn`` command (and ``rounds=`` in Python) are multiplied by ``DECENTLEARN_DOCS_SCALE``
  (default 0.01, rounded up; ``1`` runs the blocks as written), a ``run`` that sets no round
  count gets the scaled default, and one that sets no ``--eval-samples`` evaluates on 1000 test
  samples. The Python blocks of a page that holds ``<!-- run-as-written -->`` (short runs whose
  blocks assert their own results) run unshortened. A block that names a data set this machine lacks, or a
  ``torch:`` model without PyTorch, is skipped with that reason.

The published numbers are checked apart, at full length: tests/test_docs_tables.py.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import decentlearn

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SCALE = float(os.environ.get("DECENTLEARN_DOCS_SCALE", "0.01"))
#: Languages whose blocks run; every other language is shown, not run.
RUN = {"python", "bash"}
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[^\n`]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
                    flags=re.S | re.M)
_MARKER = re.compile(r"<!--\s*(not-run|file|slow):\s*(.*?)\s*-->\s*$", flags=re.S)


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    body: str
    not_run: str | None
    file: str | None
    slow: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(path: Path, root: Path = ROOT) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the marker on the last non-blank line
    before it, if any."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        before = [line for line in text[:m.start()].splitlines() if line.strip()]
        marker = _MARKER.search(before[-1]) if before else None
        kind, value = (marker.group(1), marker.group(2)) if marker else (None, None)
        body = "\n".join(line[len(m.group("indent")):] for line in m.group("body").splitlines())
        out.append(Block(str(path.relative_to(root)), text[:m.start()].count("\n") + 1,
                         m.group("lang").strip(), body + "\n",
                         value if kind == "not-run" else None, value if kind == "file" else None,
                         value if kind == "slow" else None))
    return out


ALL = [b for page in PAGES for b in blocks(page)]


def test_every_block_names_its_language():
    bare = [b.id for b in ALL if not b.lang]
    assert not bare, f"code blocks without a language (```python, ```bash, ```text, ...): {bare}"


def test_markers_are_read():
    """The parser sees the blocks and markers of a page written for it (so that an empty list of
    skipped blocks means what it says)."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "page.md"
        page.write_text("Text.\n\n<!-- not-run: it downloads -->\n```bash\ncurl x\n```\n\n"
                        "- item:\n\n  ```python\n  print(1)\n  ```\n\n<!-- file: m.py -->\n"
                        "```python\nX = 1\n```\n", encoding="utf-8")
        found = blocks(page, root=Path(tmp))
    assert [(b.lang, b.not_run, b.file, b.line) for b in found] == [
        ("bash", "it downloads", None, 4), ("python", None, None, 10), ("python", None, "m.py", 15)]
    assert found[1].body == "print(1)\n"


# ----------------------------------------------------------------------------- shortening


def scaled(n: int) -> int:
    return max(1, math.ceil(n * SCALE))


_SHIM = '''#!{python}
"""`decentlearn` for the docs examples: the package under test, with its runs shortened."""
import math, os, runpy, sys
scale = float(os.environ.get("DECENTLEARN_DOCS_SCALE", "0.01"))
argv = sys.argv[1:]
scaled = lambda n: max(1, math.ceil(int(n) * scale))
for i, a in enumerate(argv[:-1]):
    if a in ("--rounds", "--eval-every", "--checkpoint-every"):
        argv[i + 1] = str(scaled(argv[i + 1]))
if (scale != 1 and "run" in argv
        and not {"--rounds", "--help", "--resume", "--config"} & set(argv)):
    from decentlearn.sim import RunConfig
    argv += ["--rounds", str(scaled(RunConfig().rounds))]
if scale != 1 and "run" in argv and not {"--eval-samples", "--resume", "--config"} & set(argv):
    argv += ["--eval-samples", "1000"]  # a short run evaluates on part of the test set
sys.argv = ["decentlearn", *argv]
runpy.run_module("decentlearn", run_name="__main__", alter_sys=True)
'''


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    shim = tmp_path_factory.mktemp("bin")
    (shim / "decentlearn").write_text(_SHIM.replace("{python}", sys.executable))
    (shim / "decentlearn").chmod(0o755)
    root = str(Path(decentlearn.__file__).resolve().parent.parent)
    return {**os.environ, "PATH": os.pathsep.join([str(shim), os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
            "MPLBACKEND": "Agg", "DECENTLEARN_DOCS_SCALE": str(SCALE),
            "DECENTLEARN_NOTEBOOK_QUICK": "1"}


def _missing(block: Block) -> str | None:
    """Why this block cannot run on this machine (a data set or PyTorch), else None."""
    from decentlearn.data import load_dataset
    for name in dict.fromkeys(re.findall(r"(?:--dataset |dataset=[\"'])([\w-]+)", block.body)):
        if name in ("digits", "synthetic"):
            continue
        data_dir = re.search(r"--data-dir (\S+)", block.body)
        try:
            load_dataset(name, data_dir.group(1) if data_dir else None)
        except FileNotFoundError:
            return f"needs the {name} data set, which is not on this machine"
        except ValueError:  # not a built-in name: one the page registers itself
            continue
    if ("torch:" in block.body or "import torch" in block.body) \
            and importlib.util.find_spec("torch") is None:
        return "needs PyTorch (pip install 'decentlearn[torch]')"
    return None


# ----------------------------------------------------------------------------- the runs

SKIPPED = [b for b in ALL if b.lang in RUN and b.not_run is not None]
BASH = [b for b in ALL if b.lang == "bash" and b.not_run is None]
PYTHON_PAGES = sorted({b.page for b in ALL if b.lang == "python" and b.not_run is None})


@pytest.mark.parametrize("block", SKIPPED, ids=[b.id for b in SKIPPED])
def test_not_run_blocks_say_why(block):
    assert len(block.not_run) >= 10, f"{block.id}: give a reason in <!-- not-run: ... -->"
    pytest.skip(f"{block.id} not run: {block.not_run}")


@pytest.mark.parametrize("block", [pytest.param(b, marks=[pytest.mark.slow] if b.slow else [])
                                   for b in BASH], ids=[b.id for b in BASH])
def test_bash_block_runs(block, env, tmp_path):
    why = _missing(block)
    if why:
        pytest.skip(f"{block.id}: {why}")
    for b in ALL:  # the modules the page saves (<!-- file: NAME -->), which its commands import
        if b.page == block.page and b.file:
            (tmp_path / b.file).write_text(b.body, encoding="utf-8")
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.body], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{block.id}\n{block.body}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


_DRIVER = '''
import sys, traceback
ns = {"__name__": "__main__"}
for name in sys.argv[1:]:
    source = open(name, encoding="utf-8").read()
    exec(compile(source, source.split("\\n", 1)[0][2:], "exec"), ns)
'''


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_python_blocks_run(page, env, tmp_path):
    """The page's Python blocks, in order, in one namespace (a later block uses what an earlier
    one defined, as a reader in one session would)."""
    page_blocks = [b for b in ALL if b.page == page and b.lang == "python"]
    for b in page_blocks:
        if b.file:
            (tmp_path / b.file).write_text(b.body, encoding="utf-8")
    run = [b for b in page_blocks if not b.file and b.not_run is None]
    for b in run:
        why = _missing(b)
        if why:
            pytest.skip(f"{b.id}: {why}")
    # A page whose runs are short already, and whose blocks check their own results, says
    # <!-- run-as-written -->: its blocks run unshortened.
    as_written = "<!-- run-as-written -->" in (ROOT / page).read_text(encoding="utf-8")
    names = []
    for i, b in enumerate(run):
        body = b.body if as_written else re.sub(
            r"\brounds=(\d+)", lambda m: f"rounds={scaled(int(m.group(1)))}", b.body)
        name = tmp_path / f"_block{i}.py"
        # The first line names the block, so that a traceback points at the page and line.
        name.write_text(f"# {b.id}\n" + body, encoding="utf-8")
        names.append(str(name))
    proc = subprocess.run([sys.executable, "-c", _DRIVER, *names], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]


# ----------------------------------------------------------------------------- one page, in detail


def test_write_your_own_algorithm(tmp_path, env):
    """docs/write-your-own-algorithm.md: its module saved as the page says, its Python block
    prints what the page shows, and its commands register the algorithm and its option."""
    page = blocks(ROOT / "docs" / "write-your-own-algorithm.md")
    (module,) = [b for b in page if b.file == "relaxed.py"]
    (tmp_path / "relaxed.py").write_text(module.body)
    (script,) = [b.body for b in page if b.lang == "python" and not b.file]
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("relaxed: accuracy ") and len(lines) == 2
    assert lines[1] == "beta must be a number in (0, 1], got 1.5"
    (commands,) = [b.body for b in page if b.lang == "bash"]
    run, helped = commands.strip().splitlines()
    proc = subprocess.run(["bash", "-c", run], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = (tmp_path / "runs" / "relaxed" / "summary.json").read_text()
    assert '"algorithm": "relaxed"' in summary and '"beta": 0.7' in summary
    help_cmd = helped.split(" | ")[0]
    proc = subprocess.run(["bash", "-c", help_cmd], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "relaxed options" in proc.stdout and "--beta" in proc.stdout
    assert "relaxation of the gossip step" in " ".join(proc.stdout.split())


def test_write_your_own_callback(tmp_path, env):
    """docs/write-your-own-callback.md's example, run as written (40 rounds): the JSON-lines file
    holds the run's evaluation rows, and the callback's mean of squared distances to the mean,
    computed from ``sim.params``, equals the simulator's own ``consensus_distance`` at every
    evaluation (the simulator computes it in its code, with the peers' mean in float64)."""
    page = [b for b in blocks(ROOT / "docs" / "write-your-own-callback.md") if b.lang == "python"]
    script = page[0].body + """
import math
assert [r["round"] for r in rows] == [10, 20, 30, 40]
assert rows == [json.loads(json.dumps(r)) for r in result.history]
for r in rows:
    mine = spread.mean_square[r["round"] - 1]
    assert math.isclose(mine, r["consensus_distance"], rel_tol=1e-9, abs_tol=1e-12), (mine, r)
assert len(spread.largest) == 40
assert all(l * l >= m * (1 - 1e-12) for l, m in zip(spread.largest, spread.mean_square))
print("checked")
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("4 rows, last accuracy 0.") and lines[2] == "checked", lines
    assert lines[1].startswith("40 rounds, farthest peer at the end ")

"""The source distribution ships everything the test suite needs (issue 7 point 16).

The fast test builds the sdist (``python -m build --sdist --no-isolation``, a few seconds) and
checks its file list against the files git tracks; the slow one unpacks it, builds the extension
in place and runs a few test files from the unpacked tree, as a packager or a user would.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Tracked files the sdist need not ship: CI and editor configuration (dot-files and dot-folders).
_NOT_SHIPPED_PREFIX = "."


def _tracked_files() -> list[str]:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout (e.g. an unpacked sdist): no list of tracked files")
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    files = [f for f in out.split("\0") if f]
    return [f for f in files if not any(part.startswith(_NOT_SHIPPED_PREFIX) for part in f.split("/"))]


def _build_sdist(out_dir: pathlib.Path) -> pathlib.Path:
    pytest.importorskip("build", reason="the 'build' package is needed to make an sdist")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(out_dir), str(ROOT)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = out_dir.glob("decentlearn-*.tar.gz")
    return sdist


def _members(sdist: pathlib.Path) -> tuple[str, set[str]]:
    with tarfile.open(sdist) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    top = names[0].split("/", 1)[0]
    assert all(n.startswith(top + "/") for n in names)
    return top, {n.split("/", 1)[1] for n in names}


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> pathlib.Path:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (e.g. an unpacked sdist)")
    return _build_sdist(tmp_path_factory.mktemp("sdist"))


def test_sdist_ships_what_the_tests_read(sdist):
    _, shipped = _members(sdist)
    # What the test suite reads from the tree: the tests with their conftest, the notebooks
    # (tests/test_notebooks.py runs them), the docs, the C sources and headers, the data files.
    for required in ("tests/conftest.py", "setup.py", "pyproject.toml", "decentlearn/data/digits.npz",
                     "mkdocs.yml", "tools/mkdocs_hooks.py",  # tests/test_docs.py builds the site
                     "decentlearn/data/DIGITS_LICENSE.txt", "csrc/dl.h", "csrc/module.c",
                     "csrc/glue/glue.h"):
        assert required in shipped, required
    for folder, pattern in (("notebooks", "*.ipynb"), ("docs", "*.md"), ("csrc", "*.h"), ("csrc", "*.c"),
                            ("csrc/glue", "*.h"), ("csrc/glue", "*.c"), ("tests", "*.py")):
        files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / folder).glob(pattern))
        assert files, f"{folder}/{pattern} matches nothing in the checkout"
        missing = [f for f in files if f not in shipped]
        assert not missing, f"{folder}/{pattern} not in the sdist: {missing}"
    # Every tracked file outside the dot-folders ships (so a new test input cannot be forgotten;
    # add it to MANIFEST.in).
    missing = sorted(set(_tracked_files()) - shipped)
    assert not missing, f"tracked files missing from the sdist (add them to MANIFEST.in): {missing}"
    # No build products from the working tree.
    assert not [n for n in shipped if n.endswith((".so", ".o", ".pyc")) or "__pycache__" in n]


@pytest.mark.slow
def test_sdist_tests_pass_from_unpacked_tree(sdist, tmp_path):
    top, _ = _members(sdist)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    tree = tmp_path / top
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST") and k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tree)
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=900,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    where = subprocess.run(
        [sys.executable, "-c", "import decentlearn, decentlearn._core as c; print(decentlearn.__file__, c.__file__)"],
        cwd=tree, env=env, capture_output=True, text=True, check=True,
    ).stdout.split()
    assert all(pathlib.Path(p).resolve().is_relative_to(tree.resolve()) for p in where), where
    tests = ["tests/test_data.py", "tests/test_partition.py", "tests/test_download.py", "tests/test_gossip.py",
             "tests/test_notebooks.py::test_there_are_notebooks"]
    # The -W filter: with filterwarnings = error, hypothesis's pytest plugin turns a failing test's
    # report into an INTERNALERROR (mypy_extensions' DeprecationWarning) that hides the failure.
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-rf", "-p", "no:cacheprovider",
         "-W", "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning", *tests],
        cwd=tree, env=env, capture_output=True, text=True, timeout=900,
    )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "error" not in run.stdout.splitlines()[-1]

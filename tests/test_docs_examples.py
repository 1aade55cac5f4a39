"""The complete examples of the docs run as written: docs/write-your-own-algorithm.md's module is
saved as the page says, its Python block runs against it, and its shell commands run (with
``decentlearn`` as ``python -m decentlearn``, the same program)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _blocks(page: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / page).read_text(), flags=re.S)


def _env(tmp_path: Path) -> dict:
    import os
    # The example's folder first; decentlearn itself is the installed package (or PYTHONPATH's).
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "MPLBACKEND": "Agg"}


def test_write_your_own_algorithm(tmp_path):
    module, script = _blocks("write-your-own-algorithm.md", "python")
    (tmp_path / "relaxed.py").write_text(module)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("relaxed: accuracy ") and len(lines) == 2
    assert lines[1] == "beta must be a number in (0, 1], got 1.5"
    (commands,) = _blocks("write-your-own-algorithm.md", "bash")
    run, helped = commands.strip().splitlines()
    argv = shlex.split(run)
    assert argv[0] == "decentlearn"
    proc = subprocess.run([sys.executable, "-m", *argv], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = (tmp_path / "runs" / "relaxed" / "summary.json").read_text()
    assert '"algorithm": "relaxed"' in summary and '"beta": 0.7' in summary
    help_cmd, grep = helped.split(" | ")
    proc = subprocess.run([sys.executable, "-m", *shlex.split(help_cmd)[0:]], cwd=tmp_path,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "relaxed options" in proc.stdout and "--beta" in proc.stdout
    assert "relaxation of the gossip step" in " ".join(proc.stdout.split())

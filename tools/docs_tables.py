"""The results tables of README.md and docs/: made by running their commands, never typed.

Each table is declared once below: the ``decentlearn`` commands that produce it, the figures
taken from what each command prints (the summary table of ``decentlearn run``), and the files
where it is published, between ``<!-- table: NAME -->`` and ``<!-- /table -->``. The region holds
the commands (a ``bash`` block, as a reader would type them), the table and a sentence of derived
figures, all generated.

    python tools/docs_tables.py            # run the commands, print every region
    python tools/docs_tables.py --check    # exit 1 if a published region differs (tests do this)
    python tools/docs_tables.py --write    # rewrite the published regions

``DECENTLEARN_TABLE_ROUNDS=N`` runs every command with ``--rounds N`` instead (a quick look at the
pipeline: the figures then differ from the published ones, and ``--check`` says so). The commands
run as ``python -m decentlearn`` with this interpreter, in a temporary folder, so the figures are
those of the decentlearn that this Python imports.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The lines of ``decentlearn run``'s summary (decentlearn.outputs.format.format_summary) that the
#: tables quote, by the column name used below.
FIGURES = {
    "mean": ("test accuracy, peers mean", 0),
    "min": ("test accuracy, peers min / max", 0),
    "max": ("test accuracy, peers min / max", 1),
    "avg": ("test accuracy, average model", 0),
    "consensus": ("consensus distance", 0),
    "bytes": ("bytes sent, total", None),
}


@dataclass(frozen=True)
class Table:
    """One published table: a row per command."""

    name: str
    files: tuple[str, ...]
    #: (row label, command as published); the command's ``--out`` is where a reader's run lands.
    rows: tuple[tuple[str, str], ...]
    #: (column header, FIGURES key)
    columns: tuple[tuple[str, str], ...]
    #: A sentence of figures derived from the rows (a function of {label: {key: printed text}}).
    sentence: object = None
    #: Minutes rather than seconds to make: its test runs with the slow ones (pytest -m slow).
    slow: bool = False
    #: Data sets its commands read besides the embedded ones (its test skips without them).
    datasets: tuple[str, ...] = ()


def _noniid_sentence(f: dict) -> str:
    iid, skew = f["`iid`"], f["`classes:1` (one class per peer)"]
    ratio = float(skew["consensus"]) / float(iid["consensus"])
    drop = 100 * (float(iid["min"]) - float(skew["min"]))
    gain = 100 * (float(skew["avg"]) - float(skew["mean"]))
    return (f"With one class per peer the consensus distance is {ratio:.1f}× that of `iid`, the "
            f"worst peer is {drop:.0f} points lower, and the average model is {gain:.0f} points "
            f"above the peers' mean.")


def _choco_sentence(f: dict) -> str:
    dpsgd, choco = f["D-PSGD"], f["CHOCO-SGD, `topk:0.01`, γ = 0.1"]
    ratio = _mib(dpsgd["bytes"]) / _mib(choco["bytes"])
    drop = 100 * (float(dpsgd["mean"]) - float(choco["mean"]))
    return (f"CHOCO-SGD sends {ratio:.0f}× fewer bytes, and its peers end {drop:.0f} points "
            f"below D-PSGD's on this short non-IID run.")


def _mib(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"B": 2**-20, "KiB": 2**-10, "MiB": 1, "GiB": 2**10}[unit]


TABLES = (
    Table(
        name="noniid",
        files=("README.md", "docs/simulator.md"),
        rows=(("`iid`", "decentlearn run --partition iid --rounds 300 --out runs/iid"),
              ("`classes:1` (one class per peer)",
               "decentlearn run --partition classes:1 --rounds 300 --out runs/skew")),
        columns=(("test accuracy (peers mean)", "mean"), ("min peer", "min"),
                 ("average model", "avg"), ("consensus distance", "consensus")),
        sentence=_noniid_sentence,
    ),
    Table(
        name="choco",
        files=("README.md",),
        rows=(("D-PSGD", "decentlearn run --out runs/dpsgd"),
              ("CHOCO-SGD, `topk:0.01`, γ = 0.1",
               "decentlearn run --algorithm choco --compress topk:0.01 --gamma 0.1 "
               "--out runs/choco")),
        columns=(("test accuracy (peers mean)", "mean"), ("average model", "avg"),
                 ("bytes sent", "bytes")),
        sentence=_choco_sentence,
    ),
    Table(
        name="int8-cnn",
        files=("docs/low-precision.md",),
        rows=tuple((f"`{model}`, {precision}",
                    f"decentlearn run --partition iid --model {model} --rounds 150 "
                    f"--precision {precision} --out runs/{model.replace(':', '-')}-{precision}")
                   for model in ("cnn", "cnn:gn") for precision in ("fp32", "int8")),
        columns=(("test accuracy (peers mean)", "mean"), ("average model", "avg")),
        slow=True,
    ),
    Table(
        name="int8-fashion",
        files=("docs/low-precision.md",),
        rows=tuple((f"`{partition}`, {precision}",
                    f"decentlearn run --dataset fashion-mnist --partition {partition} "
                    f"--rounds 500 --eval-every 500 --precision {precision} "
                    f"--out runs/fashion-{partition.replace(':', '-')}-{precision}")
                   for partition in ("iid", "dirichlet:0.5", "shards:2")
                   for precision in ("fp32", "int8")),
        columns=(("test accuracy (peers mean)", "mean"), ("average model", "avg")),
        datasets=("fashion-mnist",),
    ),
)


def printed_figures(stdout: str) -> dict[str, str]:
    """The figures of ``decentlearn run``'s summary, as printed (text, not re-rounded)."""
    lines = {}
    for line in stdout.splitlines():
        match = re.match(r"\s+(\S.*?)\s{2,}(\S.*)$", line)
        if match:
            lines[match.group(1)] = match.group(2).strip()
    out = {}
    for key, (label, part) in FIGURES.items():
        if label not in lines:
            raise RuntimeError(f"the run printed no {label!r} line:\n{stdout}")
        value = lines[label]
        out[key] = value if part is None else value.split(" / ")[part]
    return out


def run_command(command: str, workdir: Path, rounds: int | None) -> dict[str, str]:
    """Runs one published command (``decentlearn ...``) and returns the figures it printed."""
    argv = shlex.split(command)
    if argv[0] != "decentlearn":
        raise ValueError(f"a table's command must start with decentlearn, got {command!r}")
    argv = [sys.executable, "-m", "decentlearn", *argv[1:], "--quiet"]
    if rounds is not None:
        argv += ["--rounds", str(rounds)]
    env = dict(os.environ, MPLBACKEND="Agg")
    proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{command} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return printed_figures(proc.stdout)


def render(table: Table, figures: dict[str, dict[str, str]]) -> str:
    """The region's Markdown: the commands, the table, the derived sentence."""
    lines = ["```bash", *[cmd for _, cmd in table.rows], "```", ""]
    lines.append("| run | " + " | ".join(h for h, _ in table.columns) + " |")
    lines.append("|---" * (len(table.columns) + 1) + "|")
    for label, _ in table.rows:
        lines.append(f"| {label} | " + " | ".join(figures[label][k] for _, k in table.columns)
                     + " |")
    if table.sentence is not None:
        lines += ["", textwrap.fill(table.sentence(figures), width=100, break_on_hyphens=False)]
    return "\n".join(lines)


def make(table: Table, rounds: int | None = None) -> str:
    with tempfile.TemporaryDirectory(prefix="decentlearn-table-") as tmp:
        figures = {label: run_command(cmd, Path(tmp), rounds) for label, cmd in table.rows}
    return render(table, figures)


def _region(name: str) -> re.Pattern:
    """The region of table ``name``: its opening marker, its text (which never holds a closing
    marker, so that an empty region cannot swallow the next one), its closing marker."""
    return re.compile(rf"(<!-- table: {re.escape(name)} -->\n)((?:(?!<!-- /table -->).)*?)"
                      rf"(\n?<!-- /table -->)", re.S)


def published(table: Table, file: str) -> str:
    """The region of ``file`` that holds ``table`` (ValueError when it has none)."""
    match = _region(table.name).search((ROOT / file).read_text(encoding="utf-8"))
    if match is None:
        raise ValueError(f"{file} has no '<!-- table: {table.name} -->' ... '<!-- /table -->'")
    return match.group(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true",
                        help="exit 1 if a published table differs from what its commands print")
    action.add_argument("--write", action="store_true", help="rewrite the published tables")
    parser.add_argument("--table", choices=[t.name for t in TABLES], action="append",
                        help="only this table (repeatable)")
    args = parser.parse_args(argv)
    rounds = os.environ.get("DECENTLEARN_TABLE_ROUNDS")
    rounds = int(rounds) if rounds else None
    status = 0
    for table in TABLES:
        if args.table and table.name not in args.table:
            continue
        text = make(table, rounds)
        for file in table.files:
            old = published(table, file)
            if args.write:
                path = ROOT / file
                new = _region(table.name).sub(lambda m: m.group(1) + text + "\n<!-- /table -->",
                                              path.read_text(encoding="utf-8"))
                path.write_text(new, encoding="utf-8")
            elif args.check and old != text:
                print(f"{file}: table {table.name!r} differs from what its commands print.\n"
                      f"published:\n{old}\nprinted:\n{text}\n"
                      f"(python tools/docs_tables.py --write rewrites it)")
                status = 1
        if not args.check and not args.write:
            print(f"<!-- table: {table.name} -->\n{text}\n<!-- /table -->\n")
    return status


if __name__ == "__main__":
    sys.exit(main())

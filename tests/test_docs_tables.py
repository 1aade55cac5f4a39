"""The results tables of README.md and docs/ are what their commands print: tools/docs_tables.py
runs each table's commands (at full length: a 300-round default run takes seconds) and the test
fails when a published table, or its sentence of derived figures, differs by one character."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if not (ROOT / "tools" / "docs_tables.py").is_file():  # pragma: no cover - an installed package
    pytest.skip("no tools/docs_tables.py beside the tests", allow_module_level=True)
sys.path.insert(0, str(ROOT / "tools"))
try:
    import docs_tables
finally:
    sys.path.remove(str(ROOT / "tools"))

TABLES = {t.name: t for t in docs_tables.TABLES}


@pytest.fixture(autouse=True)
def _decentlearn_under_test(monkeypatch):
    """The commands run the decentlearn this test imports (the checkout's or the installed one)."""
    import decentlearn
    root = str(Path(decentlearn.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if t.slow else [])
                                  for n, t in sorted(TABLES.items())])
def test_published_table_is_what_its_commands_print(name):
    table = TABLES[name]
    for dataset in table.datasets:
        from decentlearn.data import load_dataset
        try:
            load_dataset(dataset)
        except FileNotFoundError:
            pytest.skip(f"table {name!r} needs the {dataset} data set, not on this machine")
    made = docs_tables.make(table)
    for file in table.files:
        assert docs_tables.published(table, file) == made, (
            f"{file}: table {name!r} differs from what its commands print; "
            f"`python tools/docs_tables.py --write` rewrites it.\nprinted:\n{made}")


def test_figures_are_read_as_printed():
    """The figures come from decentlearn run's own summary lines, as text (not re-rounded)."""
    from decentlearn.outputs.format import format_summary
    summary = {"test_accuracy_mean": 0.98125, "test_accuracy_min": 0.96, "test_accuracy_max": 0.99,
               "test_accuracy_avg_model": 0.969444, "consensus_distance": 0.0329812,
               "bytes_sent_total": 369098752, "bytes_sent_max_peer": 23068672,
               "spectral_gap": 0.0507, "rounds": 300, "wall_seconds": 11.5}
    figures = docs_tables.printed_figures("decentlearn 0.1.0: digits\n" + format_summary(summary))
    assert figures == {"mean": "0.9812", "min": "0.9600", "max": "0.9900", "avg": "0.9694",
                       "consensus": "0.03298", "bytes": "352 MiB"}


def test_check_fails_when_the_numbers_differ(tmp_path, monkeypatch):
    """The check can fail: the same commands at 3 rounds (DECENTLEARN_TABLE_ROUNDS) print other
    numbers, and ``--check`` says so with exit status 1; a region missing is an error."""
    monkeypatch.setenv("DECENTLEARN_TABLE_ROUNDS", "3")
    assert docs_tables.main(["--check", "--table", "noniid"]) == 1
    page = tmp_path / "page.md"
    page.write_text("no table here\n")
    monkeypatch.setattr(docs_tables, "ROOT", tmp_path)
    with pytest.raises(ValueError, match="no '<!-- table: noniid -->'"):
        docs_tables.published(TABLES["noniid"], "page.md")

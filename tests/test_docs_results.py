"""The reproduction tables in docs/ are the tables their scripts printed: every row of every
``benchmarks/reproduce/results/*.md`` (what ``benchmarks/reproduce/<study>.py`` writes) appears in
a docs page with the same numbers, in the same order (labels may be typeset differently)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = sorted((ROOT / "benchmarks" / "reproduce" / "results").glob("*.md"))
if not RESULTS:  # pragma: no cover - an installed package without the benchmarks
    pytest.skip("no benchmarks/reproduce/results beside the tests", allow_module_level=True)
NUMBER = re.compile(r"-?\d[\d,]*\.?\d*(?:e[-+]?\d+)?")


def _rows(text: str) -> list[str]:
    """The data rows of the Markdown tables in ``text``: the lines after a table's rule line."""
    rows, in_body = [], False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_body = False
        elif set(line) <= set("|-: "):
            in_body = True
        elif in_body:
            rows.append(line)
    return rows


def _numbers(row: str) -> tuple[str, ...]:
    """The numbers of a row's cells after the first (the label), thousands separators dropped."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    return tuple(n.replace(",", "") for c in cells[1:] for n in NUMBER.findall(c))


def _docs_rows() -> set[tuple[str, ...]]:
    return {_numbers(r) for page in (ROOT / "docs").glob("*.md") for r in _rows(page.read_text())}


#: Tables the docs show a selection of, with units rewritten (``MLP 38 KB``, ``10 Gbit/s``):
#: their rows are matched on the measured columns, the last four of each row.
SELECTION = {"network_time.md": 4}


@pytest.mark.parametrize("result", RESULTS, ids=[p.name for p in RESULTS])
def test_published_table_equals_what_its_script_printed(result):
    rows = _rows(result.read_text())
    assert rows, f"{result.name} has no table"
    if result.name in SELECTION:
        k = SELECTION[result.name]
        printed = {tuple(sorted(_numbers(r)[-k:])) for r in rows}
        page_rows = [r for page in (ROOT / "docs").glob("*.md") for r in _rows(page.read_text())
                     if len(_numbers(r)) >= k]
        shown = [r for r in page_rows if tuple(sorted(_numbers(r)[-k:])) in printed]
        assert len(shown) >= 5, f"the docs show too few of {result.name}'s rows"
        return
    docs = _docs_rows()
    missing = [r for r in rows if _numbers(r) not in docs]
    assert not missing, f"rows of {result.name} whose numbers no docs table shows: {missing[:3]}"


def test_a_changed_number_is_caught(tmp_path):
    row = "| NGC | 0.6743 | 5,210,624,000 | 10,421,248,000 |"
    assert _numbers(row) in _docs_rows()
    assert _numbers(row.replace("0.6743", "0.6744")) not in _docs_rows()
    assert _rows("a\n\n| h | x |\n|---|---|\n| r | 1 |\n| s | 2 |\n") == ["| r | 1 |", "| s | 2 |"]

"""Text reports of runs: the one table formatter every command prints with, the run's summary
table, and the comparison of several runs.

Byte counts are written by ``decentlearn.units.format_bytes`` (binary prefixes, 3 significant
digits) everywhere: run tables, comparisons, sweep summaries and memory estimates.
"""

from __future__ import annotations

import re

from decentlearn.units import format_bytes


def format_table(header: list[str], rows: list[list], *, indent: str = "",
                 rule: bool = True) -> str:
    """An aligned plain-text table: the header, a rule of dashes under it (``rule``), then the
    rows; cells are converted with ``str``. Numbers (and '-') are right-aligned, text and headers
    left-aligned, the first column always left-aligned; each line starts with ``indent`` and
    carries no trailing spaces. ``decentlearn compare`` and ``sweep`` print with the rule,
    ``decentlearn bench`` without it, indented by two spaces."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[j]) for r in cells) for j in range(len(header))]

    def cell(j: int, value: str, head: bool) -> str:
        number = value == "-" or re.match(r"[+-]?\d", value) is not None
        right = j > 0 and not head and number
        return value.rjust(widths[j]) if right else value.ljust(widths[j])

    lines = ["  ".join(cell(j, c, True) for j, c in enumerate(cells[0]))]
    if rule:
        lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(cell(j, c, False) for j, c in enumerate(r)) for r in cells[1:]]
    return "\n".join((indent + line).rstrip() for line in lines)


def format_summary(summary: dict) -> str:
    """The table ``decentlearn run`` prints at the end of a run: one line per figure of the
    simulator's summary (accuracy, consensus, bytes, spectral gap, time)."""
    rows = [
        ("test accuracy, peers mean", f"{summary['test_accuracy_mean']:.4f}"),
        ("test accuracy, peers min / max",
         f"{summary['test_accuracy_min']:.4f} / {summary['test_accuracy_max']:.4f}"),
        ("test accuracy, average model", f"{summary['test_accuracy_avg_model']:.4f}"),
        ("consensus distance", f"{summary['consensus_distance']:.4g}"),
        ("bytes sent, total", format_bytes(summary["bytes_sent_total"])),
        ("bytes sent, busiest peer", format_bytes(summary["bytes_sent_max_peer"])),
        ("spectral gap of W", "not computed (random graphs, n > 2048)"
         if summary["spectral_gap"] is None
         else f"{summary['spectral_gap']:.4g}"),
        ("precision", str(summary.get("precision", "fp32"))),
        ("rounds", str(summary["rounds"])),
        ("wall time", f"{summary['wall_seconds']:.1f} s"),
    ]
    if summary.get("bytes_client_to_server") or summary.get("bytes_server_to_client"):
        at = [k for k, _ in rows].index("bytes sent, busiest peer")  # the split after the total
        rows[at:at] = [(f"  {label}", format_bytes(summary.get(key, 0)))
                       for label, key in (("peer to peer", "bytes_peer"),
                                          ("client to server", "bytes_client_to_server"),
                                          ("server to client", "bytes_server_to_client"))]
    if summary.get("sim_seconds") is not None:  # --network: the simulated clock
        rows.append(("simulated time", f"{summary['sim_seconds']:.4g} s"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


# --- several runs: which options differ, the comparison table ---------------------------------

#: Config fields that never change what a run computes (results do not depend on the thread
#: count); they are left out of legends and comparison tables.
IGNORED_FIELDS = ("threads", "data_dir")


def differing_fields(configs: list[dict]) -> list[str]:
    """Config fields whose values are not all equal across ``configs`` (a field missing from a
    config counts as unset), in the order they first appear; IGNORED_FIELDS are left out."""
    keys = list(dict.fromkeys(k for c in configs for k in c))
    return [k for k in keys if k not in IGNORED_FIELDS
            and len({repr(c.get(k)) for c in configs}) > 1]


def config_cell(config: dict, key: str) -> str:
    """A config value for a label or table: "unset" for None, "?" when the run has no config."""
    if not config:
        return "?"
    return "unset" if config.get(key) is None else str(config.get(key))


#: Columns of compare_rows: (table header, summary key, table format). The summary key is the
#: column's name in ``compare --format csv|json`` (compare_records); ``status`` is the run's
#: status as ``rundir.Run.status`` reads it (``stale`` for a dead ``running`` run).
COMPARE_COLUMNS = (
    ("status", "status", "{}"),
    ("last round", "last_round", "{}"),
    ("acc mean", "test_accuracy_mean", "{:.4f}"),
    ("acc min", "test_accuracy_min", "{:.4f}"),
    ("avg model", "test_accuracy_avg_model", "{:.4f}"),
    ("consensus", "consensus_distance", "{:.3g}"),
    ("bytes sent", "bytes_sent_total", "bytes"),
    ("peer bytes", "bytes_peer", "bytes"),
    ("up bytes", "bytes_client_to_server", "bytes"),
    ("down bytes", "bytes_server_to_client", "bytes"),
    ("sim s", "sim_seconds", "{:.4g}"),
    ("wall s", "wall_seconds", "{:.1f}"),
)


def _run_names(runs: list) -> list[str]:
    """Each run's directory name, or its path where two runs share a name (two sweeps)."""
    names = [r.name for r in runs]
    if len(set(names)) < len(names):
        return [str(r.path) for r in runs]
    return names


def _summary_value(run, key: str):
    """A COMPARE_COLUMNS value of ``run``: its (stale-aware) status or its summary's value."""
    return run.status if key == "status" else run.summary.get(key)


def compare_rows(runs: list) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the comparison table of ``runs`` (``rundir.Run``): the run's directory
    (its path where two runs share a name), the config fields that differ, then COMPARE_COLUMNS
    from each summary.json ('-' where a run has no such value, e.g. an interrupted run's missing
    summary or a run without --network). For people: rounded, bytes with binary prefixes."""
    fields = differing_fields([r.config for r in runs if r.config])
    header = ["run", *fields, *(h for h, _, _ in COMPARE_COLUMNS)]
    rows = []
    for r, name in zip(runs, _run_names(runs)):
        row = [name, *(config_cell(r.config, k) for k in fields)]
        for _, key, fmt in COMPARE_COLUMNS:
            value = _summary_value(r, key)
            if value is None or isinstance(value, (dict, list)):
                row.append("-")
            elif fmt == "bytes":
                row.append(format_bytes(value) if isinstance(value, (int, float)) else str(value))
            else:
                try:
                    row.append(fmt.format(value))
                except (ValueError, TypeError):
                    row.append(str(value))
        rows.append(row)
    return header, rows


def _raw(value):
    """A summary value as a number where it is one: summary.json writes inf and nan as strings;
    lists and tables are not table values (None)."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    if isinstance(value, (dict, list)):
        return None
    return value


def compare_records(runs: list) -> tuple[list[str], list[dict]]:
    """(columns, records) of ``runs`` for other programs (``compare --format csv|json``): ``run``
    (the directory name) and ``path``, the config fields that differ (named as in config.toml;
    ``config.NAME`` where a name is also a summary column), then the summary keys of
    COMPARE_COLUMNS. Values are raw: bytes and rounds as integers, seconds and accuracies as
    unrounded floats, an absent value as None; every column name appears once."""
    fields = differing_fields([r.config for r in runs if r.config])
    keys = [key for _, key, _ in COMPARE_COLUMNS]
    named = {k: (f"config.{k}" if k in keys or k in ("run", "path") else k) for k in fields}
    columns = ["run", "path", *named.values(), *keys]
    records = []
    for r in runs:
        rec = {"run": r.name, "path": str(r.path)}
        for k in fields:
            rec[named[k]] = r.config.get(k) if r.config else None
        for key in keys:
            rec[key] = _raw(_summary_value(r, key))
        records.append(rec)
    return columns, records

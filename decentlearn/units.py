"""Byte counts as text: the one formatter every report uses (run tables, comparisons, sweeps,
memory estimates and their refusals)."""

from __future__ import annotations


def format_bytes(n: float) -> str:
    """A byte count with binary prefixes and 3 significant digits: 512 -> '512 B',
    1536 -> '1.5 KiB', 10_240_000 -> '9.77 MiB'. From 999.5 of a unit on (which 3 digits would
    write as '1e+03'), the next unit: 1010 MiB -> '0.986 GiB'."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if unit == "B" and abs(n) < 1024:
            return f"{n:.0f} B"
        if unit != "B" and (abs(n) < 999.5 or unit == "TiB"):
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"  # pragma: no cover - unreachable

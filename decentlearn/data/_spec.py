"""Parsing of ``"name:arg1:arg2"`` spec strings shared by the dataset and partition registries."""

from __future__ import annotations

import math
import numbers

__all__ = ["check_int", "parse_float", "parse_int", "split_spec"]


def split_spec(spec: object, argname: str = "spec") -> tuple[str, tuple[str, ...]]:
    """Split ``"name:a:b"`` into ``("name", ("a", "b"))``; the name is lower-cased."""
    if not isinstance(spec, str):
        raise TypeError(f"{argname} must be a str, got {type(spec).__name__}")
    parts = [p.strip() for p in spec.strip().split(":")]
    return parts[0].lower(), tuple(parts[1:])


def parse_float(text: str, *, what: str, spec: str, forms: str, positive: bool = False) -> float:
    """Parse one float argument of a spec; ValueError names the spec and the valid forms."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(
            f"spec {spec!r}: {what} must be a finite number {bound}, got {text!r}; valid forms: {forms}"
        )
    return value


def parse_int(text: str, *, what: str, spec: str, forms: str, minimum: int = 1) -> int:
    """Parse one integer argument of a spec; ValueError names the spec and the valid forms."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ValueError(
            f"spec {spec!r}: {what} must be an integer >= {minimum}, got {text!r}; valid forms: {forms}"
        )
    return value


def check_int(value: object, argname: str, *, minimum: int | None = None) -> int:
    """Check that ``value`` is an integer (not a bool) and at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argname} must be an int, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{argname} must be >= {minimum}, got {value}")
    return value

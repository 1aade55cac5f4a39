"""The instruction-set path the C kernels run (csrc/dispatch.c): the active one, the ones this CPU,
OS and build support (generic, avx2, avx512, avx512vnni, amx), and forcing one for a block of code
— benchmarks that compare two paths in one process (decentlearn.experiments.bench.bench_gemm).
DECENTLEARN_ISA chooses the path of a whole process at import instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from decentlearn._core import config as _core_config
from decentlearn._core import set_isa as _core_set_isa

__all__ = ["active_isa", "supported_isas", "using_isa"]


def active_isa() -> str:
    """The path every kernel runs now."""
    return _core_config()["isa"]


def supported_isas() -> list[str]:
    """The paths this CPU, OS and build can run, slowest first (the last is the default)."""
    return list(_core_config()["isa_supported"])


@contextmanager
def using_isa(name: str) -> Iterator[None]:
    """Runs the block on path ``name`` (ValueError naming the paths when it is unknown or not
    supported here), then restores the path that was active. Not thread-safe: the path is
    process-wide."""
    if not isinstance(name, str) or name not in supported_isas():
        raise ValueError(f"isa must be one of the supported paths {supported_isas()}, got "
                         f"{name!r}")
    before = active_isa()
    _core_set_isa(name)
    try:
        yield
    finally:
        _core_set_isa(before)

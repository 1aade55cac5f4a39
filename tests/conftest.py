"""Shared fixtures: every instruction-set path the CPU supports, restored after each test."""

import pytest

from decentlearn import _core

ISAS = _core.config()["isa_supported"]
_DEFAULT_ISA = _core.config()["isa"]


@pytest.fixture(params=ISAS)
def isa(request):
    """Runs the test once per supported ISA path (generic, avx2, avx512 ...)."""
    _core.set_isa(request.param)
    yield request.param
    _core.set_isa(_DEFAULT_ISA)

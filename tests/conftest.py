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


@pytest.fixture
def record_batches():
    """record_batches(sim) makes the simulator keep a copy of every per-peer minibatch it draws
    and returns the list they are appended to."""
    def attach(sim):
        draws, draw = [], sim.sample

        def sample():
            x, y = draw()
            draws.append((x.copy(), y.copy()))
            return x, y

        sim.sample = sample
        return draws
    return attach

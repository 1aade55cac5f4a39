"""Shared fixtures: every instruction-set path the CPU supports, restored after each test.

Thread counts above the CPU count are capped (decentlearn.ops.threads); the suite lifts the cap to
16 so that the tests asking for 3 threads (or more) run teams of that size on a 2-core machine, where
a thread's share of the work starts at other places than with 2.
"""

import os

os.environ.setdefault("DECENTLEARN_THREAD_CAP", "16")

import pytest  # noqa: E402

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

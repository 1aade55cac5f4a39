"""decentlearn: simulate and run decentralized learning, with the hot paths in C.

All peers' state is one C-contiguous (n_peers, dim) float32 array; ``decentlearn.ops`` runs the C
kernels on whole matrices. See ``show_config()`` for the build and the active instruction set.

``import decentlearn as dl`` is light: the submodules (``dl.topology``, ``dl.compress``, ``dl.sim``,
...) and ``dl.simulate`` / ``dl.RunConfig`` are imported on first use (PEP 562), and optional
heavy dependencies (matplotlib, networkx) only by the code that needs them.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import pkgutil
import platform
import sys

__version__ = "0.1.0"

#: How many times an idle OpenMP thread of libgomp (GCC's OpenMP, which the C extension links)
#: checks for work before it sleeps. libgomp's own default (300,000 checks, milliseconds of a
#: core) makes threads spin at every barrier against the other processes on a busy machine: the
#: README's Fashion-MNIST example ran 18x slower beside two busy loops on 2 cores, and 1.8x with
#: this count, at the same quiet speed (benchmarks/bench_load.py, docs/performance.md).
OMP_SPINCOUNT_DEFAULT = "10000"


def _set_omp_wait() -> str:
    """Sets GOMP_SPINCOUNT to OMP_SPINCOUNT_DEFAULT unless the user chose a wait policy or a spin
    count; libgomp reads them once, when it is loaded, which is when ``_core`` is first imported
    (after this). Returns how the policy was chosen, for ``config()``."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        chosen = {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ}
        return " ".join(f"{k}={v}" for k, v in chosen.items()) + " (from the environment)"
    try:
        with open("/proc/self/maps") as f:
            loaded = any("/libgomp.so" in line for line in f)
    except OSError:  # not Linux: nothing to tell
        loaded = False
    if loaded:  # another extension loaded libgomp first: too late to change it
        return "libgomp's default (libgomp was loaded before decentlearn)"
    os.environ["GOMP_SPINCOUNT"] = OMP_SPINCOUNT_DEFAULT
    return f"GOMP_SPINCOUNT={OMP_SPINCOUNT_DEFAULT} (decentlearn's default)"


_OMP_WAIT = _set_omp_wait()

#: How long an idle OpenBLAS thread (numpy's BLAS) spins before it sleeps, as
#: OPENBLAS_THREAD_TIMEOUT: 2^16 CPU cycles (tens of microseconds). OpenBLAS's own default, 2^28
#: cycles (about 0.1 s), keeps every BLAS thread spinning after each call: 128 ms of CPU after one
#: 512^2 matmul on 2 cores (2 BLAS threads); on 16 cores the 15 spinning threads held the cores
#: the next OpenMP kernel needed (the int8 GEMM ran 5-10x slower right after a numpy sgemm,
#: docs/performance.md), and on a busy machine they hold other processes' cores.
BLAS_THREAD_TIMEOUT_DEFAULT = "16"


def _set_blas_wait() -> str:
    """Sets OPENBLAS_THREAD_TIMEOUT to BLAS_THREAD_TIMEOUT_DEFAULT unless the user chose one;
    OpenBLAS reads it once, when it is loaded, which is when numpy is first imported (after this,
    unless numpy was imported before decentlearn). Returns how it was chosen, for ``config()``."""
    if "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        value = os.environ["OPENBLAS_THREAD_TIMEOUT"]
        return f"OPENBLAS_THREAD_TIMEOUT={value} (from the environment)"
    try:
        with open("/proc/self/maps") as f:
            loaded = any("openblas" in line.lower() for line in f)
    except OSError:  # not Linux: only what Python knows
        loaded = "numpy" in sys.modules
    if loaded:
        return "OpenBLAS's default (OpenBLAS was loaded before decentlearn)"
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = BLAS_THREAD_TIMEOUT_DEFAULT
    return f"OPENBLAS_THREAD_TIMEOUT={BLAS_THREAD_TIMEOUT_DEFAULT} (decentlearn's default)"


_BLAS_WAIT = _set_blas_wait()

import numpy as np  # noqa: E402  (after _set_blas_wait: numpy loads OpenBLAS)


def _submodules() -> list[str]:
    """The public submodules and subpackages (found on disk, not listed by hand)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


# Library logging (decentlearn.outputs.runlog): records go where the application configures
# them; without configuration none reach Python's last-resort stderr handler (the CLI reports
# warnings and errors itself, one line each).
logging.getLogger(__name__).addHandler(logging.NullHandler())

#: Names re-exported from submodules, imported on first access.
_EXPORTS = {"simulate": "sim", "RunConfig": "sim", "Simulator": "sim", "Result": "sim",
            "Callback": "sim", "DivergenceError": "sim", "SetupWarning": "sim",
            "RunWriter": "outputs.rundir", "ArrayDataset": "data", "load_peers": "outputs"}


def __getattr__(name: str):
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_submodules()) | set(_EXPORTS))


def _numpy_blas() -> str:
    """Name and version of the BLAS numpy was built against, as numpy reports it."""
    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]
        blas = deps.get("blas", {})
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # numpy's config layout is not a stable API
        return "unknown"


def config() -> dict:
    """The build and run-time configuration as a dict (what ``show_config`` prints)."""
    from decentlearn import _core, ops

    core = _core.config()
    return {
        "decentlearn": __version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "compiler": core["compiler"],
        "openmp": core["openmp"],
        "openmp_version": core["omp_version"],
        "threads": ops.resolve_threads(None),
        "openmp_wait": _OMP_WAIT,
        "blas_wait": _BLAS_WAIT,
        "isa": core["isa"],
        "isa_supported": core["isa_supported"],
        "llc_bytes": core["llc_bytes"],
        "numpy": np.__version__,
        "numpy_blas": _numpy_blas(),
    }


def set_num_threads(n_threads: int | None) -> None:
    """Threads of every C kernel called without an explicit ``n_threads`` (layers, optimizer,
    gossip, compressors, int8) and of numpy's BLAS (via threadpoolctl); None: the default,
    min(OpenMP's maximum, CPU count), which honours OMP_NUM_THREADS. -1: every CPU."""
    from decentlearn import ops

    ops.set_num_threads(n_threads)


def get_num_threads() -> int:
    """Threads a kernel called without ``n_threads`` uses (see set_num_threads)."""
    from decentlearn import ops

    return ops.get_num_threads()


def show_config() -> None:
    """Prints version, OpenMP, thread count, active instruction-set path, numpy and its BLAS."""
    for key, value in config().items():
        if isinstance(value, list):
            value = ", ".join(value)
        print(f"{key:>15}: {value}")

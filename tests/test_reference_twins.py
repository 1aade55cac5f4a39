"""decentlearn.ops and decentlearn._reference carry one family name each (bottleneck's slow twins):
every kernel family of ops has a reference module of the same name whose functions have the same
names and signatures, and the references, being the spec, import neither ops nor _core."""

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest

import decentlearn._reference
import decentlearn.ops

#: ops modules that are not kernel families: thread counts, the shared argument checks and the
#: choice of ISA path.
NOT_FAMILIES = {"threads", "args", "isa"}
#: Functions without a same-signature twin, and why. as_csr converts an argument and runs no
#: kernel (the gossip twin reads W on its own); peak_s8's twin is the operation count it reports
#: (peak_s8_window's counts are whole chunks of it)
#: (_reference.peak.peak_ops); packing B is the layout of one microkernel (a packed B is B in the
#: spec, which gemm_s8 and gemm_s8_f32 take directly).
NO_TWIN = {("gossip", "as_csr"), ("peak", "peak_s8"), ("peak", "peak_s8_window"),
           ("gemm_s8", "pack_b_s8")}

FAMILIES = sorted(m.name for m in pkgutil.iter_modules(decentlearn.ops.__path__)
                  if m.name not in NOT_FAMILIES)


def _signature(fn) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_every_family_is_found():
    assert {"gossip", "topk", "quant", "gemm_s8", "nn", "optim", "pool"} <= set(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_twin_has_the_same_functions_and_signatures(family):
    fam = importlib.import_module(f"decentlearn.ops.{family}")
    ref = importlib.import_module(f"decentlearn._reference.{family}")
    checked = 0
    for name in fam.__all__:
        fn = getattr(fam, name)
        if not inspect.isfunction(fn) or name.startswith("check_") or (family, name) in NO_TWIN:
            continue
        assert inspect.isfunction(getattr(ref, name, None)), f"_reference.{family}.{name}"
        assert _signature(getattr(ref, name)) == _signature(fn), name
        checked += 1
    assert checked or (family, "peak_s8") in NO_TWIN


def test_references_import_neither_ops_nor_core():
    names = [f"decentlearn._reference.{m.name}"
             for m in pkgutil.iter_modules(decentlearn._reference.__path__)]
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "bad = [m for m in ('decentlearn.ops', 'decentlearn._core') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)

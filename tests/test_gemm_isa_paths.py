"""The int8 GEMMs of every ISA path against each other bit for bit, with the AMX tile path in view:
its tile edges (rows 16/32, columns 16/64, k blocks of 64 and groups of 4), wide outputs written
with non-temporal stores at every misalignment, k up to GEMM_S8_MAX_K, the batched GEMM and the
fused dense layer; the packed B shared by avx512vnni and amx; how amx is detected (CPUID and
/proc/cpuinfo), that the default falls back when the OS refuses the tile state, and that forcing
an ISA the CPU lacks is a clear error. The int64 NumPy product is the reference; float outputs
are compared between the FMA paths (avx2, avx512, avx512vnni, amx), which agree bit for bit."""

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import decentlearn
from decentlearn import _core, ops
from decentlearn._reference import gemm_s8 as ref

ISAS = _core.config()["isa_supported"]
HAS_AMX = "amx" in ISAS
#: Paths whose float epilogue is the same fused multiply-add (generic rounds twice).
FMA_PATHS = [i for i in ("avx2", "avx512", "avx512vnni", "amx") if i in ISAS]
needs_amx = pytest.mark.skipif(not HAS_AMX, reason="this CPU, OS or build has no AMX-INT8 "
                               "(CPUID, XCR0 tile state and the Linux permission are all needed)")

# m around the 16-row tile and 32-row microkernel, k around the 4-value group and 64-value block,
# n around the 16-column tile and 64-column panel; n >= 512 takes the streaming stores.
EDGE_SHAPES = [(1, 1, 1), (1, 64, 64), (15, 3, 17), (16, 4, 16), (17, 5, 15), (31, 63, 63),
               (32, 64, 64), (33, 65, 65), (47, 127, 129), (64, 128, 128), (100, 129, 200),
               (129, 1000, 70), (7, 200, 513), (33, 130, 1024), (65, 64, 600),
               # whole 32-row tiles of a wide, line-aligned C: the stores overlapping the tiles
               (128, 100, 576), (160, 64, 512), (96, 1000, 640)]


def _ab(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(-128, 128, (m, k), dtype=np.int8),
            rng.integers(-128, 128, (k, n), dtype=np.int8))


def _on(isa, fn, *args, **kw):
    with ops.using_isa(isa):
        return fn(*args, **kw)


@pytest.mark.parametrize("shape", EDGE_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_path_exact_and_identical(shape):
    m, k, n = shape
    a, b = _ab(m, k, n)
    want = a.astype(np.int64) @ b.astype(np.int64)
    rng = np.random.default_rng(1)
    a_scale, b_scale = 0.0123, rng.uniform(0.001, 0.1, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    floats = {}
    for isa in ISAS:
        pb = _on(isa, ops.pack_b_s8, b)
        for threads in (1, 2):
            np.testing.assert_array_equal(_on(isa, ops.gemm_s8, a, pb, n_threads=threads), want,
                                          err_msg=isa)
        floats[isa] = _on(isa, ops.gemm_s8_f32, a, pb, a_scale, b_scale, bias, n_threads=2)
        np.testing.assert_allclose(floats[isa], ref.gemm_s8_f32(a, b, a_scale, b_scale, bias),
                                   rtol=1e-5, atol=1e-5 * (np.abs(bias).max() + 1))
    for isa in FMA_PATHS[1:]:
        np.testing.assert_array_equal(floats[isa], floats[FMA_PATHS[0]], err_msg=isa)


@needs_amx
@pytest.mark.parametrize("offset", range(16))
def test_amx_wide_output_any_alignment(offset):
    """A wide C (n >= 512) of whole row tiles is written with non-temporal stores overlapping the
    multiplies when its rows start on 64-byte lines (offset 0) and with plain stores otherwise:
    every misalignment of out (0..15 values) gives the same int32 and float32 results, and
    nothing outside out is written."""
    m, k, n = 64, 70, 512
    a, b = _ab(m, k, n, seed=offset)
    want = a.astype(np.int64) @ b.astype(np.int64)
    buf = ops.empty_aligned(m * n + 32, np.int32)
    buf[:] = -7
    out = buf[offset:offset + m * n].reshape(m, n)
    pb = _on("amx", ops.pack_b_s8, b)
    _on("amx", ops.gemm_s8, a, pb, out=out, n_threads=2)
    np.testing.assert_array_equal(out, want)
    assert (buf[:offset] == -7).all() and (buf[offset + m * n:] == -7).all()
    fbuf = ops.empty_aligned(m * n + 32, np.float32)
    fbuf[:] = np.nan
    fout = fbuf[offset:offset + m * n].reshape(m, n)
    bias = np.linspace(-1, 1, n, dtype=np.float32)
    _on("amx", ops.gemm_s8_f32, a, pb, 0.01, 0.02, bias, out=fout)
    np.testing.assert_array_equal(fout, _on("avx512vnni", ops.gemm_s8_f32, a, pb, 0.01, 0.02,
                                            bias))
    assert np.isnan(fbuf[:offset]).all() and np.isnan(fbuf[offset + m * n:]).all()


@needs_amx
@pytest.mark.parametrize("k", [ops.GEMM_S8_MAX_K, ops.GEMM_S8_MAX_K - 71, 4095, 4097])
def test_amx_large_k(k):
    """k up to the exact limit, with and without a partial last block of 64: the extreme products
    that sum to near +-2^31 stay exact."""
    rng = np.random.default_rng(k)
    a = rng.choice(np.array([-128, 127], np.int8), (33, k))
    a[0] = -128
    b = rng.choice(np.array([-128, 127], np.int8), (k, 17))
    b[:, 0] = -128
    want = a.astype(np.int64) @ b.astype(np.int64)
    assert np.abs(want).max() <= 2**31 - 1
    for isa in ("avx512vnni", "amx"):
        np.testing.assert_array_equal(_on(isa, ops.gemm_s8, a, b, n_threads=2), want)


@needs_amx
def test_amx_shares_the_vnni_packed_b():
    a, b = _ab(40, 300, 130)
    want = a.astype(np.int64) @ b.astype(np.int64)
    pv, pa = _on("avx512vnni", ops.pack_b_s8, b), _on("amx", ops.pack_b_s8, b)
    assert pv.layout == pa.layout == "vnni"
    np.testing.assert_array_equal(pv.data, pa.data)
    np.testing.assert_array_equal(_on("amx", ops.gemm_s8, a, pv), want)
    np.testing.assert_array_equal(_on("avx512vnni", ops.gemm_s8, a, pa), want)


@pytest.mark.parametrize("shape", [(3, 7, 33, 65), (2, 33, 129, 600), (5, 1, 1, 1),
                                   (4, 70, 64, 17), (2, 64, 129, 640)],
                         ids=lambda s: "x".join(map(str, s)))
def test_batched_every_path_identical(shape):
    p, m, k, n = shape
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (p, m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (p, k, n), dtype=np.int8)
    at = np.ascontiguousarray(a.transpose(0, 2, 1))
    bt = np.ascontiguousarray(b.transpose(0, 2, 1))
    want = ref.gemm_s8_batched(a, b)
    sa = rng.uniform(0.01, 0.1, p).astype(np.float32)
    sb = rng.uniform(0.01, 0.1, (p, n)).astype(np.float32)
    bias = rng.standard_normal((p, n)).astype(np.float32)
    floats = {}
    for isa in ISAS:
        np.testing.assert_array_equal(_on(isa, ops.gemm_s8_batched, a, b, n_threads=2), want)
        np.testing.assert_array_equal(_on(isa, ops.gemm_s8_batched, at, b, trans_a=True), want)
        np.testing.assert_array_equal(_on(isa, ops.gemm_s8_batched, a, bt, trans_b=True), want)
        floats[isa] = _on(isa, ops.gemm_s8_batched_f32, a, b, sa, sb, bias=bias, n_threads=2)
    for isa in FMA_PATHS[1:]:
        np.testing.assert_array_equal(floats[isa], floats[FMA_PATHS[0]], err_msg=isa)


@pytest.mark.parametrize("shape", [(3, 32, 64, 128), (2, 7, 33, 17), (2, 40, 784, 10),
                                   (1, 1, 1, 1), (2, 64, 33, 65), (3, 70, 100, 130),
                                   (1, 129, 64, 600)], ids=lambda s: "x".join(map(str, s)))
def test_dense_layer_every_path_identical(shape):
    """The fused int8 dense layer forward and backward: codes equal on every path, outputs and
    gradients equal bit for bit on the FMA paths (amx runs its tile build from a batch of 64,
    the VNNI build below)."""
    p, bsz, i, o = shape
    rng = np.random.default_rng(3)
    x = rng.standard_normal((p, bsz, i)).astype(np.float32)
    w = rng.standard_normal((p, i, o)).astype(np.float32)
    bias = rng.standard_normal((p, o)).astype(np.float32)
    dy = rng.standard_normal((p, bsz, o)).astype(np.float32)
    mask = rng.standard_normal((p, bsz, i)).astype(np.float32)
    res = {}
    for isa in ISAS:
        y, codes = _on(isa, ops.gemm_s8_dense_forward, x, w, bias, True, n_threads=2)
        gw, gb = np.empty((p, i, o), np.float32), np.empty((p, o), np.float32)
        dx = np.empty((p, bsz, i), np.float32)
        _on(isa, ops.gemm_s8_dense_backward, dy, codes, gw, gb, dx, mask, seed=5, step=6,
            n_threads=2)
        res[isa] = (y, codes, gw, gb, dx)
    first = res[ISAS[0]][1]
    for isa in ISAS:
        for f in ("xq", "sx", "wq", "sw"):
            np.testing.assert_array_equal(getattr(res[isa][1], f), getattr(first, f))
    for isa in FMA_PATHS[1:]:
        for got, want, name in zip(res[isa], res[FMA_PATHS[0]], ("y", "", "gw", "gb", "dx")):
            if name:
                np.testing.assert_array_equal(got, want, err_msg=f"{isa} {name}")


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/cpuinfo")
def test_amx_detection_agrees_with_cpuinfo():
    """amx is listed only where the kernel reports amx_tile and amx_int8 (the OS enables the tile
    state), and listed wherever it does on Linux >= 5.16 (which grants the permission)."""
    flags = _cpu_flags()
    has = {"amx_tile", "amx_int8"} <= flags and "avx512_vnni" in flags
    if HAS_AMX:
        assert has
    release = tuple(int(x) for x in platform.release().split(".")[:2] if x.isdigit())
    if has and release >= (5, 16):
        assert HAS_AMX
    if HAS_AMX:  # the best path, the default of a process that forces none
        assert ISAS[-1] == "amx"
        env = {k: v for k, v in os.environ.items() if k != "DECENTLEARN_ISA"}
        r = _run("from decentlearn import _core; print(_core.config()['isa'])", env)
        assert r.stdout.strip() == "amx", r.stderr


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    """``python -c code`` on the package under test (the installed one in CI, the in-place build
    here), never the checkout's unbuilt decentlearn/ through the working directory."""
    pkg_root = str(Path(decentlearn.__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory() as cwd:
        return subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": pkg_root},
                              cwd=cwd, capture_output=True, text=True, timeout=120)


SHIM = textwrap.dedent("""
    #define _GNU_SOURCE
    #include <errno.h>
    #include <stdarg.h>
    #include <sys/syscall.h>
    /* syscall() that refuses arch_prctl(ARCH_REQ_XCOMP_PERM), as a kernel without AMX support */
    long syscall(long nr, ...) {
        va_list ap;
        va_start(ap, nr);
        long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
        long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
        va_end(ap);
        if (nr == SYS_arch_prctl && a1 == 0x1023) { errno = EINVAL; return -1; }
        long ret;
        register long r10 __asm__("r10") = a4, r8 __asm__("r8") = a5, r9 __asm__("r9") = a6;
        __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10),
                         "r"(r8), "r"(r9) : "rcx", "r11", "memory");
        if (ret < 0 && ret > -4096) { errno = (int)-ret; return -1; }
        return ret;
    }
""")


@needs_amx
@pytest.mark.skipif(platform.system() != "Linux" or shutil.which("cc") is None,
                    reason="needs Linux and a C compiler for the LD_PRELOAD shim")
def test_fallback_when_the_os_refuses_the_tile_state(tmp_path):
    """With the permission request refused (a preloaded syscall() that fails it, as an older
    kernel does), amx is not supported, the default is avx512vnni and its GEMM is exact; forcing
    DECENTLEARN_ISA=amx is an ImportError that says the CPU or build does not support it."""
    src, lib = tmp_path / "shim.c", tmp_path / "shim.so"
    src.write_text(SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "DECENTLEARN_ISA"}
    env["LD_PRELOAD"] = f"{env.get('LD_PRELOAD', '')} {lib}".strip()  # after a sanitizer runtime
    code = ("import numpy as np\nfrom decentlearn import _core, ops\n"
            "c = _core.config()\nprint(c['isa'], ','.join(c['isa_supported']))\n"
            "a = np.arange(-60, 60, dtype=np.int8).reshape(10, 12)\n"
            "assert (ops.gemm_s8(a, a.T.copy()) == a.astype(np.int64) @ a.T).all()\n")
    r = _run(code, env)
    assert r.returncode == 0, r.stderr
    isa, supported = r.stdout.split()
    assert isa == "avx512vnni" and "amx" not in supported.split(",")
    r = _run("import decentlearn._core", {**env, "DECENTLEARN_ISA": "amx"})
    assert r.returncode != 0
    assert "DECENTLEARN_ISA=amx: this CPU or build does not support it" in r.stderr
    r = _run("from decentlearn import _core; _core.set_isa('amx')", env)
    assert "set_isa: this CPU or build does not support 'amx'" in r.stderr


def test_forcing_an_unsupported_or_unknown_isa_is_a_clear_error():
    env = {k: v for k, v in os.environ.items() if k != "DECENTLEARN_ISA"}
    r = _run("import decentlearn._core", {**env, "DECENTLEARN_ISA": "amx512"})
    assert r.returncode != 0
    assert ("DECENTLEARN_ISA must be 'generic', 'avx2', 'avx512', 'avx512vnni' or 'amx', got "
            "'amx512'") in r.stderr
    missing = [i for i in ("avx2", "avx512", "avx512vnni", "amx") if i not in ISAS]
    for isa in missing[:1]:  # the lowest path this machine lacks (none on an AMX CPU)
        r = _run("import decentlearn._core", {**env, "DECENTLEARN_ISA": isa})
        assert f"DECENTLEARN_ISA={isa}: this CPU or build does not support it" in r.stderr
        with pytest.raises(ValueError, match=f"does not support '{isa}'"):
            _core.set_isa(isa)
    with pytest.raises(ValueError, match="isa must be one of the supported paths"):
        with ops.using_isa("amx512"):
            pass


def test_using_isa_restores_the_active_path():
    before = ops.active_isa()
    assert ops.supported_isas() == ISAS and before in ISAS
    for isa in ISAS:
        with ops.using_isa(isa):
            assert ops.active_isa() == isa
        assert ops.active_isa() == before
    with pytest.raises(RuntimeError):
        with ops.using_isa(ISAS[0]):
            raise RuntimeError
    assert ops.active_isa() == before


def test_outputs_are_allocated_aligned():
    """ops allocates the GEMMs' outputs on 64-byte lines (the AMX path streams whole lines)."""
    for shape, dtype in (((3, 5), np.float32), ((1024, 520), np.int32), ((2, 3, 4), np.int8)):
        a = ops.empty_aligned(shape, dtype)
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous
        assert a.flags.writeable and a.ctypes.data % 64 == 0
    a, b = _ab(5, 9, 600)
    pb = ops.pack_b_s8(b)
    assert ops.gemm_s8(a, pb).ctypes.data % 64 == 0
    assert ops.gemm_s8_f32(a, pb, 1.0, 1.0).ctypes.data % 64 == 0
    assert ops.gemm_s8_batched(a[None], b[None]).ctypes.data % 64 == 0


@pytest.mark.skipif("avx512vnni" not in ISAS, reason="this CPU has no AVX-512 VNNI")
@pytest.mark.parametrize("k,n", [(1, 1), (4, 64), (7, 65), (260, 130), (1000, 200)])
def test_vnni_packed_bytes_follow_the_layout(k, n):
    """The "vnni" layout, written out in NumPy: panel p, group g, column j, value kk at byte
    ((p * ceil(k / 4) + g) * 64 + j) * 4 + kk, B zero-padded to whole groups and panels; colsum
    the column sums (the SIMD packing of whole groups and the portable edge code agree)."""
    b = _ab(1, k, n, seed=k + n)[1]
    kg, n_pad = -(-k // 4), -(-n // 64) * 64
    padded = np.zeros((kg * 4, n_pad), np.int8)
    padded[:k, :n] = b
    want = padded.reshape(kg, 4, n_pad // 64, 64).transpose(2, 0, 3, 1).ravel()
    for isa in ("avx512vnni", "amx"):
        if isa in ISAS:
            pb = _on(isa, ops.pack_b_s8, b)
            np.testing.assert_array_equal(pb.data.view(np.int8), want)
            np.testing.assert_array_equal(pb.colsum, padded.astype(np.int64).sum(axis=0))

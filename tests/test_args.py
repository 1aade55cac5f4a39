"""Kernels' edges and integer arguments (issue 7, points 8, 9, 10): overlap checks, out-of-range
codes and scales, empty batches, seeds/steps/peers/threads range-checked with the argument named,
and a build whose OpenMP probe uses the build's own flags."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from decentlearn import _core, ops
from decentlearn._reference import gemm_s8 as ref_gemm

ROOT = pathlib.Path(__file__).resolve().parents[1]
FLT_MIN = np.finfo(np.float32).tiny


# --- point 8 -------------------------------------------------------------------------------------
def test_bitpack_refuses_codes_that_do_not_fit():
    codes = np.array([[0, 1, 15, 3]], np.uint8)
    np.testing.assert_array_equal(ops.bitunpack(ops.bitpack(codes, 4), 4, 4), codes)
    for bits, bad in [(4, 16), (1, 2), (7, 128), (3, 255)]:
        c = codes.copy() % (1 << bits)
        c[0, 2] = bad
        with pytest.raises(ValueError, match=rf"code must be < 2\*\*bits = {1 << bits}"):
            ops.bitpack(c, bits)


def test_bitpack_and_bitunpack_refuse_overlapping_out():
    buf = np.zeros(64, np.uint8)
    codes = buf[:16].reshape(1, 16)
    with pytest.raises(ValueError, match="bitpack: out must not share memory with codes"):
        ops.bitpack(codes, 4, out=buf[4:12].reshape(1, 8))
    packed = buf[:8].reshape(1, 8)
    with pytest.raises(ValueError, match="bitunpack: out must not share memory with packed"):
        ops.bitunpack(packed, 4, 16, out=buf[2:18].reshape(1, 16))


def test_golomb_decode_refuses_outputs_over_nbits():
    data, nbits = ops.golomb_encode(np.array([[1, 5]], np.int32), np.zeros((1, 2), np.uint8),
                                    10, 1)
    buf = np.zeros(8, np.int64)
    buf[0] = nbits[0]
    positions = buf[:1].view(np.int32).reshape(1, 2)  # the bytes of nbits[0]
    with pytest.raises(ValueError, match="positions must not share memory with nbits"):
        _core.golomb_decode(data, buf[:1], 10, 1, positions, np.zeros((1, 2), np.uint8), 1)


def test_gossip_refuses_out_over_the_csr_arrays():
    n, dim = 3, 4
    indptr = np.arange(n + 1, dtype=np.int64)
    indices = np.arange(n, dtype=np.int32)
    x = np.ones((n, dim), np.float32)
    buf = np.ones(n * dim + n, np.float32)
    data = buf[:n]  # W.data inside out's memory
    out = buf[:n * dim].reshape(n, dim)
    with pytest.raises(ValueError, match="gossip: out must not share memory with W.data"):
        _core.gossip(indptr, indices, data, n, x, out, 1)
    np.testing.assert_array_equal(ops.gossip((indptr, indices, np.ones(n, np.float32)), x), x)


def test_absmax_scale_of_tiny_rows_feeds_the_int8_path():
    """Rows whose max is subnormal (or just tiny) used to get a scale of 0 or a subnormal one, and
    quantize_s8 then refused it (or divided by it): the scale is now at least FLT_MIN."""
    x = np.array([[1e-44, -3e-45, 0.0], [1e-40, 0.0, -5e-41], [3e-38, 1e-38, 0.0],
                  [2.0, -1.0, 0.5], [0.0, 0.0, 0.0]], np.float32)
    scale = ops.absmax_scale(x, axis=0)
    np.testing.assert_array_equal(scale, ref_gemm.absmax_scale(x, axis=0))
    assert np.all(scale >= FLT_MIN) and np.all(np.isfinite(1 / scale))
    assert scale[3] == np.float32(2.0) / np.float32(127) and scale[4] == 1
    q = ops.quantize_s8(x, scale, axis=0)
    np.testing.assert_array_equal(q, ref_gemm.quantize_s8(x, scale, axis=0))
    y = ops.dequantize_s8(q, scale, axis=0)
    assert np.all(np.abs(y - x) <= scale[:, None] / 2)
    assert ops.absmax_scale(np.full(4, 1e-42, np.float32)) == FLT_MIN
    with pytest.raises(ValueError, match="FLT_MIN"):  # a subnormal scale from a caller
        ops.quantize_s8(x, np.float32(1e-40))


def test_gemm_s8_batched_with_no_peers_or_rows_is_empty():
    for P, m, k, n in [(0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 4, 0), (0, 0, 0, 0)]:
        a = np.ones((P, m, k), np.int8)
        b = np.ones((P, k, n), np.int8)
        out = ops.gemm_s8_batched(a, b)
        assert out.shape == (P, m, n) and out.dtype == np.int32
        f = ops.gemm_s8_batched_f32(a, b, 1.0, 2.0)
        assert f.shape == (P, m, n) and f.dtype == np.float32
    a = np.full((2, 3, 4), 2, np.int8)
    np.testing.assert_array_equal(ops.gemm_s8_batched(a, np.ones((2, 4, 5), np.int8)),
                                  np.full((2, 3, 5), 8))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_gemm_s8_f32_and_dequantize_refuse_nonfinite_scales(bad):
    a = np.ones((2, 3), np.int8)
    b = ops.pack_b_s8(np.ones((3, 4), np.int8))
    with pytest.raises(ValueError, match="b_scale must be finite"):
        ops.gemm_s8_f32(a, b, 1.0, np.array([1, bad, 1, 1], np.float32))
    with pytest.raises(ValueError, match="b_scale must be finite"):
        ops.gemm_s8_f32(a, b, 1.0, float(bad))
    with pytest.raises(ValueError, match="a_scale must be finite"):
        _core.gemm_s8_f32(a, b.data, b.colsum, b.layout, 3, 4, float(bad),
                          np.ones(1, np.float32), None, np.empty((2, 4), np.float32), 1)
    with pytest.raises(ValueError, match="dequantize_s8: scale must be finite"):
        ops.dequantize_s8(a, np.array([1, bad], np.float32), axis=0)
    with pytest.raises(ValueError, match="dequantize_s8: scale must be finite"):
        ops.dequantize_s8(a, float(bad))
    np.testing.assert_array_equal(ops.gemm_s8_f32(a, b, 0.5, 2.0), np.full((2, 4), 3.0))


# --- point 9 -------------------------------------------------------------------------------------
def _rng(seed, step, peer0, rows=2, n_threads=1):
    return _core.rng_u32(seed, step, peer0, np.empty((rows, 3), np.uint32), n_threads)


@pytest.mark.parametrize("name, args", [("seed", (2**64, 0, 0)), ("seed", (-1, 0, 0)),
                                        ("step", (0, 2**64, 0)), ("step", (0, 2**70, 0)),
                                        ("peer0", (0, 0, 2**63)), ("peer0", (0, 0, -1))])
def test_core_seed_step_peer0_out_of_range(name, args):
    """seed 2^64 used to be seed 0 (masked); peer0 2^63 raised an OverflowError naming nothing."""
    with pytest.raises(ValueError, match=rf"^{name} must be an integer >= 0 and <= 2\*\*6"):
        _rng(*args)
    np.testing.assert_array_equal(_rng(2**64 - 1, 2**64 - 1, 5), _rng(2**64 - 1, 2**64 - 1, 5))


def test_ops_seed_step_peer0_out_of_range():
    x = np.ones((2, 8), np.float32)
    for kw, name in [({"seed": 2**64}, "seed"), ({"step": 2**64}, "step"),
                     ({"peer0": 2**63}, "peer0")]:
        for fn in (ops.natural_encode, ops.int8_encode, ops.qsgd_encode):
            extra = (3,) if fn is ops.qsgd_encode else ()
            with pytest.raises(ValueError, match=rf"{name} must be an integer >= 0 and <= 2\*\*6"):
                fn(x, *extra, **kw)
        with pytest.raises(ValueError, match=f"{name} must be"):
            ops.rng_u32(**{"seed": 0, "step": 0, "peer0": 0, **kw}, n_rows=1, dim=1)
    assert not np.array_equal(ops.rng_u32(2**64 - 1, 0, 0, 1, 4), ops.rng_u32(0, 0, 0, 1, 4))


def test_peer0_plus_rows_must_not_overflow():
    with pytest.raises(ValueError, match=r"peer0 \+ n_rows - 1 must be <= 2\*\*63 - 1"):
        _rng(0, 0, 2**63 - 1, rows=2)
    _rng(0, 0, 2**63 - 2, rows=2)
    with pytest.raises(ValueError, match="peer0"):
        _core.randk(np.ones((3, 4), np.float32), 2, 0, 0, 2**63 - 2, np.empty((3, 2), np.int32),
                    np.empty((3, 2), np.float32), 1)


@pytest.mark.parametrize("n", [0, -1, -(2**70)])
def test_core_n_threads_below_one_named(n):
    with pytest.raises(ValueError, match=r"^n_threads must be an integer >= 1"):
        _rng(1, 2, 3, n_threads=n)


def test_n_threads_above_the_cpu_count_is_capped(monkeypatch):
    """200 threads (or 2^70, which overflowed with an unnamed OverflowError) give the result of a
    thread count the CPUs can run; ops.resolve_threads caps at the CPU count too, or at
    DECENTLEARN_THREAD_CAP (the suite's 16) when that is an integer in [1, 4096]."""
    monkeypatch.setenv("DECENTLEARN_THREAD_CAP", "16")  # the suite's value, whatever the shell says
    ref = _rng(1, 2, 3, rows=5)
    for n in (200, 2**31, 2**70):
        np.testing.assert_array_equal(_rng(1, 2, 3, rows=5, n_threads=n), ref)
    assert ops.resolve_threads(200) == 16
    monkeypatch.delenv("DECENTLEARN_THREAD_CAP")
    assert ops.resolve_threads(200) == ops.cpu_count()
    assert ops.resolve_threads(2**70) == ops.cpu_count()
    np.testing.assert_array_equal(_rng(1, 2, 3, rows=5, n_threads=200), ref)
    for bad in ("0", "4097", "-3", "x", ""):  # ignored: the CPU count
        monkeypatch.setenv("DECENTLEARN_THREAD_CAP", bad)
        assert ops.resolve_threads(200) == ops.cpu_count()
    monkeypatch.setenv("DECENTLEARN_THREAD_CAP", "3")
    assert ops.resolve_threads(200) == 3
    with pytest.raises(ValueError, match="n_threads"):
        ops.resolve_threads(0)


# --- point 10 ------------------------------------------------------------------------------------
def _libasan() -> str | None:
    try:
        path = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return path if os.path.isabs(path) and os.path.exists(path) else None


@pytest.mark.skipif(_libasan() is None, reason="needs gcc with libasan")
def test_openmp_probe_uses_the_build_flags(monkeypatch, tmp_path):
    """With CFLAGS/LDFLAGS of a sanitizer build, the probe used to link without them, fail, and
    build single-threaded kernels without saying so loudly."""
    import setuptools
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler

    monkeypatch.setattr(setuptools, "setup", lambda **kw: None)
    monkeypatch.setenv("CFLAGS", "-fsanitize=address")
    monkeypatch.setenv("LDFLAGS", "-fsanitize=address")
    monkeypatch.chdir(ROOT)
    spec = importlib.util.spec_from_file_location("dl_setup", ROOT / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    compiler = new_compiler()
    customize_compiler(compiler)
    assert mod._compiler_accepts(compiler, ["-fopenmp"], ["-fopenmp"])


def test_missing_openmp_is_loud(monkeypatch, capsys):
    import setuptools

    monkeypatch.setattr(setuptools, "setup", lambda **kw: None)
    monkeypatch.chdir(ROOT)
    spec = importlib.util.spec_from_file_location("dl_setup", ROOT / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod._warn_no_openmp("test")
    assert "WARNING: decentlearn is built WITHOUT OpenMP" in capsys.readouterr().err
    monkeypatch.setenv("DECENTLEARN_REQUIRE_OPENMP", "1")
    with pytest.raises(SystemExit, match="OpenMP is required"):
        mod._warn_no_openmp("test")


def test_sanitize_script_is_valid_bash():
    script = ROOT / "tools" / "sanitize.sh"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", str(script)], timeout=30).returncode == 0
    assert sys.executable  # the script runs $PYTHON or python


@pytest.mark.parametrize("name", ["device_cores_check.sh", "device_gpu_check.sh"])
def test_device_scripts_are_valid_bash(name):
    """The scripts run on a lent machine, once: a syntax error there costs the loan."""
    script = ROOT / "tools" / name
    assert subprocess.run(["bash", "-n", str(script)], timeout=30).returncode == 0
    text = script.read_text()
    for step in ("setup.py build_ext --inplace", "$OUT", "device_lib.sh"):
        assert step in text
    assert subprocess.run(["bash", "-n", str(ROOT / "tools" / "device_lib.sh")],
                          timeout=30).returncode == 0

"""decentlearn.torch on a device (``TorchModel.device``, RunConfig ``device``, ``--device``):
the device path run on the CPU against the host path (bit for bit: same kernels on the same
layout, only the copies differ), device strings and their errors, the per-rank GPU of the MPI
backend, ``decentlearn info``'s CUDA lines, and — marked ``gpu``, skipped without CUDA — the
CUDA path against the CPU within stated bounds, and its run-to-run determinism."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="decentlearn.torch needs the torch extra")

from decentlearn.cli import main  # noqa: E402
from decentlearn.sim import RunConfig, Simulator  # noqa: E402
from decentlearn.torch import device as tdev  # noqa: E402
from decentlearn.torch import make_torch_model  # noqa: E402

HAS_CUDA = tdev.cuda_unavailable_reason() is None
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU "
                                f"({tdev.cuda_unavailable_reason()})")


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _batch(shape, n_peers, batch, seed=0, n_classes=10):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_peers, batch, *shape)).astype(np.float32)
    if len(shape) == 1:  # character ids
        x = rng.integers(0, n_classes, (n_peers, batch, *shape)).astype(np.float32)
    return x, rng.integers(0, n_classes, (n_peers, batch))


def _pair(spec, shape, mode, device, n_classes=10):
    host = make_torch_model(spec, shape, n_classes)
    dev = make_torch_model(spec, shape, n_classes)
    host.mode = dev.mode = mode
    dev.device = device
    return host, dev


# ---- the device path on the CPU equals the host path bit for bit ------------------------------

@pytest.mark.parametrize("spec,shape", [("resnet20", (3, 8, 8)), ("resnet20:gn", (3, 8, 8)),
                                        ("gn-lenet", (3, 8, 8)), ("mlp:16", (1, 8, 8)),
                                        ("char-lstm:8", (6,))])
@pytest.mark.parametrize("mode", ["batched", "grouped:2", "grouped:1"])
def test_device_cpu_equals_host_path_bit_for_bit(spec, shape, mode, one_thread):
    """device="cpu" copies the matrix into a torch buffer, runs the passes on views of that copy
    and copies gradients and statistics back: the kernels and the memory layout they read are
    those of the host path, so every number is identical (not merely close)."""
    n_classes = 20 if spec.startswith("char") else 10
    host, dev = _pair(spec, shape, mode, "cpu", n_classes)
    X = np.stack([host.init(s) for s in range(3)]).astype(np.float32)
    X0 = X.copy()
    Xd = X.copy()
    x, y = _batch(shape, 3, 5, n_classes=n_classes)
    gh = np.full_like(X, np.nan)
    gd = np.full_like(X, np.nan)
    lh, _ = host.loss_and_grad(X, x, y, grad=gh)
    ld, out = dev.loss_and_grad(Xd, x, y, grad=gd)
    assert out is gd and np.isfinite(gd).all()
    np.testing.assert_array_equal(ld, lh)
    np.testing.assert_array_equal(gd, gh)
    np.testing.assert_array_equal(Xd, X)  # BatchNorm statistics written into the rows
    if host.params_dim < host.dim:
        assert not np.array_equal(X[:, host.params_dim:], X0[:, host.params_dim:])
    np.testing.assert_array_equal(dev.forward(Xd, x), host.forward(X, x))
    np.testing.assert_array_equal(dev.forward(Xd, x[0]), host.forward(X, x[0]))
    for a, b in zip(dev.evaluate(Xd, x[0], y[0], batch_size=2),
                    host.evaluate(X, x[0], y[0], batch_size=2)):
        np.testing.assert_array_equal(a, b)


def test_device_cpu_frozen_layers_and_shared_labels_equal_host(one_thread):
    """CoCoFL's per-peer frozen prefixes (a pass per group of peers, all frozen: forward only)
    on the device path, against the host path."""
    host, dev = _pair("resnet20", (3, 8, 8), "batched", "cpu")
    X = np.stack([host.init(s) for s in range(4)]).astype(np.float32)
    Xd = X.copy()
    x, y = _batch((3, 8, 8), 4, 3)
    n = len(host.param_layers)
    frozen = np.array([0, 2, n, 2])
    lh, gh = host.loss_and_grad(X, x, y, frozen=frozen)
    ld, gd = dev.loss_and_grad(Xd, x, y, frozen=frozen)
    np.testing.assert_array_equal(ld, lh)
    np.testing.assert_array_equal(gd, gh)
    np.testing.assert_array_equal(Xd, X)
    assert (gd[2] == 0).all() and (gd[1, :host.frozen_cut(2)] == 0).all()
    lh, gh = host.loss_and_grad(X, x[0], y[0])  # one batch shared by every peer
    ld, gd = dev.loss_and_grad(Xd, x[0], y[0])
    np.testing.assert_array_equal(ld, lh)
    np.testing.assert_array_equal(gd, gh)


def test_simulator_device_cpu_equals_default_and_summary_states_the_path(one_thread):
    cfg = RunConfig(model="torch:cnn", peers=4, rounds=3, eval_every=3, batch_size=4,
                    threads=1, seed=3)
    a = Simulator(cfg).run()
    b = Simulator(cfg.replace(device="cpu")).run()
    np.testing.assert_array_equal(b.params, a.params)
    assert [r["test_accuracy_mean"] for r in b.history] == \
        [r["test_accuracy_mean"] for r in a.history]
    assert a.summary["torch_device"]["path"] == "host-views"
    assert b.summary["torch_device"]["device"] == "cpu"
    assert b.summary["torch_device"]["path"] == "device-copy"
    assert b.summary["config"]["device"] == "cpu"


def test_device_setter_keeps_buffers_per_device_and_reports():
    m = make_torch_model("mlp:8", (1, 4, 4), 10)
    assert m.device is None and m.device_report()["path"] == "host-views"
    m.device = "cpu"
    assert m.device == "cpu" and m.device_report() == {
        "device": "cpu", "path": "device-copy", "torch": torch.__version__}
    m.device = None
    assert m.device is None
    with pytest.raises(ValueError, match=r"^device must be 'cpu', 'cuda' or 'cuda:N'"):
        m.device = "gpu"


def _resnet20_parameters(c_in, n_classes, norm_params_per_channel):
    """Closed-form parameter count of the CIFAR ResNet-20 (bias-free 3x3 convolutions, 1x1
    projection shortcuts where the width or stride changes, a norm layer after each
    convolution, a linear head): independent of the module."""
    def conv(cin, cout, k):
        return cin * cout * k * k

    def norm(c):
        return norm_params_per_channel * c

    total = conv(c_in, 16, 3) + norm(16)
    cin = 16
    for cout in (16, 32, 64):
        for b in range(3):
            total += conv(cin, cout, 3) + norm(cout) + conv(cout, cout, 3) + norm(cout)
            if cin != cout:
                total += conv(cin, cout, 1) + norm(cout)
            cin = cout
    return total + 64 * n_classes + n_classes


def test_gn_resnet20_the_benchmark_model_has_272474_parameters():
    """The model of the GPU benchmark (issue 23): ResNet-20 with GroupNorm, 272,474 parameters
    at 3x32x32 and 10 classes, no buffers (GroupNorm keeps no running statistics), GroupNorm
    with groups of 8 channels; the BatchNorm variant adds 2 x 784 running statistics."""
    gn = make_torch_model("resnet20:gn", (3, 32, 32), 10)
    assert _resnet20_parameters(3, 10, 2) == 272_474
    assert gn.dim == gn.params_dim == 272_474
    norms = [m for m in gn.module.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert len(norms) == 21 and all(m.num_channels == 8 * m.num_groups for m in norms)
    bn = make_torch_model("resnet20", (3, 32, 32), 10)
    assert bn.params_dim == 272_474 and bn.dim == 272_474 + 2 * 784


# ---- device strings, availability, errors ------------------------------------------------------

@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "cuda:", "cuda:-1", "cuda:01", "CPU", "cuda0",
                                 "cuda:1:2", 0, "", "mps"])
def test_bad_device_strings_name_the_argument(bad):
    with pytest.raises(ValueError, match=r"^device must be 'cpu', 'cuda' or 'cuda:N'"):
        tdev.parse_device(bad)
    with pytest.raises(ValueError, match=r"^device \(--device\) must be 'cpu', 'cuda' or"):
        RunConfig(model="torch:mlp", device=bad)


@pytest.mark.parametrize("good", [None, "cpu", "cuda", "cuda:0", "cuda:12"])
def test_good_device_strings(good):
    assert tdev.parse_device(good) == good
    assert RunConfig(model="torch:mlp", device=good).device == good


def test_device_with_a_native_model_is_refused():
    with pytest.raises(ValueError, match=r"^device \(--device\) applies to torch models"):
        RunConfig(model="mlp", device="cpu")


@pytest.mark.skipif(HAS_CUDA, reason="checks the message given when CUDA is missing")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_missing_says_what_is_missing(device):
    reason = tdev.cuda_unavailable_reason()
    assert reason and "\n" not in reason and torch.__version__ in reason
    with pytest.raises(ValueError, match=rf"^device='{device}': CUDA is not available \(torch "):
        tdev.resolve_device(device)
    m = make_torch_model("mlp:8", (1, 4, 4), 10)
    with pytest.raises(ValueError, match="CUDA is not available"):
        m.device = device
    assert m.device is None  # unchanged after the refusal


@pytest.mark.parametrize("argv,start", [
    (["--device", "cuda:x"], "run: device (--device) must be 'cpu', 'cuda' or 'cuda:N'"),
    (["--device", "tpu"], "run: device (--device) must be 'cpu', 'cuda' or 'cuda:N'"),
    (["--device", "cpu", "--model", "mlp"], "run: device (--device) applies to torch models"),
])
def test_cli_bad_device_is_one_line_exit_2(capsys, argv, start):
    args = ["run", "--model", "torch:mlp:8", "--rounds", "1", "--peers", "2", "--quiet", *argv]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(start) and "\n" not in err


@pytest.mark.skipif(HAS_CUDA, reason="checks the message given when CUDA is missing")
def test_cli_cuda_without_cuda_is_one_line_exit_2(capsys, tmp_path):
    assert main(["run", "--model", "torch:mlp:8", "--device", "cuda", "--rounds", "1",
                 "--quiet", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("run: --device cuda: CUDA is not available (torch ") and "\n" not in err
    assert not (tmp_path / "r").exists()  # refused before anything was built


def test_info_reports_cuda(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out.splitlines()
    fields = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
              for line in out if ":" in line}
    assert fields["torch"] == torch.__version__
    if HAS_CUDA:
        name = torch.cuda.get_device_name(0)
        assert any(line.strip().startswith(f"cuda:0: {name}, ") and "GiB" in line
                   for line in out)
    else:
        assert fields["CUDA"] == f"not available ({tdev.cuda_unavailable_reason()})"


def test_info_lines_of_an_available_gpu(monkeypatch):
    """The formatting of a GPU's line, from the report ``cuda_report`` returns on a GPU machine
    (replaced here: this machine may have none; the GPU test run checks the real one above)."""
    from decentlearn.cli.info import cuda_lines
    report = {"torch": "2.11.0+cu130", "cuda_built": "13.0", "cudnn": 91300, "available": True,
              "reason": None, "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
                                           "memory_bytes": 85_520_809_984, "capability": "9.0",
                                           "multiprocessors": 132}]}
    monkeypatch.setattr(tdev, "cuda_report", lambda: report)
    assert [line.strip() for line in cuda_lines()] == [
        "torch: 2.11.0+cu130", "torch_cuda: 13.0, cuDNN 91300",
        "cuda:0: NVIDIA H100 80GB HBM3, 79.6 GiB, compute capability 9.0, 132 multiprocessors"]


# ---- one GPU per MPI rank ------------------------------------------------------------------------

@pytest.mark.parametrize("count", [1, 2, 3, 8])
def test_rank_device_round_robin(count):
    got = [tdev.rank_device("cuda", r, count) for r in range(10)]
    assert got == [f"cuda:{r % count}" for r in range(10)]
    for kept in (None, "cpu", "cuda:1"):  # named devices are every rank's
        assert {tdev.rank_device(kept, r, count) for r in range(10)} == {kept}


def test_rank_device_without_gpus_and_bad_arguments():
    assert tdev.rank_device("cuda", 5, 0) == "cuda"  # resolve_device then says what is missing
    with pytest.raises(ValueError, match="^rank must be an int >= 0"):
        tdev.rank_device("cuda", -1, 2)
    with pytest.raises(ValueError, match="^count must be an int >= 0"):
        tdev.rank_device("cuda", 0, -2)
    with pytest.raises(ValueError, match="^device must be"):
        tdev.rank_device("gpu", 0, 2)


class _World:
    """The two calls MPIBackend.device makes of an mpi4py communicator."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size


@pytest.mark.parametrize("rank", [0, 1, 2, 5])
def test_mpi_backend_gives_each_rank_its_gpu(monkeypatch, rank):
    pytest.importorskip("mpi4py", reason="the MPI backend needs mpi4py")
    from decentlearn.mpi.backend import MPIBackend, check_supported
    monkeypatch.setattr(tdev, "cuda_device_count", lambda: 2)  # two GPUs, wherever this runs
    backend = MPIBackend(world=_World(rank, 6))
    cfg = RunConfig(model="torch:mlp", device="cuda")
    check_supported(cfg)  # device is a field the MPI backend handles
    assert backend.device(cfg) == f"cuda:{rank % 2}"
    assert backend.device(cfg.replace(device="cuda:1")) == "cuda:1"
    assert backend.device(cfg.replace(device="cpu")) == "cpu"
    assert backend.device(cfg.replace(device=None)) is None


# ---- on a CUDA GPU (marker gpu; skipped without one) ---------------------------------------------

@pytest.fixture
def fp32_cuda():
    """Full float32 on the GPU (TF32 off for cuDNN and cuBLAS), restored after."""
    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("spec,shape", [("resnet20:gn", (3, 16, 16)), ("resnet20", (3, 8, 8)),
                                        ("gn-lenet", (3, 16, 16)), ("cnn", (1, 28, 28))])
@pytest.mark.parametrize("mode", ["batched", "grouped:1"])
def test_cuda_one_step_close_to_cpu(spec, shape, mode, fp32_cuda):
    """One step on the GPU against the host path: float32 with another summation order, so
    close, not equal. Bounds: losses 1e-5 relative; gradients 1e-3 relative + 2e-4 of the
    largest entry; BatchNorm statistics 1e-5 (those of the CPU modes' test, test_torch.py)."""
    host, dev = _pair(spec, shape, mode, "cuda")
    X = np.stack([host.init(s) for s in range(4)]).astype(np.float32)
    Xd = X.copy()
    x, y = _batch(shape, 4, 8)
    lh, gh = host.loss_and_grad(X, x, y)
    ld, gd = dev.loss_and_grad(Xd, x, y)
    np.testing.assert_allclose(ld, lh, rtol=1e-5)
    np.testing.assert_allclose(gd, gh, rtol=1e-3, atol=2e-4 * np.abs(gh).max())
    np.testing.assert_allclose(Xd, X, rtol=1e-5, atol=1e-5)
    acc_h, loss_h = host.evaluate(X, x[0], y[0])
    acc_d, loss_d = dev.evaluate(Xd, x[0], y[0])
    np.testing.assert_allclose(loss_d, loss_h, rtol=1e-4)
    assert np.abs(acc_d - acc_h).max() <= 1 / 8  # at most one near-tie sample flips


def _dpsgd(device, spec="cnn", rounds=5):
    cfg = RunConfig(model=f"torch:{spec}", dataset="digits", peers=8, rounds=rounds,
                    eval_every=rounds, batch_size=8, lr=0.05, momentum=0.0, seed=1, threads=1,
                    device=device)
    return Simulator(cfg).run()


@pytest.mark.gpu
@needs_cuda
def test_cuda_dpsgd_close_to_cpu_after_rounds(fp32_cuda):
    """5 D-PSGD rounds (8 peers, ring, no momentum) on the GPU and on the CPU host path from the
    same seed: the parameters agree to 1e-5 absolute (the CPU twins' 20-round test holds 1e-6
    over 4x the rounds; updates are ~0.1)."""
    cpu = _dpsgd(None)
    gpu = _dpsgd("cuda")
    assert gpu.summary["torch_device"]["path"] == "device-copy"
    assert gpu.summary["torch_device"]["device"].startswith("cuda:")
    np.testing.assert_allclose(gpu.params, cpu.params, rtol=0, atol=1e-5)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("spec", ["cnn", "resnet20:gn"])
def test_cuda_runs_are_deterministic(spec):
    """Same GPU, same seed: bit-identical parameters (deterministic cuDNN/cuBLAS, make_deterministic),
    with PyTorch's default TF32 settings."""
    a = _dpsgd("cuda", spec, rounds=3)
    b = _dpsgd("cuda", spec, rounds=3)
    assert a.summary["torch_device"]["deterministic"] is True
    np.testing.assert_array_equal(b.params, a.params)

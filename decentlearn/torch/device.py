"""Where a ``TorchModel`` computes: the ``device`` strings decentlearn accepts (``"cpu"``,
``"cuda"``, ``"cuda:N"``), why CUDA is unavailable when it is, the device an MPI rank takes, the
CUDA report of ``decentlearn info``, and the determinism settings applied when a model moves to a
CUDA device (docs/torch.md, "GPU").

``cuda_device_count`` is the one place that asks torch how many CUDA devices are visible: tests
replace it (monkeypatch) to check the per-rank selection without a GPU.
"""

from __future__ import annotations

import os
import re

import torch

#: The accepted forms of a device string.
DEVICE_FORMS = ("cpu", "cuda", "cuda:N")

_DEVICE_RE = re.compile(r"cpu|cuda(:(0|[1-9][0-9]*))?")


def parse_device(value: object, name: str = "device") -> str | None:
    """``value`` if it is None, "cpu", "cuda" or "cuda:N" (N a GPU index >= 0); else a
    ValueError naming ``name``. No check that the device exists (``resolve_device`` does)."""
    if value is None or (isinstance(value, str) and _DEVICE_RE.fullmatch(value)):
        return value  # type: ignore[return-value]
    raise ValueError(f"{name} must be 'cpu', 'cuda' or 'cuda:N' (N a GPU index >= 0), got "
                     f"{value!r}")


def cuda_device_count() -> int:
    """CUDA devices visible to this process (0 without CUDA). The seam tests replace."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cuda_unavailable_reason() -> str | None:
    """None when a CUDA device can be used; else why not, in one line (what is missing)."""
    built = torch.version.cuda
    if built is None:
        return f"torch {torch.__version__} is built without CUDA (a CPU-only wheel)"
    if cuda_device_count() > 0:
        return None
    try:  # the driver's own explanation, when there is one
        torch.cuda.init()
        detail = "no CUDA device is visible"
    except Exception as e:  # noqa: BLE001 - any failure is the reason we report
        detail = " ".join(str(e).split()) or type(e).__name__
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        detail += f"; CUDA_VISIBLE_DEVICES={visible!r}"
    return f"torch {torch.__version__} (CUDA {built}) finds no usable GPU: {detail}"


def resolve_device(value: str | None) -> torch.device | None:
    """The torch.device of a device string (None stays None); ValueError, one line naming
    ``device``, when it is malformed, CUDA is unavailable or the index is out of range."""
    value = parse_device(value)
    if value is None:
        return None
    if value == "cpu":
        return torch.device("cpu")
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise ValueError(f"device={value!r}: CUDA is not available ({reason})")
    count = cuda_device_count()
    index = int(value.partition(":")[2] or torch.cuda.current_device())
    if index >= count:
        raise ValueError(f"device={value!r}: only {count} CUDA device(s) are visible "
                         f"(cuda:0 to cuda:{count - 1})")
    return torch.device("cuda", index)


def rank_device(device: str | None, rank: int, count: int) -> str | None:
    """The device MPI rank ``rank`` takes: plain "cuda" becomes ``cuda:{rank % count}`` (one
    GPU per rank, round robin over the ``count`` visible ones); "cuda:N", "cpu" and None are
    kept as given (every rank on the device named). With ``count`` 0, "cuda" stays "cuda" and
    ``resolve_device`` reports what is missing."""
    device = parse_device(device)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be an int >= 0, got {rank!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be an int >= 0, got {count!r}")
    if device == "cuda" and count > 0:
        return f"cuda:{rank % count}"
    return device


def make_deterministic() -> None:
    """Deterministic CUDA kernels, process-wide (torch's settings are global): cuDNN picks
    deterministic convolution algorithms and no autotuning, cuBLAS gets a fixed workspace
    (``CUBLAS_WORKSPACE_CONFIG``, read when its first handle is made; a value already set is
    kept), and ``torch.use_deterministic_algorithms(True, warn_only=True)``: an operation with
    no deterministic CUDA implementation warns (UserWarning) instead of failing."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)


def cuda_report() -> dict:
    """What ``decentlearn info`` prints: torch's version and the CUDA/cuDNN versions it was
    built with, and either every visible device (name, memory, compute capability) or the
    reason CUDA is unavailable."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    report: dict = {"torch": torch.__version__, "cuda_built": torch.version.cuda,
                    "cudnn": cudnn, "available": False, "reason": None, "devices": []}
    reason = cuda_unavailable_reason()
    if reason is not None:
        report["reason"] = reason
        return report
    report["available"] = True
    for i in range(cuda_device_count()):
        p = torch.cuda.get_device_properties(i)
        report["devices"].append({"index": i, "name": p.name, "memory_bytes": p.total_memory,
                                  "capability": f"{p.major}.{p.minor}",
                                  "multiprocessors": p.multi_processor_count})
    return report

"""``decentlearn info``: the build configuration (``decentlearn.show_config``), then what torch
models could run on: torch's version, and CUDA's (each GPU's name, memory, compute capability,
the CUDA and cuDNN versions torch was built with) or "CUDA: not available (reason)"."""

from __future__ import annotations


def cuda_lines() -> list[str]:
    """The CUDA part of ``info``, one line per item, aligned like ``show_config``."""
    try:
        from decentlearn.torch.device import cuda_report
    except ImportError as e:  # no torch: its message says how to install the extra
        return [f"{'torch':>15}: not installed",
                f"{'CUDA':>15}: not available ({' '.join(str(e).split())})"]
    r = cuda_report()
    lines = [f"{'torch':>15}: {r['torch']}",
             f"{'torch_cuda':>15}: {r['cuda_built'] or 'none (CPU-only build)'}"
             + (f", cuDNN {r['cudnn']}" if r["cudnn"] else "")]
    if not r["available"]:
        return lines + [f"{'CUDA':>15}: not available ({r['reason']})"]
    for d in r["devices"]:
        lines.append(f"{'cuda:' + str(d['index']):>15}: {d['name']}, "
                     f"{d['memory_bytes'] / 2**30:.1f} GiB, compute capability "
                     f"{d['capability']}, {d['multiprocessors']} multiprocessors")
    return lines


def cmd_info(args) -> int:
    from decentlearn import show_config
    show_config()
    for line in cuda_lines():
        print(line)
    return 0

"""Scale (issue 14, point 6), slow: 1000 and 10,000 peers on Fashion-MNIST complete, and the
memory estimate of `run --dry-run` brackets the measured peak RSS. Times are measured by
benchmarks/bench_scale.py, never asserted here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from decentlearn.data import load_dataset

ROOT = Path(__file__).resolve().parents[1]


def _have_fashion() -> bool:
    try:
        load_dataset("fashion-mnist")
    except (FileNotFoundError, OSError):
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("case", ["dpsgd-1000-ring", "dpsgd-1000-exponential", "10k-linear"])
def test_scaled_run_completes_within_its_estimate(case):
    if not _have_fashion():
        pytest.skip("Fashion-MNIST is not installed")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_scale.py"), "--child",
                          case], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    fig = json.loads(out.stdout.strip().splitlines()[-1])
    assert fig["samples"] >= 60_000
    assert 0.0 < fig["test_accuracy_mean"] <= 1.0
    # the estimate is an upper-side figure: within -10% / +50% of the peak RSS
    assert 0.9 * fig["peak_rss_bytes"] <= fig["estimate_bytes"] <= 1.5 * fig["peak_rss_bytes"]

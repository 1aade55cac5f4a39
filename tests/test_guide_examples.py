"""docs/callbacks-and-data.md runs as written: its Python blocks, in order, in one fresh
interpreter (a fresh one: the page registers a data set), and print what the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "callbacks-and-data.md"


def test_callbacks_and_data_guide_runs(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 5
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert out[0].startswith("evaluations with a laggard (round, peer): [")
    assert out[1] == str(["config.toml", "metrics.csv", "peers.csv", "run.log", "summary.json"])
    assert out[2] == "[10 20] (2, 8)"
    assert out[3].startswith("ArrayDataset(name='quadrants', train=1000, test=200, "
                             "input_shape=(20,),")
    assert re.fullmatch(r"accuracy 0\.\d{3}", out[4])
    assert re.fullmatch(r"arrays:quadrants:[0-9a-f]{16}", out[5])
    assert out[6] == "y_train must have one label per row of x_train (1000), got 999"
    assert out[7:9] == ["True", "4 (2,)"]
    assert re.fullmatch(r"blobs accuracy [01]\.\d{3}", out[9]) and len(out) == 10

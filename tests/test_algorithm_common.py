"""Checks every registered algorithm passes, whatever its name: the list is discovered, not kept
by hand, so a new algorithm file gets them all.

Each algorithm runs three rounds, checkpoints after the second and resumes to the same parameters
and metrics bit for bit, refuses a bad value of each of its options (and an option it does not
have) in one line naming it, and appears with its options in ``decentlearn run --help``. The
registry itself is complete in a fresh interpreter that imports only ``decentlearn.algorithms``.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import warnings

import numpy as np
import pytest

from decentlearn import algorithms
from decentlearn.cli import main
from decentlearn.runner import Callback
from decentlearn.sim import RunConfig, Simulator

NAMES = algorithms.available()
BASE = dict(peers=6, rounds=3, eval_every=1, batch_size=8, threads=1, seed=3)


def _config(name: str, **extra) -> RunConfig:
    return RunConfig(**{**BASE, "algorithm": name, **algorithms.get(name).example, **extra})


def _build(config: RunConfig) -> Simulator:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setup warnings are the setup checks' business
        return Simulator(config)


def test_registry_is_complete_in_a_fresh_interpreter(tmp_path):
    code = "import decentlearn.algorithms as a; print(','.join(a.available()))"
    # cwd away from the checkout: the installed package is imported, as in CI
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path)
    assert out.stdout.strip().split(",") == NAMES
    assert {"dpsgd", "choco", "ngc", "pushsum", "epidemic", "fedavg"} <= set(NAMES)


class _SaveAt(Callback):
    def __init__(self, path, at: int) -> None:
        self.path, self.at = path, at

    def on_round_complete(self, sim, t: int) -> None:
        if t + 1 == self.at:
            sim.save_checkpoint(self.path)


@pytest.mark.parametrize("name", NAMES)
def test_runs_checkpoints_and_resumes_bit_identically(name, tmp_path):
    config = _config(name)
    path = tmp_path / "checkpoint.npz"
    whole = _build(config).run([_SaveAt(path, 2)])
    assert len(whole.history) == 3 and np.isfinite(whole.params).all()
    resumed = _build(config)
    resumed.load_checkpoint(path)
    assert resumed.next_round == 2
    rest = resumed.run()
    assert np.array_equal(rest.params, whole.params)
    drop = ("wall_seconds",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in rest.history] == \
        [{k: v for k, v in r.items() if k not in drop} for r in whole.history]


def _bad_value(f: dataclasses.Field):
    return "bad:spec" if isinstance(f.default, str) else -1


@pytest.mark.parametrize("name", NAMES)
def test_refuses_a_bad_option_in_one_line(name, capsys):
    options = dataclasses.fields(algorithms.get(name).Options)
    for f in options:
        flag = "--" + f.name.replace("_", "-")
        code = main(["run", "--algorithm", name, flag, str(_bad_value(f)), "--rounds", "1",
                     "--quiet", "--out", "unused"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and f.name in err, (flag, err)
    # An option of another algorithm, or of none, is refused naming the algorithm's own.
    with pytest.raises(ValueError, match=f"is not an option of algorithm '{name}'"):
        RunConfig(algorithm=name, **{"no_such_option": 1})


@pytest.mark.parametrize("name", NAMES)
def test_appears_in_help_with_its_options(name, capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert name in text
    cls = algorithms.get(name)
    for f in dataclasses.fields(cls.Options):
        assert "--" + f.name.replace("_", "-") in text, f.name

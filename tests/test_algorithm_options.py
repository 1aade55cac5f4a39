"""Every algorithm of decentlearn.algorithms: selectable from the CLI,
its options validated in one line (exit code 2), and either running on a time-varying graph or
saying that it needs a static / undirected one."""

import numpy as np
import pytest

from decentlearn import algorithms
from decentlearn.cli import main
from decentlearn.sim import RunConfig, simulate

NEW = ["allreduce", "fedavg", "stc-fl", "fedhisyn", "dsgt", "d2", "dacfl", "ngc", "compngc",
       "skewscout"]

#: What each algorithm says on the directed, time-varying one-peer exponential graph (None: runs).
TIME_VARYING = {"d2": "static graph", "compngc": "static graph", "ngc": "undirected"}


def test_all_registered():
    assert set(NEW) <= set(algorithms.available())


@pytest.mark.parametrize("name", NEW)
def test_runs_or_refuses_time_varying_graph(name):
    cfg = RunConfig(peers=4, topology="one-peer-exponential", rounds=2, eval_every=2,
                    algorithm=name, momentum=0.0, batch_size=8, eval_samples=50)
    match = TIME_VARYING.get(name)
    if match is None:
        res = simulate(cfg)
        assert np.isfinite(res.params).all()
        assert res.summary["rounds"] == 2
    else:
        with pytest.raises(ValueError, match=match):
            simulate(cfg)


@pytest.mark.parametrize("args,word", [
    (["--algorithm", "ngc", "--ngc-alpha", "-0.1"], "ngc_alpha"),
    (["--algorithm", "fedavg", "--participation", "1.5"], "participation"),
    (["--algorithm", "fedhisyn", "--categories", "0"], "categories"),
    (["--algorithm", "fedhisyn", "--speeds", "pareto:1"], "speeds"),
    (["--algorithm", "skewscout", "--skew-target", "0"], "skew_target"),
    (["--algorithm", "skewscout", "--skew-probe-every", "0"], "skew_probe_every"),
    (["--algorithm", "dsgt", "--compress", "int8"], "compress must be 'none'"),
    (["--algorithm", "dsgt", "--local-steps", "2"], "local_steps must be 1"),
    (["--algorithm", "d2"], "optimizer must be sgd with momentum 0"),
    (["--algorithm", "stc-fl", "--server-compress", "bogus"], "server"),
])
def test_bad_hyperparameters_one_line_exit_2(args, word, capsys, tmp_path):
    code = main(["run", "--peers", "4", "--rounds", "1", "--quiet", "--out", str(tmp_path),
                 *args])
    _, err = capsys.readouterr()
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and word in err, err

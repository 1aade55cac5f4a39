"""Data as arrays: ArrayDataset runs with every registered partition exactly like the registered
data set holding the same arrays, refuses bad arrays in one line naming the argument, and is
recorded in configurations and checkpoints by a content digest."""

import json
import re

import numpy as np
import pytest

from decentlearn.cli import main
from decentlearn.data import ArrayDataset, available_partitions, load_dataset
from decentlearn.errors import CheckpointError
from decentlearn.runner.checkpoint import CheckpointCallback
from decentlearn.runner.config import STREAM_DATA, stream_seed
from decentlearn.sim import RunConfig, Simulator, simulate

#: Values for the placeholders of the registered partitions' spec forms ("shards:K" -> shards:2);
#: a new placeholder makes test_every_partition fail until it is given one here.
PLACEHOLDERS = {"K": "2", "C": "2", "ALPHA": "0.5", "MIN_SIZE": "2"}

PEERS = 4


def _specs() -> list[str]:
    specs = []
    for form in available_partitions():
        for alt in form.split("|"):
            alt = re.sub(r"\[.*?\]", "", alt.strip())  # optional arguments left out
            name, *args = alt.split(":")
            specs.append(":".join([name, *(PLACEHOLDERS[a] for a in args)]))
    return specs


def _arrays_of(d, **kw) -> ArrayDataset:
    return ArrayDataset(d.x_train, d.y_train, d.x_test, d.y_test, n_classes=d.n_classes, **kw)


def _history(result):
    return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in result.history]


@pytest.mark.parametrize("partition", _specs())
def test_every_partition_runs_on_arrays_as_on_the_registered_data_set(partition):
    # synthetic data has natural groups (one device per peer), so every scheme applies
    config = RunConfig(dataset="synthetic:1:1", peers=PEERS, rounds=4, eval_every=2, seed=5,
                       partition=partition, model="linear")
    d = load_dataset(config.dataset, seed=stream_seed(config.seed, STREAM_DATA), n_peers=PEERS)
    arrays = _arrays_of(d, name="synthetic", groups=d.groups)
    reference = simulate(config)
    ours = simulate(config, dataset=arrays)
    assert _history(ours) == _history(reference)  # the same run, bit for bit
    np.testing.assert_array_equal(ours.params, reference.params)
    assert ours.summary["config"]["dataset"] == arrays.spec


def test_images_and_features_of_any_shape():
    d = load_dataset("digits")
    images = _arrays_of(d)
    assert images.input_shape == (1, 8, 8)
    a = simulate(RunConfig(dataset="digits", peers=PEERS, rounds=2, eval_every=2, model="cnn"))
    b = simulate(RunConfig(dataset=images, peers=PEERS, rounds=2, eval_every=2, model="cnn"))
    assert _history(a) == _history(b)
    flat = ArrayDataset(d.x_train.reshape(len(d.x_train), -1), d.y_train.astype(np.int32),
                        d.x_test.reshape(len(d.x_test), -1).astype(np.float64), d.y_test)
    assert flat.input_shape == (64,) and flat.n_classes == 10 and flat.x_test.dtype == np.float32
    r = simulate(dataset=flat, peers=PEERS, rounds=2, eval_every=2)
    assert 0 <= r.summary["test_accuracy_mean"] <= 1


X = np.zeros((6, 3), dtype=np.float32)
Y = np.array([0, 1, 2, 0, 1, 2])


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(x_train=[1.0, 2.0]), ValueError, "x_train must have shape (n_samples, *features)"),
    (dict(x_train="abc"), TypeError, "x_train must be a numpy array"),
    (dict(x_test=np.array([["a", "b", "c"]])), TypeError, "x_test must hold real numbers"),
    (dict(x_train=np.zeros((0, 3))), ValueError, "x_train must hold at least one sample"),
    (dict(x_train=np.full((6, 3), np.nan)), ValueError, "x_train must hold finite values"),
    (dict(x_test=np.zeros((6, 4))), ValueError, "x_test must have the sample shape of x_train"),
    (dict(y_train=Y.astype(float)), TypeError, "y_train must hold integer class labels"),
    (dict(y_test=Y[:, None]), ValueError, "y_test must be 1-D"),
    (dict(y_train=Y[:5]), ValueError, "y_train must have one label per row of x_train (6)"),
    (dict(y_train=Y - 1), ValueError, "y_train must hold labels >= 0"),
    (dict(n_classes=2), ValueError, "y_train must hold labels in [0, n_classes=2)"),
    (dict(n_classes=1), ValueError, "n_classes must be an integer >= 2"),
    (dict(name="a:b"), ValueError, "name must be a non-empty str"),
    (dict(groups=np.zeros(5, dtype=int)), ValueError, "groups must have one entry per"),
    (dict(groups=np.zeros(6)), TypeError, "groups must be a 1-D integer array"),
])
def test_bad_arrays_one_line_naming_the_argument(kwargs, error, message):
    args = dict(x_train=X, y_train=Y, x_test=X, y_test=Y)
    extra = {k: kwargs.pop(k) for k in ("n_classes", "name", "groups") if k in kwargs}
    args.update(kwargs)
    with pytest.raises(error) as info:
        ArrayDataset(**args, **extra)
    text = str(info.value)
    assert message in text and "\n" not in text


def test_copied_read_only_and_recorded_by_digest(tmp_path):
    x = np.arange(18, dtype=np.float64).reshape(6, 3)
    ds = ArrayDataset(x, Y, x, Y)
    x[0, 0] = 99.0  # the caller's array is not the data set's
    assert ds.x_train[0, 0] == 0.0 and not ds.x_train.flags.writeable
    same, other = ArrayDataset(np.arange(18).reshape(6, 3), Y, x * 0 + np.arange(18).reshape(
        6, 3), Y), ArrayDataset(x, Y, x, Y)
    assert same.digest == ds.digest and other.digest != ds.digest
    assert re.fullmatch(r"arrays:arrays:[0-9a-f]{16}", ds.spec)
    config = RunConfig(dataset=ds, peers=2)
    assert config.to_dict()["dataset"] == ds.spec
    with pytest.raises(TypeError, match="dataset must be a data set spec"):
        RunConfig(dataset=3)


def test_resume_needs_the_same_arrays(tmp_path):
    d = load_dataset("digits")
    ds = _arrays_of(d)
    config = RunConfig(dataset=ds, peers=PEERS, rounds=2, eval_every=2)
    path = tmp_path / "checkpoint.npz"
    Simulator(config).run([CheckpointCallback(path, 2)])
    longer = config.replace(rounds=4)
    resumed = Simulator.from_checkpoint(path, longer).run()
    whole = Simulator(longer).run()
    # (round 2 ended the short run: its average model was evaluated on every test sample)
    assert _history(resumed)[1:] == _history(whole)[1:]
    np.testing.assert_array_equal(resumed.params, whole.params)
    changed = d.y_train.copy()
    changed[0] = (changed[0] + 1) % 10
    other = ArrayDataset(d.x_train, changed, d.x_test, d.y_test, n_classes=10)
    with pytest.raises(CheckpointError):
        Simulator.from_checkpoint(path, longer.replace(dataset=other))


def test_cli_cannot_load_an_array_spec(tmp_path, capsys):
    from decentlearn.outputs import RunWriter
    ds = ArrayDataset(X + np.arange(6)[:, None], Y, X, Y)
    config = RunConfig(dataset=ds, peers=2, rounds=2, eval_every=2)
    out = tmp_path / "run"
    out.mkdir()
    with RunWriter(out, config) as writer:
        writer.finish(Simulator(config).run([writer]).summary)
    assert f'dataset = "{ds.spec}"' in (out / "config.toml").read_text()
    assert json.loads((out / "summary.json").read_text())["config"]["dataset"] == ds.spec
    assert main(["run", "--config", str(out / "config.toml"), "--out", str(tmp_path / "b"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was given as arrays (ArrayDataset)" in err

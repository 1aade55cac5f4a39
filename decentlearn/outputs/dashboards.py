"""Callbacks that send a run's metrics to dashboards: TensorBoard and MLflow (optional extras).

Both are ordinary :class:`decentlearn.sim.Callback` objects: pass them to ``Simulator.run`` (or
``simulate(..., callbacks=[...])``), or ask ``decentlearn run --log-to tensorboard|mlflow``.
At every evaluation they record each number of the metrics.csv row at step = round, plus the
per-peer test accuracies (TensorBoard: a histogram; MLflow: nothing more, metrics.csv's mean,
minimum and maximum are there); at the start the run's configuration (TensorBoard: a text
summary; MLflow: parameters). :meth:`close` ends the record with the run's status (use the
callback as a context manager, or call it after the run).

* :class:`TensorBoardCallback` writes event files with ``tensorboardX`` (``pip install
  'decentlearn[tensorboard]'``); view them with ``tensorboard --logdir DIR``.
* :class:`MLflowCallback` logs through ``mlflow`` (``pip install 'decentlearn[mlflow]'``) to a
  tracking URI: a local database (``sqlite:///mlflow.db``, offline; MLflow 3's default), a
  server, or a folder (MLflow's file store).

A missing package is an ImportError whose message is one line saying what to install.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from decentlearn.runner import Callback

__all__ = ["DASHBOARDS", "MLflowCallback", "TensorBoardCallback", "check_dashboard", "flat_config",
           "make_dashboard"]


def _numbers(row: dict) -> dict[str, float]:
    """The finite numbers of an evaluation row but its round (bools and text left out)."""
    out = {}
    for key, value in row.items():
        if key == "round" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


def flat_config(config: Any) -> dict[str, Any]:
    """A RunConfig (or its ``to_dict()``) as one flat mapping: the algorithm's options as keys of
    their own, unset values left out."""
    values = dict(config.to_dict() if hasattr(config, "to_dict") else config)
    values.update(values.pop("options", None) or {})
    return {k: v for k, v in values.items() if v is not None}


class TensorBoardCallback(Callback):
    """Writes TensorBoard event files into ``log_dir`` (created if missing): one scalar series
    per metrics.csv column (tag = the column's name, step = round), a histogram of the peers'
    test accuracies (tag ``peers/test_accuracy``) and, given ``config``, the configuration as
    text (tag ``config``). ImportError (one line) without tensorboardX."""

    def __init__(self, log_dir: str | os.PathLike, config: Any = None) -> None:
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a str or os.PathLike, got {type(log_dir).__name__}")
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ImportError("TensorBoard logging needs tensorboardX: pip install "
                              "'decentlearn[tensorboard]'") from None
        self.log_dir = Path(log_dir)
        self.writer = SummaryWriter(logdir=str(self.log_dir))
        if config is not None:
            text = "\n".join(f"    {k} = {v!r}" for k, v in flat_config(config).items())
            self.writer.add_text("config", text, global_step=0)

    def on_eval(self, sim, row: dict) -> None:
        step = int(row["round"])
        for key, value in _numbers(row).items():
            self.writer.add_scalar(key, value, global_step=step)
        acc = getattr(sim, "last_accuracy", None)
        if acc is not None and len(acc):
            self.writer.add_histogram("peers/test_accuracy", np.asarray(acc, dtype=np.float64),
                                      global_step=step)
        self.writer.flush()

    def close(self, status: str = "completed") -> None:
        """Flushes and closes the event file (``status`` is not recorded: TensorBoard has none)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def __enter__(self) -> TensorBoardCallback:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("completed" if exc is None else "failed")


#: decentlearn's run statuses -> MLflow's.
_MLFLOW_STATUS = {"completed": "FINISHED", "interrupted": "KILLED", "diverged": "FAILED",
                  "failed": "FAILED"}


class MLflowCallback(Callback):
    """Logs a run to MLflow: an MLflow run named ``run_name`` in ``experiment`` (created if
    missing) at ``tracking_uri`` (default: MLflow's own, ``$MLFLOW_TRACKING_URI`` else
    ``sqlite:///mlflow.db`` in the current folder for MLflow 3), with the configuration as
    parameters (given ``config``) and every metrics.csv column as a metric (step = round).
    :meth:`close` sets the MLflow run's status (completed: FINISHED, interrupted: KILLED,
    diverged or failed: FAILED). ``run_id`` names it. ImportError (one line) without mlflow."""

    def __init__(self, tracking_uri: str | os.PathLike | None = None, *,
                 experiment: str = "decentlearn", run_name: str | None = None,
                 config: Any = None) -> None:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise ImportError("MLflow logging needs mlflow: pip install "
                              "'decentlearn[mlflow]'") from None
        if not isinstance(experiment, str) or not experiment:
            raise ValueError(f"experiment must be a non-empty str, got {experiment!r}")
        if tracking_uri is not None and not isinstance(tracking_uri, (str, os.PathLike)):
            raise TypeError(f"tracking_uri must be a str, os.PathLike or None, got "
                            f"{type(tracking_uri).__name__}")
        self.client = MlflowClient(tracking_uri=None if tracking_uri is None
                                   else os.fspath(tracking_uri))
        #: Where the run is logged (MLflow's default when none was given).
        self.tracking_uri = self.client.tracking_uri
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = (found.experiment_id if found is not None
                              else self.client.create_experiment(experiment))
        run = self.client.create_run(self.experiment_id, run_name=run_name)
        self.run_id = run.info.run_id
        self._open = True
        if config is not None:
            from mlflow.entities import Param
            params = [Param(k, str(v)[:6000]) for k, v in flat_config(config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 per batch
                self.client.log_batch(self.run_id, params=params[i:i + 100])

    def on_eval(self, sim, row: dict) -> None:
        from mlflow.entities import Metric
        step, now = int(row["round"]), int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in _numbers(row).items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self, status: str = "completed") -> None:
        """Ends the MLflow run with ``status`` (a decentlearn run status)."""
        if self._open:
            self.client.set_terminated(self.run_id, status=_MLFLOW_STATUS.get(status, "FAILED"))
            self._open = False

    def __enter__(self) -> MLflowCallback:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("completed" if exc is None else
                   "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")


#: The names ``decentlearn run --log-to`` takes.
DASHBOARDS = ("tensorboard", "mlflow")


def check_dashboard(name: str) -> None:
    """ValueError for a name not in DASHBOARDS; ImportError (one line) when its package is not
    installed. Nothing is created."""
    import importlib.util
    if name not in DASHBOARDS:
        raise ValueError(f"dashboard must be one of {', '.join(DASHBOARDS)}, got {name!r}")
    package, extra, what = (("tensorboardX", "tensorboard", "TensorBoard") if name == "tensorboard"
                            else ("mlflow", "mlflow", "MLflow"))
    if importlib.util.find_spec(package) is None:
        raise ImportError(f"{what} logging needs {package}: pip install 'decentlearn[{extra}]'")


def make_dashboard(name: str, run_dir: str | os.PathLike, config: Any = None) -> Callback:
    """The callback of ``decentlearn run --log-to NAME`` for the run in ``run_dir``:
    ``tensorboard`` writes into ``run_dir/tensorboard``; ``mlflow`` logs to MLflow's default
    tracking URI (``$MLFLOW_TRACKING_URI``, else ``./mlflow.db``), experiment ``decentlearn``,
    run named after the run directory. ValueError for another name; ImportError (one line)
    without the package."""
    if name == "tensorboard":
        return TensorBoardCallback(Path(run_dir) / "tensorboard", config=config)
    if name == "mlflow":
        return MLflowCallback(run_name=Path(run_dir).name, config=config)
    raise ValueError(f"dashboard must be one of {', '.join(DASHBOARDS)}, got {name!r}")

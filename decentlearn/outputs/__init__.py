"""What a run leaves behind: the run directory, its text reports, its plots and dashboards.

* :mod:`~decentlearn.outputs.rundir`: the run directory's layout, :class:`RunWriter` (streams
  config.toml, metrics.csv, peers.csv, run.log and summary.json as a run goes, atomically),
  :func:`load_run` and :func:`find_runs` (the runs of a folder, e.g. a sweep's);
* :mod:`~decentlearn.outputs.peers`: peers.csv (every peer's accuracy and loss at every
  evaluation) and :func:`load_peers`;
* :mod:`~decentlearn.outputs.liveness`: whether a ``running`` run still runs (``stale`` if not);
* :mod:`~decentlearn.outputs.runlog`: run.log, the run's :mod:`logging` records;
* :mod:`~decentlearn.outputs.dashboards`: TensorBoard and MLflow callbacks (optional extras);
* :mod:`~decentlearn.outputs.format`: the one table formatter of every command, the run's summary
  table and the comparison of several runs, for people (:func:`compare_rows`) and programs
  (:func:`compare_records`); byte counts: ``decentlearn.units.format_bytes``;
* :mod:`~decentlearn.outputs.plot`: curves of one run, overlays of several, topology drawings
  (matplotlib, imported when a plot is drawn).
"""

from decentlearn.outputs.dashboards import MLflowCallback, TensorBoardCallback
from decentlearn.outputs.format import (compare_records, compare_rows, format_summary,
                                        format_table)
from decentlearn.outputs.peers import Peers, load_peers
from decentlearn.outputs.rundir import (RUN_FILES, STATUSES, Run, RunDirError, RunWriter,
                                        config_toml, find_runs, holds_run, is_run_dir, load_run,
                                        new_run_dir, prepare_run_dir)

__all__ = ["RUN_FILES", "STATUSES", "MLflowCallback", "Peers", "Run", "RunDirError",
           "RunWriter", "TensorBoardCallback", "compare_records", "compare_rows", "config_toml",
           "find_runs", "format_summary", "format_table", "holds_run", "is_run_dir", "load_peers",
           "load_run", "new_run_dir", "prepare_run_dir"]

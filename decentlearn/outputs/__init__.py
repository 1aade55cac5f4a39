"""What a run leaves behind: the run directory, its text reports and its plots.

* :mod:`~decentlearn.outputs.rundir`: the run directory's layout, :class:`RunWriter` (streams
  config.toml, metrics.csv and summary.json as a run goes, atomically) and :func:`load_run`;
* :mod:`~decentlearn.outputs.format`: the one table formatter of every command, the run's summary
  table and the comparison of several runs (byte counts: ``decentlearn.units.format_bytes``);
* :mod:`~decentlearn.outputs.plot`: curves of one run, overlays of several, topology drawings
  (matplotlib, imported when a plot is drawn).
"""

from decentlearn.outputs.format import compare_rows, format_summary, format_table
from decentlearn.outputs.rundir import (RUN_FILES, STATUSES, Run, RunDirError, RunWriter,
                                        config_toml, is_run_dir, load_run, new_run_dir,
                                        prepare_run_dir)

__all__ = ["RUN_FILES", "STATUSES", "Run", "RunDirError", "RunWriter", "config_toml",
           "is_run_dir", "load_run", "new_run_dir", "prepare_run_dir", "compare_rows",
           "format_summary", "format_table"]

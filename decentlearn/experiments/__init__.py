"""Many runs and measurements: :mod:`~decentlearn.experiments.sweep` (grids of runs from one TOML
table, resumable, summarized over seeds) and :mod:`~decentlearn.experiments.bench` (the C kernels
against their baselines and this machine's limits, measured in one process)."""

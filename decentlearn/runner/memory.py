"""How much memory a run needs, known before its peers' state is allocated.

:func:`estimate` adds up, per peer and in total:

* **parameters**: ``dim`` float32 per peer (the ``(n_peers, dim)`` matrix);
* **optimizer state**, **algorithm state** and **gossip buffers**: every other ``(n_peers, ...)``
  array the run's algorithm, optimizer and communicator hold, *measured* by a probe: the same
  configuration on 16 peers of the embedded digits data (same model, algorithm, compressor,
  optimizer, network) runs two rounds, and the arrays its parts declare (their state, per peer,
  per edge or replicated, and their ``scratch`` work arrays; decentlearn.state) are counted in
  bytes per parameter per peer (so a new algorithm's buffers are counted from its declaration,
  without a table to keep up to date; tests check each declaration against the arrays a run
  really holds);
* **data shares**: each peer's index list and sampler order (16 bytes per training sample in all);
* **minibatch + activations**: one minibatch per peer (``batch x input`` float32 + labels) and
  what the layers keep for the backward pass, ``peers x batch x`` (sum of the layers' output
  sizes) float32, twice (values and gradients), and the largest convolution's im2col matrix
  with its padded copies (``in_channels x k^2 x H x W`` per sample, five buffers' worth);
* **evaluation**: the chunked batched evaluation (``peers x chunk x widest layer`` elements, the
  chunk at most 1024 samples, the samples each peer is evaluated on, and 2**24 elements in all
  unless one sample per peer exceeds that; three buffers, plus the im2col buffers per chunk)
  and the float64 consensus-distance blocks (``peers x min(dim, 2 x 16384)``: one block is
  made while the previous one is still alive);
* **dataset**: the training and test sets, shared by all peers;
* **interpreter and libraries**: this process's resident memory when the estimate is made.

The peak (``MemoryEstimate.total``) counts the held parts and the larger of the two temporaries.

:func:`available` is the memory the run may use: ``MemAvailable`` of /proc/meminfo, or the
cgroup's limit minus its usage when lower, or ``$DECENTLEARN_MEMORY_LIMIT`` (bytes, or with a
K/M/G/T suffix) when set, which tests use to fake a small machine. :func:`check` raises
MemoryError with the estimate when the run would not fit. NumPy temporaries of a few MiB and the
interpreter are not counted; docs/performance.md ("Scale") compares the estimate with measured
peak RSS.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

#: Shapes of the fixed data sets (input shape, classes, training samples, test samples), so that
#: an estimate needs no data file. Other data sets (synthetic) are loaded to learn them.
KNOWN_DATASETS = {
    "digits": ((1, 8, 8), 10, 1438, 359),
    "mnist": ((1, 28, 28), 10, 60000, 10000),
    "fashion-mnist": ((1, 28, 28), 10, 60000, 10000),
    "cifar10": ((3, 32, 32), 10, 50000, 10000),
}

#: Peers of the probe run that measures the algorithm's buffers.
PROBE_PEERS = 16

#: Bytes per parameter per peer assumed by the quick (unprobed) upper bound: 8 float32 buffers,
#: more than any algorithm holds (CHOCO with error feedback and momentum holds 6).
UPPER_STATE_BYTES = 32.0

#: Environment variable overriding the available memory (bytes; K, M, G, T suffixes accepted).
LIMIT_ENV = "DECENTLEARN_MEMORY_LIMIT"

#: Fraction of the available memory a run may plan to use (the rest: NumPy temporaries, the
#: interpreter, page cache pressure).
HEADROOM = 0.9


#: Parts that live only during a training step or an evaluation: the peak holds the larger one.
TRANSIENT = ("minibatch + activations", "evaluation")


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a run needs: ``per_peer`` and ``shared`` (not per peer) by part, in display order."""

    peers: int
    dim: int
    per_peer: dict = field(repr=False)
    shared: dict = field(repr=False)
    #: How the state buffers were counted ("probe: 16 bytes/parameter/peer" or the fallback).
    note: str = ""

    @property
    def total(self) -> int:
        """The peak: everything held for the whole run, plus the larger of the training step's
        and the evaluation's temporaries (they are never alive together)."""
        held = sum(v for k, v in self.per_peer.items() if k not in TRANSIENT)
        peak = max(self.per_peer.get(k, 0) for k in TRANSIENT)
        return (held + peak) * self.peers + sum(self.shared.values())

    def part_total(self, name: str) -> int:
        return self.per_peer.get(name, 0) * self.peers + self.shared.get(name, 0)

    def table(self) -> str:
        """Aligned text: one line per part (per peer, total), then the total."""
        from decentlearn.units import format_bytes as human_bytes
        names = list(dict.fromkeys([*self.per_peer, *self.shared]))
        width = max(len(n) for n in [*names, "total"])
        lines = [f"  {'':<{width}}  {'per peer':>11}  {'total':>11}"]
        for n in names:
            per = human_bytes(self.per_peer[n]) if n in self.per_peer else "shared"
            lines.append(f"  {n:<{width}}  {per:>11}  {human_bytes(self.part_total(n)):>11}")
        lines.append(f"  {'peak':<{width}}  {human_bytes(self.total / self.peers):>11}  "
                     f"{human_bytes(self.total):>11}  (held parts + the larger temporary)")
        return "\n".join(lines)


def _parse_bytes(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"${LIMIT_ENV} must be a number of bytes with an optional K/M/G/T "
                         f"suffix (e.g. 24G), got {text!r}")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def available() -> tuple[int, str]:
    """(bytes a run may use, where the figure comes from)."""
    env = os.environ.get(LIMIT_ENV)
    if env:
        return _parse_bytes(env), f"${LIMIT_ENV}"
    best, source = None, "unknown"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    best, source = int(line.split()[1]) * 1024, "MemAvailable"
    except OSError:
        pass
    try:  # cgroup v2: a container's limit may be below the host's free memory
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        if limit != "max":
            used = int(open("/sys/fs/cgroup/memory.current").read())
            room = int(limit) - used
            if best is None or room < best:
                best, source = room, "cgroup memory.max - memory.current"
    except (OSError, ValueError):
        pass
    if best is None:
        try:
            best = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
            source = "sysconf"
        except (ValueError, OSError, AttributeError):
            best = 1 << 62
    return best, source


def _resident_bytes() -> int:
    """This process's resident memory now (Python, NumPy, SciPy, the extension), from
    /proc/self/statm; 0 where that file does not exist."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _dataset_shape(config) -> tuple[tuple[int, ...], int, int, int]:
    name = config.dataset
    if not isinstance(name, str):  # an ArrayDataset: its arrays are here
        return name.input_shape, name.n_classes, len(name.y_train), len(name.y_test)
    if name in KNOWN_DATASETS:
        return KNOWN_DATASETS[name]
    from decentlearn.data import load_dataset
    d = load_dataset(name, config.data_dir, n_peers=config.peers)
    return d.input_shape, d.n_classes, len(d.y_train), len(d.y_test)


def declared_arrays(sim) -> dict[str, int]:
    """Bytes of every array a built run declares (decentlearn.state): the entries of its state
    (per-peer, per-edge and replicated) and the work arrays of its algorithm, the algorithm's
    state objects and its communicator (their ``scratch``), by dotted name."""
    import numpy as np

    from decentlearn.state import nest
    sizes = {k: v.nbytes for k, v in sim.state_dict().items() if isinstance(v, np.ndarray)}
    scratch = {**nest("algorithm", sim.algorithm.scratch_arrays()),
               **nest("comm", sim.comm.scratch_arrays())}
    seen: set[int] = set()
    for name, a in scratch.items():  # a work array may be a view of another one
        base = a
        while isinstance(base.base, np.ndarray):
            base = base.base
        if id(base) not in seen:
            seen.add(id(base))
            sizes[name] = base.nbytes
    return sizes


def probe_state(config) -> tuple[dict[str, float], str]:
    """Bytes per parameter per peer of the run's state arrays, by part ("parameters",
    "optimizer state", "algorithm state", "gossip buffers"), measured on a small probe run (see
    the module docstring), and a note saying how."""
    import warnings

    import numpy as np

    from decentlearn.runner.loop import Runner as Simulator

    base = dict(dataset="digits", data_dir=None, peers=PROBE_PEERS, rounds=2, eval_every=2,
                partition="iid", eval_peer_samples=20, eval_samples=None, threads=1)
    last_error = None
    for topology in (config.topology, "ring"):
        try:
            probe = config.replace(topology=topology, **base)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sim = Simulator(probe)
                sim.run()
            break
        except Exception as e:  # noqa: BLE001 - any failure: fall back below
            last_error = e
    else:
        # Conservative fallback: parameters, gradient, momentum and a gossip output buffer.
        return ({"parameters": 4.0, "optimizer state": 4.0 if config.momentum else 0.0,
                 "algorithm state": 4.0, "gossip buffers": 4.0},
                f"not probed ({str(last_error).splitlines()[0] if last_error else 'error'}): "
                "assumed 4 float32 buffers")
    dim = sim.model.dim
    parts = {"parameters": 0.0, "optimizer state": 0.0, "algorithm state": 0.0,
             "gossip buffers": 0.0}
    for path, nbytes in declared_arrays(sim).items():
        if nbytes < PROBE_PEERS * dim:  # small per-peer vectors (byte counters, ...): not state
            continue
        if path == "algorithm.params":
            part = "parameters"
        elif path.startswith("algorithm.optimizer."):
            part = "optimizer state"
        elif path.startswith("comm."):
            part = "gossip buffers"
        else:
            part = "algorithm state"
        parts[part] += nbytes / (PROBE_PEERS * dim)
    parts["parameters"] = max(parts["parameters"], float(np.dtype(np.float32).itemsize))
    per_param = sum(parts.values())
    return parts, f"probe ({PROBE_PEERS} peers, digits): {per_param:.3g} bytes/parameter/peer"


def estimate(config, probe: bool = True) -> MemoryEstimate:
    """The memory a run of ``config`` (a sim.RunConfig) needs; see the module docstring. With
    ``probe=False`` the state arrays are not measured but bounded by UPPER_STATE_BYTES per
    parameter per peer (an over-estimate that costs nothing)."""
    from decentlearn.nn import make_model

    input_shape, n_classes, n_train, n_test = _dataset_shape(config)
    model = make_model(config.model, input_shape, n_classes, precision=config.precision)
    dim, peers, batch = model.dim, config.peers, config.batch_size
    if probe:
        parts, note = probe_state(config)
    else:
        parts = {"parameters": 4.0, "optimizer, algorithm state and gossip buffers":
                 UPPER_STATE_BYTES - 4.0}
        note = f"not probed: at most {UPPER_STATE_BYTES:g} bytes/parameter/peer assumed"
    per_peer = {name: int(math.ceil(v * dim)) for name, v in parts.items()}
    n_input = math.prod(input_shape)
    per_peer["data shares"] = int(16 * n_train / peers)
    native = hasattr(model, "_shapes")  # decentlearn.nn; a torch model's activations are torch's
    if not native:
        note += "; activations of a torch model are not estimated"
    widths = sum(math.prod(s) for s in model._shapes) if native else 0
    unfold = max([math.prod(i) * ly.kernel_size ** 2 for ly, i in
                  zip(model._layers, model._in_shapes) if hasattr(ly, "kernel_size")] or [0]) \
        if native else 0
    per_peer["minibatch + activations"] = (batch * (4 * n_input + 8) + 2 * 4 * batch * widths
                                           + 5 * 4 * batch * unfold)
    from decentlearn.runner.sampler import eval_sizes
    n_eval = min(n_test, config.eval_samples or n_test)
    samples = max(eval_sizes(config, n_eval, n_classes)[0], 1)
    widest = getattr(model, "_widest_eval", n_input)
    chunk = max(1, min(1024, samples, (1 << 24) // (peers * widest)))
    eval_elems = peers * widest * chunk
    # consensus_distance: a float64 block of 2**14 columns, and the next one while it is freed
    per_peer["evaluation"] = (int(8 * min(dim, 2 << 14)) + int(3 * 4 * eval_elems / peers)
                              + 2 * 4 * chunk * unfold)
    shared = {"dataset": (n_train + n_test) * (4 * n_input + 8),
              "interpreter and libraries": _resident_bytes()}
    return MemoryEstimate(peers, dim, per_peer, shared, note)


def check(config, estimate_: MemoryEstimate | None = None) -> MemoryEstimate:
    """Raises MemoryError (one line with the estimate and the available memory) when a run of
    ``config`` would need more than HEADROOM x the available memory; returns the estimate (the
    quick upper bound when it fits, else the probed estimate)."""
    from decentlearn.units import format_bytes as human_bytes
    room, source = available()
    if estimate_ is None:  # the quick upper bound settles most runs without a probe
        est = estimate(config, probe=False)
        if est.total > HEADROOM * room:
            est = estimate(config)
    else:
        est = estimate_
    if est.total > HEADROOM * room:
        raise MemoryError(
            f"the run needs about {human_bytes(est.total)} ({human_bytes(est.total / est.peers)} "
            f"per peer x {est.peers} peers, {est.dim:,} parameters each) but "
            f"{human_bytes(room)} is available ({source}; a run may plan {HEADROOM:.0%} of it): "
            "use fewer peers or a smaller model (--dry-run shows the breakdown)")
    return est

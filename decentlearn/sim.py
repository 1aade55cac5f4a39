"""The simulator: n peers in one process, one (n_peers, dim) float32 matrix, rounds of local steps
and gossip, and evaluation of every peer's model and of the average model.

``RunConfig`` is the whole description of a run (the CLI's flags and config files map onto it);
``simulate(config)`` builds the pieces (data, partition, topology, model, optimizer, communicator,
algorithm), runs it, and returns a ``Result`` with the evaluation history and a summary. Callbacks
see every round and every evaluation; the library itself never prints.
"""

from __future__ import annotations

import dataclasses
import re
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from decentlearn import algorithms, baselines, compress, finite_gossip, metrics, network
from decentlearn._core import NonFiniteError
from decentlearn.comm import SimComm
from decentlearn.data import Dataset, Partition, load_dataset, make_partition
from decentlearn.nn import cocofl, make_model
from decentlearn.nn.lowp import PRECISIONS
from decentlearn.optim import LRSchedule, OptimizerConfig, make as make_optimizer
from decentlearn.topology import Topology, check_mixing, make as make_topology

# Independent random streams derived from the run's seed.
(_STREAM_INIT, _STREAM_PARTITION, _STREAM_SAMPLER, _STREAM_TOPOLOGY, _STREAM_DATA,
 _STREAM_COMPRESS, _STREAM_LOWP, _STREAM_COCOFL) = range(8)


#: Random stream of the network model (decentlearn.network), apart from the streams above.
_STREAM_NETWORK = 100

#: A run is stopped as diverged (DivergenceError) after any round where the consensus distance
#: (1/n) sum_i ||x_i - x_bar||^2 exceeds this factor times max(1, ||x_0||^2), the squared norm of
#: the initial model: peers then stand 10x the model's own size apart, which no working run does.
DIVERGENCE_CONSENSUS_FACTOR = 100.0
#: ... or where the peers' mean training loss exceeds this factor times its first-round value.
DIVERGENCE_LOSS_FACTOR = 100.0
#: Above this many peers the summary leaves out the gaps that need dense or product solvers: the
#: per-round random graphs' (dense eigendecomposition) and a time-varying period's product. A
#: static graph's gap is always reported (sparse solvers: seconds at 10^4 peers).
SUMMARY_GAP_MAX_N = 2048
#: Compressed D-PSGD is warned about (SetupWarning) above this variance factor omega
#: (E||C(x) - x||^2 <= omega ||x||^2); CHOCO-SGD at omega >= 1 (no longer a contraction).
DPSGD_MAX_VARIANCE = 1.0


class SetupWarning(UserWarning):
    """A run is set up in a way known to work badly (see ``setup_problems``); it still runs."""


def _stream_seed(seed: int, stream: int) -> int:
    return int(np.random.SeedSequence([seed, stream]).generate_state(1)[0])


#: Evaluation budget: test-sample forward passes per evaluation, as a fraction of the forward-pass
#: equivalents of the training since the previous one (a training step costs about 3 forwards).
#: EVAL_BUDGET is the total; the peers' models get EVAL_PEER_BUDGET of it (or more, when the
#: floor of 10 samples per class binds) and the average model the rest.
EVAL_BUDGET = 0.10
EVAL_PEER_BUDGET = 0.05


def eval_sizes(config: RunConfig, n_test: int, n_classes: int) -> tuple[int, int]:
    """(samples per peer, samples for the average model) of an intermediate evaluation.

    With ``F = eval_every * local_steps * batch_size * 3`` forward passes of training per peer
    since the last evaluation: ``eval_peer_samples`` when set, else the largest count within
    EVAL_PEER_BUDGET of F, but at least 10 per class. The average model (one model, not P) gets
    what is left of the total EVAL_BUDGET of all peers' training, ``EVAL_BUDGET * F * peers -
    peers * S_peer``, and at least S_peer: when the per-class floor makes the peers' share exceed
    EVAL_PEER_BUDGET, the average model's share shrinks instead of the total growing. Both at most
    ``n_test``; the final evaluation runs the average model on the whole evaluation set. This
    keeps evaluation near 10% of a run's compute (measured: docs/performance.md, "Round time")."""
    c = config
    train_fwd = c.eval_every * c.local_steps * c.batch_size * 3  # per peer
    if c.eval_peer_samples is not None:
        peer = c.eval_peer_samples
    else:
        peer = max(10 * n_classes, int(EVAL_PEER_BUDGET * train_fwd))
    peer = min(n_test, peer)
    avg = min(n_test, max(peer, int(EVAL_BUDGET * train_fwd * c.peers) - c.peers * peer))
    return peer, avg


def stratified_order(y: np.ndarray, n_classes: int, seed: int = 0) -> np.ndarray:
    """A fixed order of the indices of ``y`` whose every prefix is stratified: each class appears
    in proportion to its frequency (within one sample), in a random order fixed by ``seed``."""
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    key = np.empty(len(y))
    for k in range(n_classes):
        idx = np.flatnonzero(y == k)
        if idx.size:
            # the r-th sample of class k (random order) goes to position (r + u) / n_k
            key[idx] = (rng.permutation(idx.size) + rng.random(idx.size)) / idx.size
    return np.argsort(key, kind="stable")


class PeerSampler:
    """Draws each peer's minibatch indices from its own partition, all peers at once.

    Each peer walks through its own shuffled order of its samples, B at a time, and reshuffles when
    it passes the end (a batch that straddles the end wraps to the start of the old order; a peer
    with fewer than B samples repeats them). ``next()`` returns (P, B) indices
    into the training set; the only Python loop is over peers whose epoch ended this step.
    """

    def __init__(self, partition: Partition, batch_size: int, seed: int) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.partition = partition
        self.batch_size = batch_size
        self._rng = np.random.default_rng(seed)
        self._perm = partition.indices.copy()
        self._offsets = partition.offsets
        self._sizes = partition.sizes
        self._shuffle_many(np.arange(partition.n_peers))
        self._cursor = np.zeros(partition.n_peers, dtype=np.int64)
        self._steps = np.arange(batch_size, dtype=np.int64)

    def state_dict(self) -> dict:
        """Every peer's shuffled order, cursor and the shuffling generator (checkpoints)."""
        from decentlearn.checkpoint import state_of
        return state_of(self, ("_perm", "_cursor", "_rng"))

    def load_state_dict(self, state: dict) -> None:
        from decentlearn.checkpoint import CheckpointError, load_attrs
        load_attrs(self, ("_perm", "_cursor", "_rng"), state, "sampler.")
        p = self.partition
        if (np.any(self._cursor < 0) or np.any(self._cursor >= self._sizes)
                or not np.array_equal(np.sort(self._perm), np.sort(p.indices))):
            raise CheckpointError("checkpoint's sampler state does not fit this run's partition")

    def next(self) -> np.ndarray:
        pos = self._cursor[:, None] + self._steps[None, :]
        idx = self._perm[self._offsets[:-1, None] + pos % self._sizes[:, None]]
        self._cursor += self.batch_size
        ended = np.flatnonzero(self._cursor >= self._sizes)
        if ended.size:
            self._shuffle_many(ended)
            self._cursor[ended] %= self._sizes[ended]
        return idx

    def _shuffle_many(self, peers: np.ndarray) -> None:
        """Reshuffles the segments of ``peers`` (ascending) in one pass: one uniform draw for all
        their samples, then one stable sort by (segment, draw) — a uniform random permutation of
        each segment, no loop over peers."""
        sizes = self._sizes[peers]
        starts = self._offsets[peers]
        seg = np.repeat(np.arange(peers.size, dtype=np.float64), sizes)
        pos = np.arange(sizes.sum(), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        pos += np.repeat(starts, sizes)
        order = np.argsort(seg + self._rng.random(pos.size), kind="stable")
        self._perm[pos] = self._perm[pos[order]]


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a simulated run. Field names match the CLI flags."""

    dataset: str = "digits"
    data_dir: str | None = None
    peers: int = 16
    topology: str = "ring"
    weights: str = "metropolis"
    partition: str = "dirichlet:0.1"
    model: str = "mlp"
    torch_mode: str = "batched"
    precision: str = "fp32"
    cocofl: str | None = None
    algorithm: str = "dpsgd"
    clique_averaging: bool = False
    mixing: str = "gossip"
    variant: str = "atc"
    compress: str = "none"
    gamma: float | None = None
    rounds: int = 200
    local_steps: int = 1
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    #: sgd, adam, adamw, lars, lamb (decentlearn.optim); ``momentum`` is beta1 for adam/lamb.
    optimizer: str = "sgd"
    beta2: float = 0.999
    eps: float | None = None
    trust_coefficient: float = 0.001
    #: Learning rate per round: constant, step:EVERY:GAMMA, cosine[:FLOOR] (decentlearn.optim).
    lr_schedule: str = "constant"
    warmup: int = 0
    lr_scaling: str | None = None
    seed: int = 0
    threads: int | None = None
    eval_every: int = 10
    eval_samples: int | None = None
    eval_peer_samples: int | None = None
    #: Network model (decentlearn.network): a preset name or a TOML file; None = no simulated time.
    network: str | None = None
    #: Event-driven asynchronous gossip (decentlearn.network.asynchronous); needs ``network``.
    asynchronous: bool = False
    # Options of the non-IID algorithms and server baselines (decentlearn.baselines,
    # decentlearn.heterogeneity; each algorithm reads only its own, see docs/algorithms.md).
    participation: float = 1.0
    server_compress: str | None = None
    categories: int = 4
    speeds: str = "lognormal:1.0"
    hops_max: int = 8
    ngc_alpha: float = 0.5
    skew_target: float = 0.05
    skew_probe_every: int = 20
    skew_period_max: int = 16

    def __post_init__(self):
        def positive_int(name, allow_none=False):
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("peers", "rounds", "local_steps", "batch_size", "eval_every", "categories",
                     "hops_max", "skew_probe_every", "skew_period_max"):
            positive_int(name)
        for name, lo, lo_open in (("participation", 0.0, True), ("ngc_alpha", 0.0, False),
                                  ("skew_target", 0.0, True)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                    (lo < v if lo_open else lo <= v) and v <= 1):
                bound = "(0, 1]" if lo_open else "[0, 1]"
                raise ValueError(f"{name} must be a number in {bound}, got {v!r}")
        if self.server_compress is not None:
            try:
                compress.make(self.server_compress)
            except ValueError as e:
                raise ValueError(f"server_compress: {e}") from None
        positive_int("eval_samples", allow_none=True)
        positive_int("eval_peer_samples", allow_none=True)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.gamma is not None and not (isinstance(self.gamma, (int, float))
                                           and not isinstance(self.gamma, bool)
                                           and 0 < self.gamma <= 1):
            raise ValueError(f"gamma must be a number in (0, 1], got {self.gamma!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"lr must be a number > 0, got {self.lr!r}")
        self.optimizer_config()  # validates the optimizer's hyperparameters
        self.lr_schedule_of()  # and the schedule's
        if self.threads is not None and (isinstance(self.threads, bool)
                                         or not isinstance(self.threads, int)
                                         or (self.threads < 1 and self.threads != -1)):
            raise ValueError(f"threads must be None, -1 or >= 1, got {self.threads!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        # the same rule as decentlearn.torch.adapter.parse_mode, which needs torch to import
        if not (self.torch_mode in ("batched", "auto") or (
                isinstance(self.torch_mode, str)
                and re.fullmatch(r"grouped:0*[1-9][0-9]*", self.torch_mode))):
            raise ValueError(f"torch_mode must be 'batched', 'grouped:G' (G a positive int: peers "
                             f"per pass, 1 = one plain pass per peer) or 'auto', got "
                             f"{self.torch_mode!r}")
        if self.torch_mode != "batched" and not str(self.model).startswith("torch:"):
            raise ValueError(f"torch_mode applies to torch models (model='torch:...'), got "
                             f"model={self.model!r} with torch_mode={self.torch_mode!r}")
        if self.cocofl is not None:
            cocofl.parse(self.cocofl)
            if self.precision != "fp32":
                raise ValueError("cocofl trains the unfrozen layers in float32 (frozen ones run "
                                 f"int8): precision must be 'fp32', got {self.precision!r}")
        if not isinstance(self.clique_averaging, bool):
            raise ValueError(f"clique_averaging must be true or false, got "
                             f"{self.clique_averaging!r}")
        finite_gossip.parse_mixing(self.mixing)
        algorithms._REGISTRY.get(self.algorithm)  # unknown name: ValueError with a suggestion
        network.validate_run(self)
        if self.algorithm == "choco" and self.gamma is None and self.compress != "none":
            # No default fits every compressor (docs/simulator.md): on digits, 16 peers, ring,
            # topk:0.01 works near 0.1-0.2 and diverges at 1; topk:0.1 works best near 0.5.
            raise ValueError(f"algorithm 'choco' with compress={self.compress!r} needs gamma, "
                             "the consensus step size in (0, 1]: it depends on the compressor "
                             "(e.g. 0.1 for topk:0.01, 0.5 for topk:0.1), so there is no default")

    def optimizer_config(self) -> OptimizerConfig:
        """The optimizer's hyperparameters (decentlearn.optim.OptimizerConfig)."""
        return OptimizerConfig(name=self.optimizer, lr=self.lr, momentum=self.momentum,
                               nesterov=self.nesterov, weight_decay=self.weight_decay,
                               beta2=self.beta2, eps=self.eps,
                               trust_coefficient=self.trust_coefficient)

    def lr_schedule_of(self) -> LRSchedule:
        """The learning rate of every round (decentlearn.optim.LRSchedule)."""
        return LRSchedule(lr=self.lr, rounds=self.rounds, decay=self.lr_schedule,
                          warmup=self.warmup, scaling=self.lr_scaling,
                          global_batch=self.peers * self.batch_size)

    @property
    def gamma_value(self) -> float:
        """The consensus step size used: ``gamma``, or 1 when unset (uncompressed CHOCO)."""
        return 1.0 if self.gamma is None else float(self.gamma)

    def replace(self, **changes) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class Result:
    """What a run produced: one row per evaluation, a summary, and the final parameters."""

    config: RunConfig
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    params: np.ndarray | None = None


class DivergenceError(ValueError):
    """Training blew up: the peers' loss or parameters stopped being finite, or the consensus
    distance or the loss grew past the bounds ``DIVERGENCE_CONSENSUS_FACTOR`` and
    ``DIVERGENCE_LOSS_FACTOR``. ``round`` is the (1-based) round after which it was detected."""

    def __init__(self, t: int, config: RunConfig, reason: str | None = None) -> None:
        hint = "lower --lr" + (", or --gamma" if config.algorithm == "choco" else "")
        if config.algorithm == "dpsgd" and config.compress != "none":
            hint += ", or use a lower-variance compressor (compressed D-PSGD needs one) or choco"
        reason = reason or "the peers' loss or parameters are not finite"
        super().__init__(f"training diverged at round {t + 1}: {reason} ({hint})")
        self.round = t + 1


def setup_problems(config: RunConfig, compressor, dim: int) -> list[str]:
    """Problems of a run's setup that are known before it starts (one sentence each); the
    simulator turns each into a SetupWarning. ``compressor`` is the built compressor and ``dim``
    the model's number of parameters."""
    problems = []
    c = config
    spec = c.compress
    if c.algorithm != "choco" and c.gamma is not None and c.gamma != 1:
        problems.append(f"gamma={c.gamma} is used by choco only; algorithm {c.algorithm!r} "
                        "ignores it")
    if spec == "none":
        return problems
    omega = compressor.variance_factor(dim)
    wrapped = type(compressor).__name__ == "ErrorFeedback"
    if c.algorithm == "dpsgd":
        if compressor.biased and not wrapped:
            problems.append(
                f"compressed D-PSGD (DCD-PSGD) needs an unbiased compressor and {spec!r} is "
                f"biased: what it drops is lost every round; use --algorithm choco (with "
                f"--gamma) or error feedback (--compress ef:{spec})")
        elif omega is not None and omega > DPSGD_MAX_VARIANCE:
            problems.append(
                f"compressed D-PSGD needs a low-variance compressor and {spec!r} has variance "
                f"factor {omega:.3g} on {dim} parameters (E||C(x)-x||^2 <= omega ||x||^2, "
                f"omega > {DPSGD_MAX_VARIANCE:g}): it is likely to diverge; use more levels, "
                "natural, int8 or bucket:8:512, or choco with a biased compressor such as topk")
    elif c.algorithm == "choco" and compressor.unbiased and omega is not None and omega >= 1:
        problems.append(
            f"CHOCO-SGD needs a contraction (E||C(x)-x||^2 < ||x||^2) and {spec!r} has variance "
            f"factor {omega:.3g} >= 1 on {dim} parameters without the paper's 1/(1+omega) "
            "scaling: the consensus distance is likely to grow; use a lower-variance or a "
            "sparsifying compressor (topk:R, stc:R)")
    return problems


def _mixing_rule(c: RunConfig) -> tuple[str, float | None, float | None]:
    """(kind, alpha, eta) of ``--mixing`` ("linear", "finite-time" or "nonlinear"), after the
    checks that the run can use it."""
    if c.mixing == "finite-time":
        if c.algorithm != "dpsgd" or c.compress != "none" or c.network is not None:
            raise ValueError("mixing='finite-time' runs several exchanges per round and "
                             "supports uncompressed dpsgd only, without a network model; got "
                             f"algorithm={c.algorithm!r}, compress={c.compress!r}, "
                             f"network={c.network!r}")
        return "finite-time", None, None
    if c.mixing.startswith("nonlinear"):
        if c.algorithm != "dpsgd" or c.compress != "none":
            raise ValueError("mixing='nonlinear' is a nonlinear gossip step for uncompressed "
                             f"dpsgd; got algorithm={c.algorithm!r}, compress={c.compress!r}")
        _, alpha, eta = finite_gossip.parse_mixing(c.mixing)
        return "nonlinear", alpha, eta
    return "linear", None, None


class Callback:
    """Hooks called by the simulator. Subclass and override what you need."""

    def on_round_end(self, sim: Simulator, t: int) -> None:  # noqa: D401 - a hook
        """After round t (0-based)."""

    def on_eval(self, sim: Simulator, row: dict) -> None:
        """After each evaluation, with the row that goes into metrics.csv."""

    def on_round_complete(self, sim: Simulator, t: int) -> None:
        """After round t and its evaluation: the simulator is at a round boundary, where
        ``sim.save_checkpoint`` may be called (decentlearn.checkpoint)."""


class Simulator:
    """Builds and runs one simulated decentralized training run."""

    def __init__(self, config: RunConfig, *, dataset: Dataset | None = None) -> None:
        self.config = c = config
        self.dataset = dataset if dataset is not None else load_dataset(
            c.dataset, c.data_dir, seed=_stream_seed(c.seed, _STREAM_DATA), n_peers=c.peers)
        d = self.dataset
        self.partition = make_partition(c.partition, d.y_train, c.peers,
                                        seed=_stream_seed(c.seed, _STREAM_PARTITION),
                                        groups=d.groups)
        # Network hook (decentlearn.network): time-varying/directed graphs, the network model.
        # Data-aware builders (d-cliques) get the per-peer label histograms, and only those.
        accepted = network.accepted_mixing(c.algorithm)
        self.topology = make_topology(c.topology, c.peers,
                                      seed=_stream_seed(c.seed, _STREAM_TOPOLOGY),
                                      weights=c.weights, mixing=accepted,
                                      labels=self.partition.histogram(d.y_train, d.n_classes))
        check_mixing(self.topology, accepted, f"algorithm {c.algorithm!r}",
                     hints=network.MIXING_HINTS)
        if c.clique_averaging and self.topology.groups is None:
            raise ValueError(f"clique_averaging needs a topology made of cliques "
                             f"(d-cliques[:SIZE[:INTER]]), got topology={c.topology!r}")
        # Deterministic from the seed: an MPI rank builds it whole too and keeps the whole clock.
        self.network = (network.NetworkModel(c.network, c.peers,
                                             seed=_stream_seed(c.seed, _STREAM_NETWORK))
                        if c.network is not None else None)
        threads = self._threads()
        #: The communicator: the only seam between the algorithms and where the peers run. It
        #: hosts peers [comm.peer0, comm.peer0 + comm.n_peers) (all of them in process).
        self.comm = self._make_comm(_mixing_rule(c), accepted, threads)
        lo, n = self.comm.peer0, self.comm.n_peers
        self.model = make_model(c.model, d.input_shape, d.n_classes, precision=c.precision,
                                seed=_stream_seed(c.seed, _STREAM_LOWP))
        self.model.n_threads = threads
        if c.model.startswith("torch:"):
            self.model.mode = c.torch_mode
        self.model.peer0 = lo  # int8 layers key their rounding noise by peer
        init = self.model.init(_stream_seed(c.seed, _STREAM_INIT)).astype(np.float32)
        self._init_row = init
        params = np.broadcast_to(init, (n, self.model.dim)).copy()  # writable, one row too
        layout = getattr(self.model, "layout", None)
        segments = ([(sl.start, sl.stop) for _, sl, _ in layout()] if callable(layout) else None)
        # Every optimizer's update of a row depends on that row only (tests/test_optimizers.py),
        # so a block of rows steps exactly as in the whole matrix.
        optimizer = make_optimizer(c.optimizer_config(), params.shape, n_threads=threads,
                                   segments=segments)
        #: The learning rate of each round (None: constant ``lr``).
        self.lr_schedule = None if c.lr_schedule_of().constant else c.lr_schedule_of()
        #: Layers with parameters frozen by each peer (CoCoFL); None without --cocofl.
        self.frozen: np.ndarray | None = None
        #: Test accuracy of every peer at the last evaluation.
        self.last_accuracy: np.ndarray | None = None
        if c.cocofl is not None:
            self.frozen = cocofl.assign(cocofl.parse(c.cocofl), c.peers,
                                        len(self.model.param_layers),
                                        _stream_seed(c.seed, _STREAM_COCOFL))
        frozen = None if self.frozen is None else self.frozen[lo:lo + n]
        extra = {"gamma": c.gamma_value} if c.algorithm == "choco" else {}
        extra.update(baselines.config_options(c.algorithm, c))
        compressor = compress.make(c.compress)
        #: Setup problems known before the run (also emitted as SetupWarning in process).
        self.problems = setup_problems(c, compressor, self.model.dim)
        self._report_problems()
        if c.asynchronous:  # network hook: event-driven asynchronous gossip replaces both
            self.comm, self.algorithm = self._build_async(params, segments, frozen, threads)
        else:
            self.algorithm = algorithms.make(c.algorithm, model=self.model, comm=self.comm,
                                             optimizer=optimizer, params=params,
                                             local_steps=c.local_steps, variant=c.variant,
                                             compressor=self._wrap_compressor(compressor),
                                             seed=_stream_seed(c.seed, _STREAM_COMPRESS),
                                             frozen=frozen, **extra)
        if c.clique_averaging:
            self.algorithm.gradient_transform = self._clique_averaging()
        self.sampler = PeerSampler(self.partition, c.batch_size,
                                   _stream_seed(c.seed, _STREAM_SAMPLER))
        #: Freezes offline peers' state under churn (None without churn).
        self.offline_hook = (network.OfflineHook(self.network, self.algorithm, init,
                                                 peers=slice(lo, lo + n))
                             if self.network is not None and self.network.config.churn_leave > 0
                             else None)
        if c.eval_samples is not None and c.eval_samples < len(d.y_test):
            pick = np.random.default_rng(0).choice(len(d.y_test), c.eval_samples, replace=False)
            pick.sort()
            self.x_eval, self.y_eval = d.x_test[pick], d.y_test[pick]
        else:
            self.x_eval, self.y_eval = d.x_test, d.y_test
        #: Test samples each peer's model / the average model is evaluated on (eval_sizes()).
        self.eval_peer_samples, self.eval_avg_samples = eval_sizes(c, len(self.y_eval),
                                                                   d.n_classes)
        order = stratified_order(self.y_eval, d.n_classes)
        self._eval_peer_idx = np.sort(order[:self.eval_peer_samples])
        self._eval_avg_idx = np.sort(order[:self.eval_avg_samples])
        #: Seconds spent in evaluate() so far.
        self.eval_seconds = 0.0
        #: Progress of ``run`` (restored by ``load_checkpoint``): the next round, the evaluation
        #: rows so far, and True only between two rounds (where a checkpoint is consistent).
        self.next_round = 0
        self.history: list[dict] = []
        self.at_boundary = False
        self._loss_sum, self._loss_rounds = 0.0, 0
        self._loss0: float | None = None
        self._scale0: float | None = None
        self._elapsed = 0.0

    # ---- what the MPI backend (decentlearn.mpi.runner.MPISimulator) does its own way ----------

    def _threads(self) -> int | None:
        """Threads of this process's kernels."""
        return self.config.threads

    def _make_comm(self, mixing: tuple, accepted, threads: int | None):
        """The communicator for ``mixing`` (``_mixing_rule``) hosting every peer."""
        c = self.config
        kind, alpha, eta = mixing
        if kind == "finite-time":
            return finite_gossip.FiniteTimeComm(self.topology, n_threads=threads)
        kwargs = dict(n_threads=threads, network=self.network,
                      samples_per_round=c.local_steps * c.batch_size)
        if kind == "nonlinear":
            return finite_gossip.NonlinearGossipComm(self.topology, alpha=alpha, eta=eta,
                                                     **kwargs)
        return SimComm(self.topology, mixing_kind="column" if "column" in accepted else None,
                       **kwargs)

    def _report_problems(self) -> None:
        for problem in self.problems:
            warnings.warn(problem, SetupWarning, stacklevel=3)

    def _build_async(self, params, segments, frozen, threads):
        """The event-driven AD-PSGD communicator and algorithm (``--async``)."""
        from decentlearn.network import asynchronous
        return asynchronous.build(self, params, self.config.optimizer_config(),
                                  _stream_seed(self.config.seed, _STREAM_COMPRESS),
                                  segments=segments)

    def _wrap_compressor(self, compressor):
        return compressor

    def _clique_averaging(self):
        return algorithms.CliqueAveraging(self.topology.groups)

    @property
    def is_root(self) -> bool:
        """True in the process that writes the results (always in process; rank 0 on MPI)."""
        return True

    @property
    def params(self) -> np.ndarray:
        return self.algorithm.params

    def sample(self) -> tuple[np.ndarray, np.ndarray]:
        """One minibatch per peer: x (P, B, *input_shape), y (P, B)."""
        idx = self.sampler.next()
        # np.take copies whole samples (2.7x faster than fancy indexing here); same arrays
        return np.take(self.dataset.x_train, idx, axis=0), np.take(self.dataset.y_train, idx)

    def evaluate(self, final: bool = False) -> dict:
        """Accuracy of every peer's model and of the average model, consensus, bytes.

        Peers are evaluated together (one batched pass) on a fixed stratified subsample of
        ``eval_peer_samples`` test samples, the average model on ``eval_avg_samples`` (the whole
        evaluation set when ``final``); see eval_sizes()."""
        t0 = time.perf_counter()
        pi = self._eval_peer_idx
        self.last_accuracy, _ = self.model.evaluate(self.params, self.x_eval[pi],
                                                    self.y_eval[pi])
        row = self._eval_row(self.params, self.last_accuracy, self.comm.bytes_sent, final)
        self.eval_seconds += time.perf_counter() - t0
        return row

    def _eval_row(self, X: np.ndarray, acc: np.ndarray, sent: np.ndarray, final: bool) -> dict:
        """The evaluation row from all peers' parameters ``X``, accuracies and bytes sent: the
        average model is evaluated here."""
        avg = X.mean(axis=0, keepdims=True, dtype=np.float64).astype(np.float32)
        if final or self.eval_avg_samples >= len(self.y_eval):
            x_avg, y_avg = self.x_eval, self.y_eval
        else:
            x_avg, y_avg = self.x_eval[self._eval_avg_idx], self.y_eval[self._eval_avg_idx]
        acc_avg, loss_avg = self.model.evaluate(avg, x_avg, y_avg)
        return {
            "test_accuracy_mean": float(acc.mean()),
            "test_accuracy_min": float(acc.min()),
            "test_accuracy_max": float(acc.max()),
            "test_accuracy_avg_model": float(acc_avg[0]),
            "test_loss_avg_model": float(loss_avg[0]),
            "consensus_distance": metrics.consensus_distance(X),
            "bytes_sent_total": int(sent.sum()),
            "bytes_sent_max_peer": int(sent.max()),
            # Network hook: sim_seconds and fault rates with --network (nothing otherwise).
            **self.comm.network_metrics(),
        }

    def eval_summary(self, run_seconds: float) -> dict:
        """What the evaluation cost and covered, for summary.json."""
        return {
            "peer_samples": self.eval_peer_samples,
            "avg_model_samples": self.eval_avg_samples,
            "avg_model_samples_final": len(self.y_eval),
            "test_samples": len(self.dataset.y_test),
            "seconds": self.eval_seconds,
            "fraction_of_run": self.eval_seconds / run_seconds if run_seconds > 0 else None,
        }

    def _check_losses(self, t: int, losses: np.ndarray) -> None:
        """DivergenceError after round t if a loss is not finite or the mean loss grew past
        DIVERGENCE_LOSS_FACTOR x its first value."""
        c = self.config
        if not np.isfinite(losses).all():
            raise DivergenceError(t, c)
        loss = float(losses.mean())
        if self._loss0 is None:
            self._loss0 = loss
        elif loss > DIVERGENCE_LOSS_FACTOR * max(self._loss0, 1e-3):
            raise DivergenceError(t, c, f"the mean training loss {loss:.4g} exceeds "
                                  f"{DIVERGENCE_LOSS_FACTOR:g} x its first-round value "
                                  f"{self._loss0:.4g}")

    def _check_consensus(self, t: int, cd: float) -> None:
        """DivergenceError after round t if the consensus distance ``cd`` is not finite or past
        DIVERGENCE_CONSENSUS_FACTOR x max(1, ||x_0||^2)."""
        bound = DIVERGENCE_CONSENSUS_FACTOR * self._scale0
        if not np.isfinite(cd) or cd > bound:
            raise DivergenceError(t, self.config, f"the consensus distance {cd:.3g} exceeds "
                                  f"{DIVERGENCE_CONSENSUS_FACTOR:g} x max(1, ||x_0||^2) = "
                                  f"{bound:.3g}, peers are drifting apart")

    def check_divergence(self, t: int, losses: np.ndarray) -> None:
        """Raises DivergenceError after round t if the loss or the parameters are not finite, or
        the consensus distance or the loss grew past their bounds (see DIVERGENCE_*_FACTOR)."""
        self._check_losses(t, losses)
        with np.errstate(over="ignore", invalid="ignore"):
            cd = metrics.consensus_distance_approx(self.params)
            if not np.isfinite(cd):
                raise DivergenceError(t, self.config)
            if cd > DIVERGENCE_CONSENSUS_FACTOR * self._scale0:
                cd = metrics.consensus_distance(self.params)  # confirm: exact, float64, centred
        self._check_consensus(t, cd)

    def _train_round(self, t: int) -> np.ndarray:
        """Round t of the algorithm (learning rate, churn, the simulated clock): this process's
        peers' losses. A kernel refusing NaN/inf raises NonFiniteError."""
        # Overflow shows up as a non-finite loss or parameter, reported in one line.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if self.lr_schedule is not None:
                self.algorithm.optimizer.lr = self.lr_schedule(t)
            if self.offline_hook is not None:  # network hook: churn
                self.offline_hook.before_round(t)
            losses = self.algorithm.round(self.sample, t)
            if self.offline_hook is not None:
                self.offline_hook.after_round(t)
        self.comm.round_done(t)  # network hook: closes round t on the simulated clock
        return losses

    def _step(self, t: int) -> np.ndarray:
        """Round t and the divergence checks: every peer's loss."""
        try:
            losses = self._train_round(t)
        except NonFiniteError as e:  # a kernel refusing NaN/inf: training diverged
            raise DivergenceError(t, self.config) from e
        self.check_divergence(t, losses)
        return losses

    def _after_eval(self, t: int, row: dict) -> None:
        """After the evaluation row of round t joined the history, before the callbacks."""

    def run(self, callbacks: list[Callback] | tuple = ()) -> Result:
        """Runs the rounds from ``next_round`` (0, or where a checkpoint left off) to
        ``config.rounds``. Callbacks' ``on_round_end`` and ``on_eval`` run where ``is_root``,
        ``on_round_complete`` (between two rounds) everywhere, so that a ``CheckpointCallback``
        given to every MPI rank saves collectively."""
        c = self.config
        result = Result(config=c)
        start = time.perf_counter() - self._elapsed
        if self._scale0 is None:
            x0 = self._init_row.astype(np.float64)
            self._scale0 = max(1.0, float(x0 @ x0))
        result.history = self.history
        root = list(callbacks) if self.is_root else []
        for t in range(self.next_round, c.rounds):
            self.at_boundary = False
            losses = self._step(t)
            self._loss_sum += float(losses.mean())
            self._loss_rounds += 1
            for cb in root:
                cb.on_round_end(self, t)
            if (t + 1) % c.eval_every == 0 or t + 1 == c.rounds:
                row = {"round": t + 1, "train_loss": self._loss_sum / self._loss_rounds}
                row.update(self.evaluate(final=t + 1 == c.rounds))
                row["wall_seconds"] = time.perf_counter() - start
                self._loss_sum, self._loss_rounds = 0.0, 0
                result.history.append(row)
                self._after_eval(t, row)
                for cb in root:
                    cb.on_eval(self, row)
            self.next_round = t + 1
            self._elapsed = time.perf_counter() - start
            self.at_boundary = True
            for cb in callbacks:
                hook = getattr(cb, "on_round_complete", None)
                if hook is not None:
                    hook(self, t)
        if not result.history:
            raise ValueError(f"nothing to run: all {c.rounds} rounds are done (next_round="
                             f"{self.next_round}); raise rounds to continue the run")
        result.summary = self._summary(time.perf_counter() - start)
        result.params = self.params
        return result

    def _summary(self, run_seconds: float) -> dict:
        """summary.json of the run that just ended (its last evaluation row and the setup)."""
        c = self.config
        last = self.history[-1]
        summary = {k: last[k] for k in metrics.COLUMNS if k not in ("round", "train_loss")}
        summary.update(self.comm.network_summary())  # network hook: sim_seconds
        topo = self.topology
        summary.update(rounds=c.rounds, final_train_loss=last["train_loss"],
                       spectral_gap=(topo.spectral_gap()
                                     if isinstance(topo, Topology)
                                     or c.peers <= SUMMARY_GAP_MAX_N else None),
                       n_params=self.model.dim, precision=c.precision,
                       warnings=list(self.problems), config=c.to_dict())
        if hasattr(self.model, "mode_report"):  # a torch model: its mode, and what auto chose
            summary["torch_mode"] = self.model.mode_report()
        if hasattr(topo, "edge_count"):  # a periodic Topology; not the random per-round graphs
            edges = topo.edge_count()
            summary.update(edges=edges, edges_fraction_of_complete=(
                edges / max(1, c.peers * (c.peers - 1) // 2)))
        if (topo.period is not None and topo.period > 1 and hasattr(topo, "period_spectral_gap")
                and c.peers <= SUMMARY_GAP_MAX_N):
            summary["spectral_gap_period"] = topo.period_spectral_gap()
        if topo.info is not None:
            summary["topology_info"] = dict(topo.info)
        counts = self.frozen if self.frozen is not None else np.zeros(c.peers, dtype=np.int64)
        summary["evaluation"] = self.eval_summary(run_seconds)
        summary["compute"] = cocofl.cost_summary(self.model, counts, c.batch_size,
                                                 c.local_steps, c.momentum != 0)
        if self.frozen is not None:
            acc = self.last_accuracy
            constrained = self.frozen > 0
            summary.update(
                constrained_peers=np.flatnonzero(constrained).tolist(),
                test_accuracy_constrained_mean=float(acc[constrained].mean())
                if constrained.any() else None,
                test_accuracy_unconstrained_mean=float(acc[~constrained].mean())
                if (~constrained).any() else None)
        return summary

    # ---- checkpoints (decentlearn.checkpoint, docs/checkpoints.md) ----------------------------

    def state_dict(self) -> dict:
        """The complete state of the run at a round boundary, as a flat dict of arrays, numpy
        scalars and JSON values (algorithm, optimizer, communicator and clock, sampler, the int8
        rounding counter, progress and the metrics rows so far)."""
        from decentlearn import checkpoint as ck
        reason = getattr(self.algorithm, "checkpoint_unsupported", None)
        if reason:
            raise ck.CheckpointError(f"algorithm {self.config.algorithm!r} cannot be "
                                     f"checkpointed: {reason}")
        state = {**ck.nest("algorithm", self.algorithm.state_dict()),
                 **ck.nest("comm", self.comm.state_dict()),
                 **ck.nest("sampler", self.sampler.state_dict())}
        state.update(ck.nest("run", {
            "next_round": self.next_round, "history": self.history, "model_steps": self.model.steps,
            "loss_sum": self._loss_sum, "loss_rounds": self._loss_rounds, "loss0": self._loss0,
            "scale0": self._scale0, "elapsed": self._elapsed, "eval_seconds": self.eval_seconds,
            "last_accuracy": self.last_accuracy}))
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores ``state_dict()`` of a run with the same configuration (CheckpointError on a
        mismatch: missing or extra names, other shapes or dtypes)."""
        from decentlearn import checkpoint as ck
        expected = set(self.state_dict())
        if set(state) != expected:
            diff = sorted(set(state) ^ expected)
            raise ck.CheckpointError(f"checkpoint does not match this run: state {diff[:3]} "
                                     "present on one side only")
        self.algorithm.load_state_dict(ck.subtree("algorithm", state))
        self.comm.load_state_dict(ck.subtree("comm", state))
        self.sampler.load_state_dict(ck.subtree("sampler", state))
        run = ck.subtree("run", state)
        try:
            self.next_round = int(run["next_round"])
            self.history = [dict(row) for row in run["history"]]
            self.model.steps = int(run["model_steps"])
            self._loss_sum, self._loss_rounds = float(run["loss_sum"]), int(run["loss_rounds"])
            self._loss0 = None if run["loss0"] is None else float(run["loss0"])
            self._scale0 = None if run["scale0"] is None else float(run["scale0"])
            self._elapsed, self.eval_seconds = float(run["elapsed"]), float(run["eval_seconds"])
        except (TypeError, ValueError) as e:
            raise ck.CheckpointError(f"checkpoint's run state is malformed: {e}") from None
        acc = run["last_accuracy"]
        self.last_accuracy = None if acc is None else np.asarray(acc)
        if self.next_round < 0:
            raise ck.CheckpointError(f"checkpoint's next round must be >= 0, got "
                                     f"{self.next_round}")
        self.at_boundary = True

    def save_checkpoint(self, path, extra: dict | None = None) -> None:
        """Writes the run's state at this round boundary to ``path`` atomically (``extra``: JSON
        metadata kept in the file)."""
        from decentlearn import checkpoint as ck
        if not self.at_boundary and self.next_round > 0:
            raise ck.CheckpointError("a checkpoint can only be taken between two rounds")
        ck.write(path, self.state_dict(), fingerprint=ck.fingerprint(self.config),
                 n_peers=self.config.peers, dim=self.model.dim, round=self.next_round,
                 extra=extra)

    def load_checkpoint(self, path) -> dict:
        """Restores the state saved at ``path`` into this (freshly built) simulator, whose
        config must match the checkpoint's (only rounds, threads and data_dir may differ).
        Returns the checkpoint's metadata."""
        from decentlearn import checkpoint as ck
        state, meta = ck.read(path, fingerprint=ck.fingerprint(self.config),
                              n_peers=self.config.peers, dim=self.model.dim)
        self.load_state_dict(state)
        return meta

    @classmethod
    def from_checkpoint(cls, path, config: RunConfig, *, dataset: Dataset | None = None,
                        ) -> Simulator:
        """A simulator built from ``config`` and restored from the checkpoint at ``path``;
        ``run()`` then continues the run to ``config.rounds``."""
        sim = cls(config, dataset=dataset)
        sim.load_checkpoint(path)
        return sim


def simulate(config: RunConfig | None = None, callbacks: list[Callback] | tuple = (),
             **overrides) -> Result:
    """Runs one simulation: ``simulate(RunConfig(...))`` or ``simulate(peers=8, rounds=50)``."""
    config = (config or RunConfig()).replace(**overrides) if overrides else (config or RunConfig())
    return Simulator(config).run(callbacks)

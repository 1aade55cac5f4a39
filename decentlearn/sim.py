"""The simulator: n peers in one process, one (n_peers, dim) float32 matrix, rounds of local steps
and gossip, and evaluation of every peer's model and of the average model.

``RunConfig`` is the whole description of a run (the CLI's flags and config files map onto it);
``simulate(config)`` builds the pieces (data, partition, topology, model, optimizer, communicator,
algorithm), runs it, and returns a ``Result`` with the evaluation history and a summary. Callbacks
see every round and every evaluation; the library itself never prints.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from decentlearn import algorithms, cocofl, compress, finite_gossip, metrics, topology
from decentlearn._core import NonFiniteError
from decentlearn.comm import SimComm
from decentlearn.data import Dataset, Partition, load_dataset, make_partition
from decentlearn.lowp import PRECISIONS
from decentlearn.nn import make_model
from decentlearn.optim import SGD, SGDConfig

# Independent random streams derived from the run's seed.
(_STREAM_INIT, _STREAM_PARTITION, _STREAM_SAMPLER, _STREAM_TOPOLOGY, _STREAM_DATA,
 _STREAM_COMPRESS, _STREAM_LOWP, _STREAM_COCOFL) = range(8)


def _stream_seed(seed: int, stream: int) -> int:
    return int(np.random.SeedSequence([seed, stream]).generate_state(1)[0])


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
        for i in range(partition.n_peers):
            self._shuffle(i)
        self._cursor = np.zeros(partition.n_peers, dtype=np.int64)
        self._steps = np.arange(batch_size, dtype=np.int64)

    def _shuffle(self, i: int) -> None:
        seg = self._perm[self._offsets[i]:self._offsets[i + 1]]
        self._rng.shuffle(seg)

    def next(self) -> np.ndarray:
        pos = self._cursor[:, None] + self._steps[None, :]
        idx = self._perm[self._offsets[:-1, None] + pos % self._sizes[:, None]]
        self._cursor += self.batch_size
        ended = np.flatnonzero(self._cursor >= self._sizes)
        if ended.size:
            for i in ended:
                self._shuffle(int(i))
            self._cursor[ended] %= self._sizes[ended]
        return idx


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
    precision: str = "fp32"
    cocofl: str | None = None
    algorithm: str = "dpsgd"
    clique_averaging: bool = False
    mixing: str = "gossip"
    variant: str = "atc"
    compress: str = "none"
    gamma: float = 1.0
    rounds: int = 200
    local_steps: int = 1
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    seed: int = 0
    threads: int | None = None
    eval_every: int = 10
    eval_samples: int | None = None

    def __post_init__(self):
        def positive_int(name, allow_none=False):
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("peers", "rounds", "local_steps", "batch_size", "eval_every"):
            positive_int(name)
        positive_int("eval_samples", allow_none=True)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        if not (isinstance(self.gamma, (int, float)) and 0 < self.gamma <= 1):
            raise ValueError(f"gamma must be a number in (0, 1], got {self.gamma!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"lr must be a number > 0, got {self.lr!r}")
        if self.threads is not None and (isinstance(self.threads, bool)
                                         or not isinstance(self.threads, int)
                                         or (self.threads < 1 and self.threads != -1)):
            raise ValueError(f"threads must be None, -1 or >= 1, got {self.threads!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.cocofl is not None:
            cocofl.parse(self.cocofl)
            if self.precision != "fp32":
                raise ValueError("cocofl trains the unfrozen layers in float32 (frozen ones run "
                                 f"int8): precision must be 'fp32', got {self.precision!r}")
        if not isinstance(self.clique_averaging, bool):
            raise ValueError(f"clique_averaging must be true or false, got "
                             f"{self.clique_averaging!r}")
        if self.mixing not in ("gossip", "finite-time"):
            raise ValueError(f"mixing must be 'gossip' or 'finite-time', got {self.mixing!r}")
        if self.algorithm not in algorithms.available():
            raise ValueError(f"unknown algorithm {self.algorithm!r}; expected one of "
                             f"{algorithms.available()}")

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
    """Training blew up: the peers' loss or parameters stopped being finite."""

    def __init__(self, t: int, config: RunConfig) -> None:
        hint = "lower --lr" + (", or --gamma" if config.algorithm == "choco" else "")
        if config.algorithm == "dpsgd" and config.compress != "none":
            hint += ", or use a lower-variance compressor (compressed D-PSGD needs one) or choco"
        super().__init__(f"training diverged at round {t + 1}: the peers' loss or parameters are "
                         f"not finite ({hint})")


class Callback:
    """Hooks called by the simulator. Subclass and override what you need."""

    def on_round_end(self, sim: Simulator, t: int) -> None:  # noqa: D401 - a hook
        """After round t (0-based)."""

    def on_eval(self, sim: Simulator, row: dict) -> None:
        """After each evaluation, with the row that goes into metrics.csv."""


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
        # Data-aware builders (d-cliques) get the per-peer label histograms, and only those.
        self.topology = topology.make(c.topology, c.peers,
                                      seed=_stream_seed(c.seed, _STREAM_TOPOLOGY),
                                      weights=c.weights,
                                      labels=self.partition.histogram(d.y_train, d.n_classes))
        if c.clique_averaging and self.topology.groups is None:
            raise ValueError(f"clique_averaging needs a topology made of cliques "
                             f"(d-cliques[:SIZE[:INTER]]), got topology={c.topology!r}")
        self.model = make_model(c.model, d.input_shape, d.n_classes, precision=c.precision,
                                seed=_stream_seed(c.seed, _STREAM_LOWP))
        init = self.model.init(_stream_seed(c.seed, _STREAM_INIT)).astype(np.float32)
        params = np.ascontiguousarray(np.broadcast_to(init, (c.peers, self.model.dim)))
        if c.mixing == "finite-time":
            if c.algorithm != "dpsgd" or c.compress != "none":
                raise ValueError("mixing='finite-time' runs several exchanges per round and "
                                 "supports uncompressed dpsgd only, got "
                                 f"algorithm={c.algorithm!r}, compress={c.compress!r}")
            self.comm = finite_gossip.FiniteTimeComm(self.topology, n_threads=c.threads)
        else:
            self.comm = SimComm(self.topology, n_threads=c.threads)
        optimizer = SGD(SGDConfig(lr=c.lr, momentum=c.momentum, nesterov=c.nesterov,
                                  weight_decay=c.weight_decay), params.shape)
        #: Layers with parameters frozen by each peer (CoCoFL); None without --cocofl.
        self.frozen: np.ndarray | None = None
        #: Test accuracy of every peer at the last evaluation.
        self.last_accuracy: np.ndarray | None = None
        if c.cocofl is not None:
            self.frozen = cocofl.assign(cocofl.parse(c.cocofl), c.peers,
                                        len(self.model.param_layers),
                                        _stream_seed(c.seed, _STREAM_COCOFL))
        extra = {"gamma": c.gamma} if c.algorithm == "choco" else {}
        self.algorithm = algorithms.make(c.algorithm, model=self.model, comm=self.comm,
                                         optimizer=optimizer, params=params,
                                         local_steps=c.local_steps, variant=c.variant,
                                         compressor=compress.make(c.compress),
                                         seed=_stream_seed(c.seed, _STREAM_COMPRESS),
                                         frozen=self.frozen, **extra)
        if c.clique_averaging:
            self.algorithm.gradient_transform = algorithms.CliqueAveraging(self.topology.groups)
        self.sampler = PeerSampler(self.partition, c.batch_size,
                                   _stream_seed(c.seed, _STREAM_SAMPLER))
        if c.eval_samples is not None and c.eval_samples < len(d.y_test):
            pick = np.random.default_rng(0).choice(len(d.y_test), c.eval_samples, replace=False)
            pick.sort()
            self.x_eval, self.y_eval = d.x_test[pick], d.y_test[pick]
        else:
            self.x_eval, self.y_eval = d.x_test, d.y_test

    @property
    def params(self) -> np.ndarray:
        return self.algorithm.params

    def sample(self) -> tuple[np.ndarray, np.ndarray]:
        """One minibatch per peer: x (P, B, *input_shape), y (P, B)."""
        idx = self.sampler.next()
        return self.dataset.x_train[idx], self.dataset.y_train[idx]

    def evaluate(self) -> dict:
        """Accuracy of every peer's model and of the average model, consensus, bytes."""
        X = self.params
        acc, _ = self.model.evaluate(X, self.x_eval, self.y_eval)
        avg = X.mean(axis=0, keepdims=True, dtype=np.float64).astype(np.float32)
        acc_avg, loss_avg = self.model.evaluate(avg, self.x_eval, self.y_eval)
        sent = self.comm.bytes_sent
        self.last_accuracy = acc
        return {
            "test_accuracy_mean": float(acc.mean()),
            "test_accuracy_min": float(acc.min()),
            "test_accuracy_max": float(acc.max()),
            "test_accuracy_avg_model": float(acc_avg[0]),
            "test_loss_avg_model": float(loss_avg[0]),
            "consensus_distance": metrics.consensus_distance(X),
            "bytes_sent_total": int(sent.sum()),
            "bytes_sent_max_peer": int(sent.max()),
        }

    def run(self, callbacks: list[Callback] | tuple = ()) -> Result:
        c = self.config
        result = Result(config=c)
        start = time.perf_counter()
        loss_sum, loss_rounds = 0.0, 0
        for t in range(c.rounds):
            try:
                # Overflow shows up as a non-finite loss or parameter, reported below in one line.
                with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                    losses = self.algorithm.round(self.sample, t)
            except NonFiniteError as e:  # a kernel refusing NaN/inf: training diverged
                raise DivergenceError(t, c) from e
            if not np.isfinite(losses).all():
                raise DivergenceError(t, c)
            loss_sum += float(losses.mean())
            loss_rounds += 1
            for cb in callbacks:
                cb.on_round_end(self, t)
            if (t + 1) % c.eval_every == 0 or t + 1 == c.rounds:
                row = {"round": t + 1, "train_loss": loss_sum / loss_rounds}
                row.update(self.evaluate())
                row["wall_seconds"] = time.perf_counter() - start
                loss_sum, loss_rounds = 0.0, 0
                result.history.append(row)
                for cb in callbacks:
                    cb.on_eval(self, row)
        last = result.history[-1]
        result.summary = {k: last[k] for k in metrics.COLUMNS if k not in ("round", "train_loss")}
        result.summary.update(rounds=c.rounds, final_train_loss=last["train_loss"],
                              spectral_gap=self.topology.spectral_gap(),
                              edges=self.topology.edge_count(),
                              edges_fraction_of_complete=(self.topology.edge_count()
                                                          / max(1, c.peers * (c.peers - 1) // 2)),
                              n_params=self.model.dim, precision=c.precision,
                              config=c.to_dict())
        if self.topology.period > 1:
            result.summary["spectral_gap_period"] = self.topology.period_spectral_gap()
        if self.topology.info is not None:
            result.summary["topology_info"] = dict(self.topology.info)
        counts = self.frozen if self.frozen is not None else np.zeros(c.peers, dtype=np.int64)
        result.summary["compute"] = cocofl.cost_summary(self.model, counts, c.batch_size,
                                                        c.local_steps, c.momentum != 0)
        if self.frozen is not None:
            acc = self.last_accuracy
            constrained = self.frozen > 0
            result.summary.update(
                constrained_peers=np.flatnonzero(constrained).tolist(),
                test_accuracy_constrained_mean=float(acc[constrained].mean())
                if constrained.any() else None,
                test_accuracy_unconstrained_mean=float(acc[~constrained].mean())
                if (~constrained).any() else None)
        result.params = self.params
        return result


def simulate(config: RunConfig | None = None, callbacks: list[Callback] | tuple = (),
             **overrides) -> Result:
    """Runs one simulation: ``simulate(RunConfig(...))`` or ``simulate(peers=8, rounds=50)``."""
    config = (config or RunConfig()).replace(**overrides) if overrides else (config or RunConfig())
    return Simulator(config).run(callbacks)

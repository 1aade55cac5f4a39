"""``RunConfig``: the whole description of a run (the CLI's flags and config files map onto it),
validated once, and the checks of a setup that are known before it runs.

Algorithm-specific hyperparameters are not fields here: each algorithm declares them in its
``Options`` dataclass (``decentlearn.algorithms``) and a run carries them in ``options``, so a
new algorithm with a new option needs no change here.
"""

from __future__ import annotations

import copy
import dataclasses
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decentlearn import algorithms
from decentlearn.errors import SetupWarning  # noqa: F401 (re-exported: runner.SetupWarning)
from decentlearn.comm import parse_mixing
from decentlearn.data import ArrayDataset
from decentlearn.network import load_network
from decentlearn.nn import cocofl
from decentlearn.nn.lowp import PRECISIONS
from decentlearn.optim import LRSchedule, OptimizerConfig
from decentlearn.registry import closest

__all__ = ["DivergenceError", "Result", "RunConfig", "SetupWarning", "config_keys",
           "mixing_rule",
           "options_of", "setup_problems", "stream_seed", "validate_network"]

# Independent random streams derived from the run's seed.
(STREAM_INIT, STREAM_PARTITION, STREAM_SAMPLER, STREAM_TOPOLOGY, STREAM_DATA,
 STREAM_COMPRESS, STREAM_LOWP, STREAM_COCOFL) = range(8)

#: Random stream of the network model (decentlearn.network), apart from the streams above.
STREAM_NETWORK = 100


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


#: Evaluation budget: test-sample forward passes per evaluation, as a fraction of the forward-pass
#: equivalents of the training since the previous one (a training step costs about 3 forwards).
#: EVAL_BUDGET is the total; the peers' models get EVAL_PEER_BUDGET of it (or more, when the
#: floor of 10 samples per class binds) and the average model the rest.
EVAL_BUDGET = 0.10


EVAL_PEER_BUDGET = 0.05


def stream_seed(seed: int, stream: int) -> int:
    return int(np.random.SeedSequence([seed, stream]).generate_state(1)[0])


@dataclass(frozen=True, init=False)
class RunConfig:
    """Everything that defines a simulated run. Field names match the CLI flags.

    The algorithm's own hyperparameters (its ``Options``, e.g. choco's ``gamma``, fedavg's
    ``participation``) are given either in ``options`` or as keyword arguments of their own:
    ``RunConfig(algorithm="choco", compress="topk:0.01", gamma=0.1)``. A keyword that is neither
    a field nor an option of the algorithm is a ValueError naming it.
    """

    #: A registered data set's spec (``decentlearn.data.available_datasets()``), or the arrays of
    #: an ``ArrayDataset`` (recorded as its spec ``arrays:NAME:DIGEST`` by ``to_dict``).
    dataset: str | ArrayDataset = "digits"
    data_dir: str | None = None
    peers: int = 16
    topology: str = "ring"
    weights: str = "metropolis"
    partition: str = "dirichlet:0.1"
    model: str = "mlp"
    torch_mode: str = "batched"
    #: Where a torch model computes: None (views of the host matrix), "cpu", "cuda", "cuda:N"
    #: (docs/torch.md, "GPU"); the state, the optimizer and the gossip stay on the host.
    device: str | None = None
    precision: str = "fp32"
    cocofl: str | None = None
    algorithm: str = "dpsgd"
    clique_averaging: bool = False
    mixing: str = "gossip"
    variant: str = "atc"
    compress: str = "none"
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
    #: Event-driven asynchronous gossip (decentlearn.algorithms.adpsgd); needs ``network``.
    asynchronous: bool = False
    #: The algorithm's own hyperparameters: fields of its ``Options`` dataclass (e.g.
    #: ``{"gamma": 0.1}`` for choco, ``{"participation": 0.5}`` for fedavg) as given; the ones
    #: left out take their defaults (``algorithm_options()`` has them all).
    options: Mapping[str, Any] = field(default_factory=dict)

    def __init__(self, **kwargs: Any) -> None:
        for f in dataclasses.fields(self):
            if f.name in kwargs:
                value = kwargs.pop(f.name)
            elif f.default is not dataclasses.MISSING:
                value = f.default
            else:
                value = f.default_factory()
            object.__setattr__(self, f.name, value)
        if kwargs:  # the algorithm's options, as keyword arguments of their own
            if not isinstance(self.options, Mapping):
                raise ValueError(f"options must be a mapping of option names to values, got "
                                 f"{type(self.options).__name__}")
            object.__setattr__(self, "options", {**self.options, **kwargs})
        self.__post_init__()

    def __post_init__(self):
        check_field_types(type(self), {f.name: getattr(self, f.name)
                                       for f in dataclasses.fields(self)})

        def positive_int(name, allow_none=False):
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("peers", "rounds", "local_steps", "batch_size", "eval_every"):
            positive_int(name)
        positive_int("eval_samples", allow_none=True)
        positive_int("eval_peer_samples", allow_none=True)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
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
        # the same rule as decentlearn.torch.device.parse_device, which needs torch to import
        if self.device is not None and not (isinstance(self.device, str) and re.fullmatch(
                r"cpu|cuda(:(0|[1-9][0-9]*))?", self.device)):
            raise ValueError(f"device (--device) must be 'cpu', 'cuda' or 'cuda:N' (N a GPU "
                             f"index >= 0), got {self.device!r}")
        if self.device is not None and not str(self.model).startswith("torch:"):
            raise ValueError(f"device (--device) applies to torch models (model='torch:...'); "
                             f"decentlearn's native models run on the CPU: got model="
                             f"{self.model!r} with device={self.device!r}")
        if self.cocofl is not None:
            cocofl.parse(self.cocofl)
            if self.precision != "fp32":
                raise ValueError("cocofl trains the unfrozen layers in float32 (frozen ones run "
                                 f"int8): precision must be 'fp32', got {self.precision!r}")
        if not isinstance(self.clique_averaging, bool):
            raise ValueError(f"clique_averaging must be true or false, got "
                             f"{self.clique_averaging!r}")
        parse_mixing(self.mixing)
        cls = algorithms.get(self.algorithm)  # unknown name: ValueError with a suggestion
        resolved = cls.Options(**options_of(cls, self.options))
        object.__setattr__(self, "options", dict(self.options))
        check = getattr(cls, "check_run", None)
        if check is not None:
            check(resolved, self.compress)
        validate_network(self, cls)

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

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> RunConfig:
        """A RunConfig from a flat mapping (a config file, ``to_dict()``): its fields, and the
        algorithm's options either in an ``options`` mapping or as keys of their own
        (``{"algorithm": "fedavg", "participation": 0.5}``). ValueError naming an unknown key."""
        names = {f.name for f in dataclasses.fields(cls)}
        plain = {k: v for k, v in values.items() if k in names}
        rest = {k: v for k, v in values.items() if k not in names}
        if rest:
            name = plain.get("algorithm", cls.algorithm)
            alg = algorithms.get(name) if isinstance(name, str) else None
            known = [f.name for f in dataclasses.fields(alg.Options)] if alg else []
            others = algorithms.option_fields()
            for key in rest:
                if key in others and key not in known and alg is not None:
                    owners = others[key][1]
                    takes = (f"its options are {', '.join(known)}" if known
                             else "it takes no options")
                    raise ValueError(f"option {key!r} is not an option of algorithm {name!r} "
                                     f"(it is {', '.join(owners)}'s); {takes}")
                if key not in known:
                    every = sorted(names | set(known))
                    guess = closest(key, every)
                    hint = f"; did you mean {guess!r}?" if guess else ";"
                    raise ValueError(f"unknown option {key!r}{hint} expected one of "
                                     f"{', '.join(every)}")
            given = plain.get("options", {})
            if not isinstance(given, Mapping):
                raise ValueError(f"options must be a table of option names to values, got "
                                 f"{type(given).__name__}")
            plain["options"] = {**rest, **given}
        return cls(**plain)

    def replace(self, **changes) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The fields as plain values (config.toml, summary.json, checkpoint fingerprints): an
        ArrayDataset as its spec ``arrays:NAME:DIGEST``, the options resolved."""
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)
             if f.name != "dataset"}  # (asdict would copy an ArrayDataset's arrays)
        d = {"dataset": (self.dataset.spec if isinstance(self.dataset, ArrayDataset)
                         else self.dataset), **d}
        d["options"] = dataclasses.asdict(self.algorithm_options())
        return d

    def algorithm_options(self):
        """The algorithm's validated ``Options`` (a frozen dataclass)."""
        return algorithms.get(self.algorithm).Options(**self.options)


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
        hint = "lower --lr" + (", or --gamma" if "gamma" in config.options else "")
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


def mixing_rule(c: RunConfig) -> tuple[str, float | None, float | None]:
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
        _, alpha, eta = parse_mixing(c.mixing)
        return "nonlinear", alpha, eta
    return "linear", None, None


def config_keys() -> dict[str, dataclasses.Field]:
    """Every key a flat configuration may hold (config files, CLI flags, sweep grids): the fields
    of RunConfig but ``options``, then every registered algorithm's option fields."""
    keys = {f.name: f for f in dataclasses.fields(RunConfig) if f.name != "options"}
    for name, (f, _) in algorithms.option_fields().items():
        keys.setdefault(name, f)
    return keys


#: What a field's annotation accepts: name in the annotation -> (test, wording in errors).
_KINDS = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "int": (lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool), "an integer"),
    "float": (lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool), "a number"),
    "bool": (lambda v: isinstance(v, (bool, np.bool_)), "true or false"),
    "Mapping[str, Any]": (lambda v: isinstance(v, Mapping), "a table of names to values"),
    "None": (lambda v: v is None, "unset"),
    "ArrayDataset": (lambda v: isinstance(v, ArrayDataset), "an ArrayDataset"),
}


def check_field_types(cls, values: Mapping[str, Any], what: str = "") -> None:
    """TypeError naming the first value of ``values`` whose type its field of dataclass ``cls``
    does not accept (by the field's annotation: ``int``, ``float | None``, ``str`` ...; a float
    field takes an int). ``what`` prefixes the field's name (``"options of choco: "``). A config
    file's ``topology = ["ring"]`` is then one line naming ``topology``, not a traceback from
    deep inside the run."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, value in values.items():
        f = fields.get(name)
        if f is None:
            continue
        kinds = [_KINDS[k] for k in str(f.type).split(" | ") if k in _KINDS]
        if not kinds or any(test(value) for test, _ in kinds):
            continue
        expected = " or ".join(words for _, words in kinds)
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise TypeError(f"{what}{name} must be {expected}, got {type(value).__name__} {shown}")


def options_of(cls, given: Any) -> dict:
    """Every field of algorithm class ``cls``'s ``Options``, from the ``given`` mapping (the rest
    at their defaults), validated by the dataclass. ValueError naming an unknown option and the
    algorithm's options."""
    if not isinstance(given, Mapping):
        raise ValueError(f"options must be a mapping of option names to values, got "
                         f"{type(given).__name__}")
    names = [f.name for f in dataclasses.fields(cls.Options)]
    for key in given:
        if key not in names:
            takes = f"its options are {', '.join(names)}" if names else "it takes no options"
            raise ValueError(f"option {key!r} is not an option of algorithm {cls.name!r}; {takes}")
    # The algorithm's own checks speak first (their ValueError names the option and its range);
    # a value they let through or choke on (TypeError) is then checked against its annotation.
    where = f"option of algorithm {cls.name!r}: "
    try:
        options = cls.Options(**given)
    except (TypeError, AttributeError) as e:  # a value of a type its checks cannot handle
        check_field_types(cls.Options, given, where)
        raise ValueError(f"options of algorithm {cls.name!r}: {e}") from None
    check_field_types(cls.Options, given, where)
    return dataclasses.asdict(options)


def validate_network(config: RunConfig, cls) -> None:
    """Checks a RunConfig's network fields against the algorithm class ``cls``'s declarations: the
    preset or file loads, the network model can time the algorithm's messages, asynchronous mode
    has a network and an algorithm with an asynchronous form. ValueError naming the field."""
    if config.network is not None:
        if not isinstance(config.network, str):
            raise ValueError("network must be a preset name or a .toml file path (str), got "
                             f"{type(config.network).__name__}")
        try:
            load_network(config.network)
        except ValueError as e:
            raise ValueError(f"network: {e}") from None
        if not cls.simulated_time:
            raise ValueError(f"network: algorithm {config.algorithm!r} sends messages (server "
                             "rounds, point-to-point replies) that the network model does not "
                             "time yet; run it without --network")
    if not isinstance(config.asynchronous, bool):
        raise ValueError(f"asynchronous must be true or false, got {config.asynchronous!r}")
    if config.asynchronous:
        if cls.async_form is None:
            forms = sorted(n for n in algorithms.available()
                           if algorithms.get(n).async_form is not None)
            raise ValueError(f"asynchronous mode: algorithm {config.algorithm!r} has no "
                             f"asynchronous form; expected one of {forms}")
        if config.network is None:
            raise ValueError("asynchronous mode needs a network model for the peers' speeds and "
                             "message times: add --network PRESET (e.g. datacenter)")

"""Splitting a training set among peers: the ``Partition`` container and the partition schemes.

A partition is stored CSR-style: ``indices`` is the concatenation of every peer's sample indices
(ascending within a peer) and peer i owns ``indices[offsets[i]:offsets[i+1]]``. Schemes are
registered by name and chosen with a spec string (``"dirichlet:0.5"``); each one returns the
owner of every sample and is reproducible from ``seed``. All of them are vectorized: their Python
loops run over classes, never over samples or peers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from decentlearn.data._spec import check_int, parse_float, parse_int, split_spec
from decentlearn.registry import Registry

__all__ = [
    "check_partition_spec",
    "Partition",
    "PartitionContext",
    "available_partitions",
    "label_skew",
    "make_partition",
    "register_partition",
    "shards_class_bound",
    "skew_report",
]

def _as_int_array(value: object, argname: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{argname} must be a numpy.ndarray, got {type(value).__name__}")
    if value.dtype.kind not in "iu":
        raise TypeError(f"{argname} must have an integer dtype, got {value.dtype}")
    if value.ndim != 1:
        raise ValueError(f"{argname} must be 1-D, got shape {value.shape}")
    return value


@dataclass(frozen=True, eq=False, repr=False)
class Partition:
    """Which training samples each peer owns.

    ``indices`` (int64) concatenates the peers' sample indices; ``offsets`` (int64, n_peers + 1)
    delimits them. Both are copied and made read-only. Indices must be distinct and >= 0.
    """

    indices: np.ndarray
    offsets: np.ndarray
    spec: str = "custom"

    def __post_init__(self) -> None:
        indices = _as_int_array(self.indices, "indices").astype(np.int64, copy=True)
        offsets = _as_int_array(self.offsets, "offsets").astype(np.int64, copy=True)
        if not isinstance(self.spec, str):
            raise TypeError(f"spec must be a str, got {type(self.spec).__name__}")
        if len(offsets) < 2:
            raise ValueError(f"offsets must have n_peers + 1 >= 2 entries, got {len(offsets)}")
        if offsets[0] != 0 or offsets[-1] != len(indices):
            raise ValueError(
                f"offsets must start at 0 and end at len(indices) = {len(indices)}, "
                f"got {offsets[0]} .. {offsets[-1]}"
            )
        if np.any(np.diff(offsets) < 0):
            raise ValueError("offsets must be non-decreasing")
        if len(indices):
            if indices.min() < 0:
                raise ValueError(f"indices must be >= 0, got minimum {indices.min()}")
            if len(np.unique(indices)) != len(indices):
                raise ValueError("indices must be distinct: a sample can belong to one peer only")
        indices.flags.writeable = False
        offsets.flags.writeable = False
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "offsets", offsets)

    @property
    def n_peers(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_samples(self) -> int:
        return len(self.indices)

    @property
    def sizes(self) -> np.ndarray:
        """Number of samples of each peer, int64 ``(n_peers,)``."""
        return np.diff(self.offsets)

    def peer(self, i: int) -> np.ndarray:
        """Read-only view of the sample indices of peer ``i`` (negative ``i`` counts from the end)."""
        i = check_int(i, "i")
        if not -self.n_peers <= i < self.n_peers:
            raise ValueError(f"i must be in [-{self.n_peers}, {self.n_peers}), got {i}")
        i %= self.n_peers
        return self.indices[self.offsets[i] : self.offsets[i + 1]]

    def histogram(self, labels: np.ndarray, n_classes: int) -> np.ndarray:
        """Label counts per peer: int64 ``(n_peers, n_classes)``, row i counts peer i's labels."""
        labels = _as_int_array(labels, "labels")
        n_classes = check_int(n_classes, "n_classes", minimum=1)
        if self.n_samples and self.indices.max() >= len(labels):
            raise ValueError(
                f"labels must cover every index of the partition: it refers to sample "
                f"{self.indices.max()} but labels has {len(labels)} entries"
            )
        own = labels[self.indices].astype(np.int64)
        if len(own) and (own.min() < 0 or own.max() >= n_classes):
            raise ValueError(f"labels must be in [0, {n_classes}), got values in [{own.min()}, {own.max()}]")
        peer_of = np.repeat(np.arange(self.n_peers, dtype=np.int64), self.sizes)
        flat = np.bincount(peer_of * n_classes + own, minlength=self.n_peers * n_classes)
        return flat.reshape(self.n_peers, n_classes).astype(np.int64, copy=False)

    def __repr__(self) -> str:
        sizes = self.sizes
        return (
            f"Partition(spec={self.spec!r}, n_peers={self.n_peers}, n_samples={self.n_samples}, "
            f"sizes={int(sizes.min())}..{int(sizes.max())})"
        )


@dataclass(frozen=True, eq=False)
class PartitionContext:
    """What a scheme gets: the labels (int64), the number of classes (max label + 1), the peers,
    a seeded generator, the optional natural groups, the full spec (for messages) and its args."""

    labels: np.ndarray
    n_classes: int
    n_peers: int
    rng: np.random.Generator
    groups: np.ndarray | None
    spec: str
    args: tuple[str, ...]

    def class_indices(self) -> list[np.ndarray]:
        """The sample indices of each class 0..n_classes-1 (ascending)."""
        order = np.argsort(self.labels, kind="stable")
        bounds = np.searchsorted(self.labels[order], np.arange(self.n_classes + 1))
        return [order[bounds[c] : bounds[c + 1]] for c in range(self.n_classes)]


#: A scheme maps a context to the owner (peer) of every sample, int64 ``(N,)``; -1 = unassigned.
Scheme = Callable[[PartitionContext], np.ndarray]


@dataclass(frozen=True)
class _Entry:
    scheme: Scheme
    form: str


_SCHEMES: Registry[_Entry] = Registry("partition")
_S = TypeVar("_S", bound=Scheme)


def register_partition(name: str, *, form: str | None = None) -> Callable[[_S], _S]:
    """Register a scheme under ``name``; ``form`` documents its spec (e.g. ``"shards:K"``)."""
    if not isinstance(name, str) or not name or ":" in name or name != name.lower():
        raise ValueError(f"name must be a non-empty lower-case str without ':', got {name!r}")

    add = _SCHEMES.register(name, form=form)

    def decorate(scheme: _S) -> _S:
        add(_Entry(scheme, form or name))
        return scheme

    return decorate


def check_partition_spec(spec: str) -> None:
    """ValueError (naming the closest scheme) unless ``spec`` names a registered partition
    scheme; its arguments are checked when the partition is made."""
    _SCHEMES.get(split_spec(spec, "partition")[0], spec)


def available_partitions() -> tuple[str, ...]:
    """The valid spec forms, e.g. ``('classes:C', 'dirichlet:ALPHA[:MIN_SIZE]', 'iid', ...)``."""
    return tuple(_SCHEMES.forms())


def _forms() -> str:
    return ", ".join(available_partitions())


def make_partition(
    spec: str,
    labels: np.ndarray,
    n_peers: int,
    *,
    seed: int = 0,
    groups: np.ndarray | None = None,
) -> Partition:
    """Split the samples with ``labels`` among ``n_peers`` peers according to ``spec``.

    Specs: ``iid``, ``shards:K``, ``dirichlet:ALPHA[:MIN_SIZE]``, ``classes:C``, ``natural``
    (uses ``groups``, the natural owner of each sample). Every sample goes to exactly one peer and
    every peer gets at least one sample, else ValueError. The result depends only on the arguments.
    """
    key, args = split_spec(spec)
    entry = _SCHEMES.get(key, spec)
    labels = _as_int_array(labels, "labels").astype(np.int64, copy=False)
    if len(labels) and labels.min() < 0:
        raise ValueError(f"labels must be >= 0, got minimum {labels.min()}")
    n_peers = check_int(n_peers, "n_peers", minimum=1)
    seed = check_int(seed, "seed", minimum=0)
    n = len(labels)
    if n_peers > n:
        raise ValueError(
            f"n_peers={n_peers} exceeds the {n} training samples; every peer needs at least one sample"
        )
    if groups is not None:
        groups = _as_int_array(groups, "groups").astype(np.int64, copy=False)
        if len(groups) != n:
            raise ValueError(f"groups must have one entry per sample ({n}), got {len(groups)}")
    ctx = PartitionContext(
        labels=labels,
        n_classes=int(labels.max()) + 1,
        n_peers=n_peers,
        rng=np.random.default_rng(seed),
        groups=groups,
        spec=spec,
        args=args,
    )
    owner = entry.scheme(ctx)
    assigned = np.flatnonzero(owner >= 0)
    indices = assigned[np.argsort(owner[assigned], kind="stable")]
    counts = np.bincount(owner[assigned], minlength=n_peers)
    empty = np.flatnonzero(counts == 0)
    if len(empty):
        shown = ", ".join(map(str, empty[:8])) + (", ..." if len(empty) > 8 else "")
        raise ValueError(
            f"partition {spec!r} left {len(empty)} of the {n_peers} peers without samples "
            f"(peers {shown}); use fewer peers or a less skewed spec"
        )
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Partition(indices=indices.astype(np.int64), offsets=offsets, spec=spec)


# --------------------------------------------------------------------------------------------
# Schemes


def _no_args(ctx: PartitionContext, form: str) -> None:
    if ctx.args:
        raise ValueError(f"spec {ctx.spec!r} takes no ':' arguments (form {form!r}); valid forms: {_forms()}")


def _n_args(ctx: PartitionContext, low: int, high: int) -> None:
    if not low <= len(ctx.args) <= high:
        raise ValueError(f"spec {ctx.spec!r} has {len(ctx.args)} ':' arguments; valid forms: {_forms()}")


def _even_sizes(total: int, parts: int) -> np.ndarray:
    """``parts`` sizes summing to ``total`` that differ by at most one, larger first."""
    return total // parts + (np.arange(parts) < total % parts).astype(np.int64)


@register_partition("iid")
def _iid(ctx: PartitionContext) -> np.ndarray:
    """Shuffle, then cut into n_peers nearly equal parts (sizes differ by at most one)."""
    _no_args(ctx, "iid")
    n = len(ctx.labels)
    owner = np.empty(n, dtype=np.int64)
    owner[ctx.rng.permutation(n)] = np.repeat(np.arange(ctx.n_peers), _even_sizes(n, ctx.n_peers))
    return owner


@register_partition("shards", form="shards:K")
def _shards(ctx: PartitionContext) -> np.ndarray:
    """McMahan et al. 2017: sort by label (ties in seeded random order), cut into n_peers*K
    nearly equal shards, give each peer K shards chosen at random. A peer sees at most
    ``shards_class_bound(labels, n_peers, K)`` classes (2K while shards are no larger than the
    smallest class plus one)."""
    _n_args(ctx, 1, 1)
    k = parse_int(ctx.args[0], what="K (shards per peer)", spec=ctx.spec, forms=_forms())
    n, n_shards = len(ctx.labels), ctx.n_peers * k
    if n_shards > n:
        raise ValueError(
            f"spec {ctx.spec!r} with n_peers={ctx.n_peers} needs n_peers*K = {n_shards} shards "
            f"but there are only {n} samples; use a smaller K or fewer peers"
        )
    perm = ctx.rng.permutation(n)
    order = perm[np.argsort(ctx.labels[perm], kind="stable")]
    shard_sizes = _even_sizes(n, n_shards)
    shard_owner = np.empty(n_shards, dtype=np.int64)
    shard_owner[ctx.rng.permutation(n_shards)] = np.arange(n_shards) // k
    owner = np.empty(n, dtype=np.int64)
    owner[order] = np.repeat(shard_owner, shard_sizes)
    return owner


def shards_class_bound(labels: np.ndarray, n_peers: int, k: int) -> int:
    """The most classes one peer of ``shards:K`` can see: min(C, K * c(s)).

    C is the number of classes present, s = ceil(N / (n_peers * K)) the largest shard size and
    c(s) = 2 + floor((s - 2) / m) the most classes a run of s label-sorted samples can touch
    when the smallest class has m samples (two partial classes at the ends, whole classes of at
    least m samples in between; c(1) = 1). When s <= m + 1 this is 2K. A bound, attained only
    when the shards fall badly; see docs/data.md.
    """
    labels = _as_int_array(labels, "labels")
    n_peers = check_int(n_peers, "n_peers", minimum=1)
    k = check_int(k, "k", minimum=1)
    if len(labels) == 0:
        raise ValueError("labels must not be empty")
    if len(labels) and labels.min() < 0:
        raise ValueError(f"labels must be >= 0, got minimum {labels.min()}")
    counts = np.bincount(labels)
    counts = counts[counts > 0]
    s = -(-len(labels) // (n_peers * k))
    per_shard = 2 + (s - 2) // int(counts.min())  # s = 1 gives 2 + (-1) = 1
    return int(min(len(counts), k * per_shard))


def _water_fill_levels(values: np.ndarray, take: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Per row r, the smallest integer level L_r >= floor_r with sum_c max(0, values[r, c] - L_r) <= take_r.

    ``values`` is (R, C) int64, ``take`` and ``floor`` (R,) int64. Vectorized bisection over the rows.
    """
    low = floor.copy()  # invariant: level low may take too much (or exactly enough)
    high = np.maximum(values.max(axis=1, initial=0), floor)  # level high takes nothing: always ok
    while True:
        active = low < high
        if not active.any():
            return high
        mid = (low + high) // 2
        taken = np.maximum(values - mid[:, None], 0).sum(axis=1)
        ok = taken <= take
        high = np.where(active & ok, mid, high)
        low = np.where(active & ~ok, mid + 1, low)


def _take_from_top(values: np.ndarray, take: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Remove ``take_r`` units from row r of ``values`` (R, C), always from its largest entries
    (water-filling down to a common level, ties broken by the lowest column), never below
    ``floor_r``; return the (R, C) amounts removed. Needs sum_c max(0, values - floor) >= take."""
    level = _water_fill_levels(values, take, floor)
    removed = np.maximum(values - level[:, None], 0)
    short = take - removed.sum(axis=1)  # < #{c: values >= level} by the choice of level
    at_level = (values >= level[:, None]) & (level[:, None] > floor[:, None])
    removed += at_level & (np.cumsum(at_level, axis=1) <= short[:, None])
    return removed


def _repair_min_size(counts: np.ndarray, min_size: int) -> np.ndarray:
    """Give every peer (column of the (n_classes, n_peers) ``counts``) at least ``min_size`` samples.

    The D missing samples are taken from the largest peers — lowered to a common size, never
    below ``min_size`` — and, within each donor, from its most plentiful classes; then the taken
    samples, ordered by (donor, class), are handed to the short peers in increasing peer order.
    Pure arithmetic on ``counts``: deterministic, and the identity when no peer is short.
    """
    sizes = counts.sum(axis=0)
    need = np.maximum(min_size - sizes, 0)
    total = int(need.sum())
    if total == 0:
        return counts
    # Which peers give how much: water-fill the peer sizes (one row) down to a common level.
    give = _take_from_top(sizes[None, :], np.array([total]), np.array([min_size]))[0]
    # Which classes each donor gives: water-fill its class counts.
    donors = np.flatnonzero(give)
    taken = _take_from_top(counts[:, donors].T, give[donors], np.zeros(len(donors), dtype=np.int64)).T
    out = counts.copy()
    out[:, donors] -= taken
    # Units ordered by (donor, class), handed out in order to the short peers.
    unit_class = np.repeat(np.tile(np.arange(counts.shape[0]), len(donors)), taken.T.ravel())
    unit_peer = np.repeat(np.arange(counts.shape[1]), need)
    np.add.at(out, (unit_class, unit_peer), 1)
    return out


@register_partition("dirichlet", form="dirichlet:ALPHA[:MIN_SIZE]")
def _dirichlet(ctx: PartitionContext) -> np.ndarray:
    """Hsu et al. 2019: for each class c draw q_c ~ Dir(ALPHA * 1) over the peers and give peer j
    the samples floor(n_c * sum_{i<=j} q_ci) - floor(n_c * sum_{i<j} q_ci) of the (shuffled)
    class; then repair the draw so every peer has >= MIN_SIZE (default 1) samples: the missing
    samples come from the largest peers' most plentiful classes (``_repair_min_size``)."""
    _n_args(ctx, 1, 2)
    alpha = parse_float(ctx.args[0], what="ALPHA", spec=ctx.spec, forms=_forms(), positive=True)
    min_size = 1
    if len(ctx.args) == 2:
        min_size = parse_int(ctx.args[1], what="MIN_SIZE", spec=ctx.spec, forms=_forms(), minimum=0)
    n, peers = len(ctx.labels), ctx.n_peers
    if peers * min_size > n:
        raise ValueError(
            f"spec {ctx.spec!r}: {peers} peers with at least {min_size} samples each need "
            f"{peers * min_size} samples, but there are only {n}"
        )
    by_class = ctx.class_indices()
    class_sizes = np.array([len(c) for c in by_class], dtype=np.int64)
    q = ctx.rng.dirichlet(np.full(peers, alpha), size=len(by_class))  # (n_classes, n_peers)
    cuts = np.floor(np.cumsum(q, axis=1) * class_sizes[:, None]).astype(np.int64)
    cuts = np.minimum(cuts, class_sizes[:, None])
    cuts[:, -1] = class_sizes
    # MIN_SIZE 0 means 1: make_partition refuses an empty peer.
    counts = _repair_min_size(np.diff(cuts, axis=1, prepend=0), max(min_size, 1))
    owner = np.empty(n, dtype=np.int64)
    peer_ids = np.arange(peers)
    for c, idx in enumerate(by_class):
        owner[ctx.rng.permutation(idx)] = np.repeat(peer_ids, counts[c])
    return owner


@register_partition("classes", form="classes:C")
def _classes(ctx: PartitionContext) -> np.ndarray:
    """Each peer holds C distinct classes: with the present classes in a seeded random order
    pi_0..pi_{K-1}, peer i holds pi_{(i*C + j) mod K} for j < C, so every class is held by
    floor or ceil of n_peers*C/K peers; each class's (shuffled) samples are split evenly among
    its holders."""
    _n_args(ctx, 1, 1)
    c = parse_int(ctx.args[0], what="C (classes per peer)", spec=ctx.spec, forms=_forms())
    by_class = ctx.class_indices()
    present = np.array([k for k, idx in enumerate(by_class) if len(idx)], dtype=np.int64)
    k = len(present)
    if c > k:
        raise ValueError(f"spec {ctx.spec!r}: C={c} exceeds the {k} classes present in labels")
    if ctx.n_peers * c < k:
        raise ValueError(
            f"spec {ctx.spec!r}: {ctx.n_peers} peers holding {c} classes each cover only "
            f"{ctx.n_peers * c} of the {k} classes; need n_peers*C >= {k}"
        )
    order = ctx.rng.permutation(present)
    held = order[(np.arange(ctx.n_peers)[:, None] * c + np.arange(c)) % k]  # (n_peers, C)
    holder_peer = np.repeat(np.arange(ctx.n_peers), c)
    holder_class = held.ravel()
    by_holder = np.argsort(holder_class, kind="stable")
    bounds = np.searchsorted(holder_class[by_holder], np.arange(ctx.n_classes + 1))
    owner = np.empty(len(ctx.labels), dtype=np.int64)
    for cls in present:
        holders = holder_peer[by_holder[bounds[cls] : bounds[cls + 1]]]
        idx = by_class[cls]
        if len(idx) < len(holders):
            raise ValueError(
                f"spec {ctx.spec!r}: class {cls} has {len(idx)} samples but {len(holders)} peers "
                f"hold it; use fewer peers or a smaller C"
            )
        sizes = ctx.rng.permutation(_even_sizes(len(idx), len(holders)))
        owner[ctx.rng.permutation(idx)] = np.repeat(holders, sizes)
    return owner


@register_partition("natural")
def _natural(ctx: PartitionContext) -> np.ndarray:
    """Peer i gets the samples of the i-th smallest group id of ``groups`` (e.g. the device of
    each synthetic sample); the number of distinct groups must equal n_peers."""
    _no_args(ctx, "natural")
    if ctx.groups is None:
        raise ValueError(
            "spec 'natural' needs groups= (the natural owner of each sample, e.g. Dataset.groups of "
            "a synthetic data set)"
        )
    ids, owner = np.unique(ctx.groups, return_inverse=True)
    if len(ids) != ctx.n_peers:
        raise ValueError(
            f"spec 'natural': groups holds {len(ids)} distinct groups but n_peers={ctx.n_peers}; they must be equal"
        )
    return owner.astype(np.int64).reshape(-1)


# --------------------------------------------------------------------------------------------
# Reports


def _label_distributions(
    partition: Partition, labels: np.ndarray, n_classes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    hist = partition.histogram(labels, n_classes)
    sizes = hist.sum(axis=1)
    total = hist.sum(axis=0).astype(np.float64)
    overall = total / max(total.sum(), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_peer = hist / sizes[:, None].astype(np.float64)
    tv = 0.5 * np.abs(per_peer - overall).sum(axis=1)
    return hist, sizes, tv


def label_skew(partition: Partition, labels: np.ndarray, n_classes: int) -> float:
    """Mean over the (non-empty) peers of the total-variation distance between the peer's label
    distribution and that of all the partition's samples: 0 for identical distributions, up to
    1 - 1/n_classes when every peer holds a single class of a balanced set."""
    if not isinstance(partition, Partition):
        raise TypeError(f"partition must be a Partition, got {type(partition).__name__}")
    _, sizes, tv = _label_distributions(partition, labels, n_classes)
    nonempty = sizes > 0
    return float(tv[nonempty].mean()) if nonempty.any() else 0.0


def skew_report(
    partition: Partition, labels: np.ndarray, n_classes: int, *, max_peers: int | None = None
) -> str:
    """A table of each peer's label histogram, size and number of classes, then a summary line.

    With ``max_peers`` only the first and last peers are listed (about ``max_peers`` rows).
    """
    if not isinstance(partition, Partition):
        raise TypeError(f"partition must be a Partition, got {type(partition).__name__}")
    if max_peers is not None:
        max_peers = check_int(max_peers, "max_peers", minimum=2)
    hist, sizes, tv = _label_distributions(partition, labels, n_classes)
    n_cls = (hist > 0).sum(axis=1)
    width = max(len(str(int(hist.max(initial=0)))), len(str(n_classes - 1)))
    size_w = max(4, len(str(int(sizes.max(initial=0)))))
    peer_w = max(4, len(str(partition.n_peers - 1)))
    header = f"{'peer':>{peer_w}} {'size':>{size_w}} {'#cls':>4} {'tv':>5} | " + " ".join(
        f"{c:>{width}}" for c in range(n_classes)
    )
    rows = [header, "-" * len(header)]
    shown = np.arange(partition.n_peers)
    if max_peers is not None and partition.n_peers > max_peers:
        half = max_peers // 2
        shown = np.concatenate([shown[:half], shown[-(max_peers - half) :]])
    for pos, i in enumerate(shown):
        if pos and i != shown[pos - 1] + 1:
            rows.append(f"{'...':>{peer_w}}")
        tv_text = f"{tv[i]:5.3f}" if sizes[i] else f"{'-':>5}"
        rows.append(
            f"{i:>{peer_w}} {sizes[i]:>{size_w}} {n_cls[i]:>4} {tv_text} | "
            + " ".join(f"{v:>{width}}" for v in hist[i])
        )
    nonempty = sizes > 0
    skew = float(tv[nonempty].mean()) if nonempty.any() else 0.0
    rows.append(
        f"{partition.spec}: {partition.n_peers} peers, {partition.n_samples} samples, "
        f"size min/mean/max {sizes.min()}/{sizes.mean():.1f}/{sizes.max()}, "
        f"classes per peer min/mean/max {n_cls.min()}/{n_cls.mean():.1f}/{n_cls.max()}, "
        f"label skew (mean TV distance to the global label distribution) {skew:.3f}"
    )
    return "\n".join(rows)

"""Time-varying and directed graphs drawn per round from the seed, and the check that a topology's
mixing matrices suit the algorithm that uses them.

* ``random-matching``: each round a uniformly random perfect matching (one peer idles when n is
  odd); matched peers average, W_t = (I + P_t) / 2, symmetric and doubly stochastic.
* ``epidemic:S``: Epidemic Learning (de Vos et al., NeurIPS 2023): each round every peer sends its
  model to S peers drawn uniformly among the others. The receivers average what arrives ("row"
  weights, the paper's rule) or, for push-sum, every sender splits its mass among itself and its
  S targets ("column" weights, 1 / (S + 1)).
* ``directed-ring``: peer i sends to i + 1 only.

Static graphs of :mod:`decentlearn.topology` are built by :func:`decentlearn.topology.make`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from decentlearn import topology as topo
from decentlearn.network.model import STREAM_MATCH, hash_uniform
from decentlearn.topology import RoundTopology, column_weights, row_weights

__all__ = ["DYNAMIC", "check_mixing", "make_topology"]


def _pattern(n: int, dst: np.ndarray, src: np.ndarray) -> sp.csr_array:
    keep = dst != src
    adj = sp.csr_array((np.ones(int(keep.sum())), (dst[keep], src[keep])), shape=(n, n))
    adj.sum_duplicates()
    adj.sort_indices()
    adj.data[:] = 1.0
    return adj


def random_matching(n: int, seed: int) -> RoundTopology:
    def matrix_of(t: int) -> sp.csr_array:
        order = np.argsort(hash_uniform(seed, STREAM_MATCH, t, np.arange(n)), kind="stable")
        pairs = order[: n - n % 2].reshape(-1, 2)
        dst = np.concatenate((pairs[:, 0], pairs[:, 1]))
        src = np.concatenate((pairs[:, 1], pairs[:, 0]))
        adj = _pattern(n, dst, src)
        half = np.full(adj.nnz, 0.5)
        return topo._assemble(adj, half)

    return RoundTopology("random-matching", n, matrix_of, weights="matching",
                         stochastic="doubly", directed=False)


def epidemic(n: int, s: int, seed: int, kind: str) -> RoundTopology:
    if s < 1 or s > n - 1:
        raise ValueError(f"S must be in [1, n - 1] = [1, {n - 1}], got {s}")
    if kind not in ("row", "column"):
        raise ValueError(f"epidemic weights must be 'row' or 'column', got {kind!r}")

    def matrix_of(t: int) -> sp.csr_array:
        peers = np.arange(n)
        # Row j: sender j's random keys for every receiver; its S smallest (itself excluded).
        keys = hash_uniform(seed, STREAM_MATCH, t, peers[:, None], peers[None, :]).reshape(n, n)
        keys[peers, peers] = 2.0
        targets = np.argpartition(keys, s - 1, axis=1)[:, :s]
        adj = _pattern(n, targets.ravel(), np.repeat(peers, s))
        return column_weights(adj) if kind == "column" else row_weights(adj)

    return RoundTopology(f"epidemic:{s}", n, matrix_of, weights=kind, stochastic=kind,
                         directed=True)


def directed_ring(n: int, kind: str) -> RoundTopology:
    i = np.arange(n)
    adj = _pattern(n, (i + 1) % n, i)
    # In- and out-degree 1: both rules give 1/2 everywhere, a doubly stochastic W.
    w = column_weights(adj) if kind == "column" else row_weights(adj)
    return RoundTopology("directed-ring", n, lambda t: w, weights=kind, stochastic="doubly",
                         period=1, directed=n > 2)


#: Dynamic and directed builders by name: (n, params, seed, kind) -> RoundTopology.
DYNAMIC = {
    "random-matching": lambda n, params, seed, kind: random_matching(n, seed),
    "epidemic": lambda n, params, seed, kind: epidemic(n, _s(params), seed, kind),
    "directed-ring": lambda n, params, seed, kind: directed_ring(n, kind),
}


def _s(params: list[str]) -> int:
    if len(params) != 1:
        raise ValueError(f"epidemic takes one parameter S (peers each peer sends to), got {params}")
    try:
        return int(params[0])
    except ValueError:
        raise ValueError(f"S must be an integer, got {params[0]!r}") from None


def make_topology(spec: str, n: int, *, seed: int = 0, weights: str = "metropolis",
                  mixing: tuple[str, ...] = ("doubly",), labels=None):
    """A static :class:`~decentlearn.topology.Topology` from :func:`decentlearn.topology.make`, or
    one of :data:`DYNAMIC`. ``mixing`` is what the algorithm accepts (its ``mixing`` attribute);
    an epidemic graph takes the first of "column" / "row" it accepts."""
    key, *params = spec.strip().split(":")
    if key not in DYNAMIC:
        return topo.make(spec, n, seed=seed, weights=weights, labels=labels)
    kind = next((k for k in mixing if k in ("column", "row")), "row")
    try:
        return DYNAMIC[key](n, params, seed, kind)
    except ValueError as e:
        raise ValueError(f"spec {spec!r} with n={n}: {e}") from e


def check_mixing(topology, algorithm: str, accepted: tuple[str, ...]) -> None:
    """Raises ValueError when ``topology``'s matrices are not of a kind ``algorithm`` accepts."""
    kind = topo.stochastic_kind(topology)
    if kind in accepted:
        return
    hint = {"column": "push-sum (--algorithm pushsum)",
            "row": "Epidemic Learning (--algorithm epidemic) or pushsum"}.get(kind, "")
    raise ValueError(f"topology {topology.name!r} mixes with {kind}-stochastic weights, which "
                     f"algorithm {algorithm!r} does not handle (it needs "
                     f"{' or '.join(accepted)}-stochastic W)" + (f"; use {hint}" if hint else ""))

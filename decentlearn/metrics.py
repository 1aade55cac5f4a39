"""Metrics of a decentralized run: consensus distance, accuracy summaries, the evaluation history."""

from __future__ import annotations

import csv
import os

import numpy as np

#: Columns of metrics.csv, in order.
COLUMNS = (
    "round", "train_loss", "test_accuracy_mean", "test_accuracy_min", "test_accuracy_max",
    "test_accuracy_avg_model", "test_loss_avg_model", "consensus_distance", "bytes_sent_total",
    "bytes_sent_max_peer", "bytes_peer", "bytes_client_to_server", "bytes_server_to_client",
    "wall_seconds",
)

#: The byte columns by direction, cumulative since round 0, never overlapping: peer to peer
#: (gossip, all-reduce, point-to-point), client to server, server to client. Their sum is
#: ``bytes_sent_total``.
BYTE_COLUMNS = ("bytes_peer", "bytes_client_to_server", "bytes_server_to_client")


def consensus_distance(X: np.ndarray, mean: np.ndarray | None = None) -> float:
    """Mean over peers of the squared distance to the peers' mean: (1/n) sum_i ||x_i - x_bar||^2.

    Centred and in float64, so it is exact enough for float32 states of any size; every sum in a
    fixed order, so it does not depend on the thread count. A C-contiguous float32 X (the
    simulator's state) takes one parallel C pass (ops.consensus_distance); any other X its NumPy
    twin, which gives the same bits. (Until 27 Nov 2026 NumPy's astype/mean/einsum on one
    thread: 15 ms at every evaluation of a 1024-peer MLP, more than two 16-thread rounds; the
    values differ from that version's in the last bits, the order of the sums being another.)
    ``mean`` (a (dim,) float64 array, or None) gets the peers' mean, the same as
    ``X.mean(axis=0, dtype=np.float64)``, from the same pass.
    """
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional (n_peers, dim), got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError("X must hold at least one peer, got 0 rows")
    from decentlearn import ops
    from decentlearn._reference import consensus as ref

    if X.dtype == np.float32 and X.flags.c_contiguous:
        return float(ops.consensus_distance(X, mean=mean)[0])
    return float(ref.consensus_distance(X, mean=mean)[0])


def consensus_distance_approx(X: np.ndarray) -> float:
    """(1/n) sum_i ||x_i||^2 - ||x_bar||^2 in float64, without copying X: the consensus distance
    up to cancellation (absolute error ~1e-16 (1/n) sum_i ||x_i||^2). Cheap enough to check every
    round against a bound; use :func:`consensus_distance` to report it."""
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional (n_peers, dim), got shape {X.shape}")
    if X.size == 0:
        return 0.0
    n = X.shape[0]
    if X.dtype == np.float32 and X.flags.c_contiguous:  # one pass in C (ops.consensus_sums)
        from decentlearn import ops
        sq, col = ops.consensus_sums(X)
        value = float(sq) / n - float(col) / (n * n)
    else:
        mean_sq = float(np.einsum("ij,ij->", X, X, dtype=np.float64)) / n
        xbar = X.mean(axis=0, dtype=np.float64)
        value = mean_sq - float(xbar @ xbar)
    # max(0, nan) would be 0: a non-finite matrix must stay visible to the divergence check
    return value if not np.isfinite(value) else max(0.0, value)


def write_csv(rows: list[dict], path: str | os.PathLike) -> None:
    """Writes evaluation rows with the COLUMNS header (extra keys are appended in order seen)."""
    extra = [k for row in rows for k in row if k not in COLUMNS]
    columns = list(COLUMNS) + list(dict.fromkeys(extra))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow(row)

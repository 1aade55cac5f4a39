"""Clique Averaging (Bellet, Kermarrec and Lavoie, D-Cliques, 2022): every peer's gradient replaced
by the average of its clique's gradients before the optimizer step."""

from __future__ import annotations

import numpy as np

__all__ = ["CliqueAveraging"]


class CliqueAveraging:
    """Clique Averaging (Bellet, Kermarrec and Lavoie, D-Cliques, 2022): every peer's gradient is
    replaced, in place, by the average of the gradients of its clique, g_i <- (1/|C|) sum_{j in C}
    g_j, before the optimizer step, so momentum is applied on top of the clique's unbiased
    gradient. Set it as an algorithm's ``gradient_transform``; ``groups`` is the clique id of every
    peer (``Topology.groups`` of a d-cliques topology). Sums run in a fixed order (sorted peers),
    so results do not depend on threads.
    """

    def __init__(self, groups: np.ndarray) -> None:
        groups = np.asarray(groups)
        if groups.ndim != 1 or groups.size == 0 or not np.issubdtype(groups.dtype, np.integer):
            raise ValueError(f"groups must be a non-empty 1-D int array (a clique id per peer), "
                             f"got {groups.dtype} {groups.shape}")
        if groups.min() < 0:
            raise ValueError("groups must hold clique ids >= 0")
        self.groups = groups.astype(np.int64)
        self._order = np.argsort(self.groups, kind="stable")
        counts = np.bincount(self.groups)
        self._ids = np.flatnonzero(counts)
        self._starts = np.concatenate(([0], np.cumsum(counts[self._ids])[:-1]))
        self._inv_sizes = (1.0 / counts[self._ids]).astype(np.float32)[:, None]
        self._slot = np.searchsorted(self._ids, self.groups)

    def __repr__(self) -> str:
        return f"CliqueAveraging(cliques={self._ids.size}, peers={self.groups.size})"

    def __call__(self, grad: np.ndarray) -> None:
        if grad.ndim != 2 or grad.shape[0] != self.groups.size:
            raise ValueError(f"grad must have shape ({self.groups.size}, dim), got {grad.shape}")
        means = np.add.reduceat(grad[self._order], self._starts, axis=0)
        means *= self._inv_sizes
        grad[...] = means[self._slot]

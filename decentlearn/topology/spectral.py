"""The spectral gap of mixing matrices: sigma_2 of W (or of a product of rounds W_{p-1} ... W_0),
the factor by which one gossip step (or one period) at least shrinks the peers' disagreement.

Up to :data:`DENSE_GAP_MAX_N` peers it comes from a dense eigendecomposition; above, from ARPACK
on the deflated operator x -> W (x - mean(x)) (its Gram operator when W is not symmetric), so a
gap costs a few hundred sparse products. Static symmetric graphs whose eigenvalues cluster near 1
(rings and tori of 10^4 peers) switch to a shift-invert solver. Used by
:meth:`decentlearn.topology.Topology.spectral_gap` and ``period_spectral_gap``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

__all__ = ["DENSE_GAP_MAX_N", "second_singular_value"]

#: Up to this many peers the spectral gap comes from a dense eigendecomposition (exact, fast);
#: above it from ARPACK on a sparse operator.
DENSE_GAP_MAX_N = 64


def second_singular_value(mats: Sequence[sp.csr_array], n: int, symmetric: bool) -> float:
    """sigma_2 of M = mats[-1] @ ... @ mats[0], all doubly stochastic: ||M - J/n||_2 in [0, 1]."""
    if n == 1:
        return 0.0
    if n <= DENSE_GAP_MAX_N:
        m = np.eye(n)
        for w in mats:
            m = w @ m
        if symmetric:
            eig = np.linalg.eigvalsh(m)  # ascending; eig[-1] == 1
            second = max(abs(eig[-2]), abs(eig[0]))
        else:
            second = np.linalg.svd(m, compute_uv=False)[1]
        return float(min(1.0, max(0.0, second)))
    transposed = [w.T.tocsr() for w in reversed(mats)]

    def forward(x: np.ndarray) -> np.ndarray:  # (M - J/n) x = M (x - mean(x))
        y = x.reshape(n) - x.mean()
        for w in mats:
            y = w @ y
        return y

    def backward(x: np.ndarray) -> np.ndarray:  # (M - J/n)^T x = M^T x - mean(M^T x)
        y = x.reshape(n)
        for w in transposed:
            y = w @ y
        return y - y.mean()

    # A fixed start vector makes the result independent of global random state.
    v0 = np.random.default_rng(0).standard_normal(n)
    ncv = min(n, 40)
    if symmetric and len(mats) == 1:
        second = _second_symmetric(mats[0], n, forward, v0, ncv)
    elif symmetric:
        op = spla.LinearOperator((n, n), matvec=forward, dtype=np.float64)
        second = abs(_largest(op, v0, ncv))
    else:
        gram = spla.LinearOperator((n, n), matvec=lambda x: backward(forward(x)),
                                   dtype=np.float64)
        second = math.sqrt(max(_largest(gram, v0, ncv), 0.0))
    return float(min(1.0, max(0.0, second)))


def _largest(op: spla.LinearOperator, v0: np.ndarray, ncv: int,
             maxiter: int | None = None) -> float:
    """The eigenvalue of largest magnitude of a symmetric operator (ARPACK, machine tolerance).
    With ``maxiter``, ARPACK's ArpackNoConvergence propagates (the caller has a fallback)."""
    # An operator that maps a random vector to (numerically) zero is zero: ARPACK would stop on a
    # zero Krylov vector (a period that averages exactly, such as Moshpit on a full grid).
    if np.linalg.norm(op.matvec(v0)) <= 1e-13 * np.linalg.norm(v0):
        return 0.0
    try:
        return float(spla.eigsh(op, k=1, which="LM", v0=v0, ncv=ncv,
                                maxiter=maxiter or 100 * op.shape[0],
                                return_eigenvectors=False)[0])
    except spla.ArpackNoConvergence as exc:
        if maxiter is not None:
            raise
        raise ValueError(  # pragma: no cover - ARPACK rarely gives up
            f"the spectral gap did not converge in ARPACK: {exc}") from exc


#: Restarts of plain ARPACK on a static symmetric W before the shift-invert solver takes over.
_PLAIN_ARPACK_RESTARTS = 40


def _second_symmetric(w: sp.csr_array, n: int, forward, v0: np.ndarray, ncv: int) -> float:
    """max(|lambda_2|, |lambda_n|) of a symmetric doubly stochastic W.

    Plain ARPACK on the deflated operator converges in a few hundred products when the
    eigenvalues are spread (expanders, exponential graphs). On rings and tori of 10^4 peers they
    cluster within ~1e-7 of 1 and ARPACK would need a minute, so after a few restarts:

    * lambda_2 = 1 - mu_2, mu_2 the smallest nonzero eigenvalue of A = I - W, from shift-invert
      (a sparse LU of A + delta I, the constant null vector projected out of every solve): exact;
    * lambda_n from a loose Lanczos estimate theta >= lambda_n (relative tolerance 1e-4). When
      |theta| is clearly below lambda_2 (a ring: -1/3 against 1 - 1e-7) lambda_2 is the answer;
      otherwise lambda_n comes from shift-invert at -1 (it is then close to -1).
    """
    op = spla.LinearOperator((n, n), matvec=forward, dtype=np.float64)
    try:
        return abs(_largest(op, v0, ncv, maxiter=_PLAIN_ARPACK_RESTARTS))
    except spla.ArpackNoConvergence:
        pass
    eye = sp.identity(n, format="csc")
    a = (eye - w.tocsc()).tocsc()
    delta = 1e-10
    lu = spla.splu((a + delta * eye).tocsc())

    def solve_deflated(b: np.ndarray) -> np.ndarray:
        b = b.reshape(n) - b.mean()
        x = lu.solve(b)
        return x - x.mean()

    inv = spla.LinearOperator((n, n), matvec=solve_deflated, dtype=np.float64)
    nu = spla.eigsh(inv, k=1, which="LA", v0=v0 - v0.mean(), ncv=ncv,
                    return_eigenvectors=False)[0]
    lam2 = 1.0 - (1.0 / nu - delta)
    tol = 1e-4
    try:
        theta = float(spla.eigsh(w, k=1, which="SA", v0=v0, ncv=ncv, tol=tol, maxiter=300,
                                 return_eigenvectors=False)[0])
        if abs(theta) * (1 + 10 * tol) + 10 * tol < abs(lam2):
            return abs(lam2)
    except spla.ArpackNoConvergence:
        pass
    lam_n = spla.eigsh(w.tocsc(), k=1, sigma=-1.0 - 1e-9, which="LM", v0=v0, ncv=ncv,
                       return_eigenvectors=False)[0]
    return max(abs(lam2), abs(float(lam_n)))


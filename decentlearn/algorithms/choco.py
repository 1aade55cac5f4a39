"""CHOCO-SGD (Koloskova, Stich and Jaggi, ICML 2019): compressed gossip with public estimates."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import compress, ops
from decentlearn.algorithms.base import Algorithm, Sampler, option, register
from decentlearn.state import row

__all__ = ["CHOCO"]


@register("choco")
class CHOCO(Algorithm):
    """CHOCO-SGD (Koloskova, Stich and Jaggi, ICML 2019): compressed gossip with public estimates.

    Every peer keeps the public estimate x_hat_j of itself and its neighbours (identical copies,
    updated only from messages). Round t: H local steps give x_half; each peer sends
    q = C(x_half - x_hat) and everyone applies x_hat <- x_hat + q; then
    x <- x_half + gamma * sum_j w_ij (x_hat_j - x_hat_i), i.e. X <- X_half + gamma (W - I) X_hat.
    Works with any compressor, biased ones included; gamma (the consensus step size) must shrink
    as compression gets more aggressive. With "none" and gamma = 1 it is exactly D-PSGD (ATC).
    """

    @dataclass(frozen=True)
    class Options:
        gamma: float | None = option(
            None, "consensus step size in (0, 1]; required with a compressor (it depends on "
            "it: e.g. 0.1 for topk:0.01, 0.5 for topk:0.1); 1 without one")

        def __post_init__(self) -> None:
            g = self.gamma
            if g is not None and not (isinstance(g, (int, float)) and not isinstance(g, bool)
                                      and 0 < g <= 1):
                raise ValueError(f"gamma must be a number in (0, 1], got {g!r}")

    state = row("x_hat")
    scratch = ("_buf",)

    @classmethod
    def check_run(cls, options: Options, compress: str) -> None:
        """No default gamma fits every compressor (docs/simulator.md): on digits, 16 peers, ring,
        topk:0.01 works near 0.1-0.2 and diverges at 1; topk:0.1 works best near 0.5."""
        if options.gamma is None and compress != "none":
            raise ValueError(f"algorithm 'choco' with compress={compress!r} needs gamma, the "
                             "consensus step size in (0, 1]: it depends on the compressor (e.g. "
                             "0.1 for topk:0.01, 0.5 for topk:0.1), so there is no default")

    def __init__(self, *, gamma: float | None = None, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        gamma = self.Options(gamma).gamma
        if variant != "atc":
            raise ValueError("choco takes its local steps before communicating: variant must be "
                             f"'atc', got {variant!r}")
        if self.compressor is None:
            self.compressor = compress.make("none")
        self.gamma = 1.0 if gamma is None else float(gamma)
        self.x_hat = np.zeros_like(self.params)
        self._buf = np.empty_like(self.params)

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        losses = np.zeros(self.comm.n_peers)
        for _ in range(self.local_steps):
            losses += self.local_step(sample)
        nt = self.comm.n_threads
        payload = self.compress(ops.axpby(1, self.params, -1, self.x_hat, out=self._buf,
                                          n_threads=nt), t)
        received = self.comm.exchange(self.compressor, payload, t)
        ops.axpby(1, self.x_hat, 1, received, out=self.x_hat, n_threads=nt)  # x_hat += q
        mixed = self.comm.combine(self.x_hat, t, out=self._buf)
        ops.axpby(1, mixed, -1, self.x_hat, out=mixed, n_threads=nt)  # W x_hat - x_hat
        ops.axpby(1, self.params, self.gamma, mixed, out=self.params, n_threads=nt)
        return losses / self.local_steps

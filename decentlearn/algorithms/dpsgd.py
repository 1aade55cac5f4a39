"""D-PSGD (Lian et al., NeurIPS 2017), with local steps, both orders of steps and exchanges, and
compressed differences (DCD-PSGD, Tang et al., NeurIPS 2018)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn.algorithms.adpsgd import ADPSGD
from decentlearn.algorithms.base import Algorithm, Sampler, register

__all__ = ["DPSGD"]


@dataclass(frozen=True)
class Variant:
    value: str

    def __post_init__(self):
        if self.value not in ("atc", "cta"):
            raise ValueError(f"variant must be 'atc' or 'cta', got {self.value!r}")


@register("dpsgd")
class DPSGD(Algorithm):
    """D-PSGD (Lian et al., NeurIPS 2017) with local steps.

    ``atc`` (adapt-then-combine, default): H local steps, then x <- W_t x.
    ``cta`` (combine-then-adapt, the paper's form): the gradient is taken at x_t, the peers mix
    x_t, and the step is applied to the mixed point, x_{t+1} = W_t x_t - lr * update(g(x_t));
    further local steps (H > 1) follow from there.

    With a compressor (other than "none"), peers send compressed model differences instead of
    models (DCD-PSGD, Tang et al., NeurIPS 2018). That scheme exists only in the combine-then-adapt
    form, which is then used whatever ``variant`` says: every peer keeps exact replicas of its
    neighbours' models x_t, computes x_half = W_t x_t - lr * update(g(x_t)) (then H - 1 more local
    steps), sends z = C(x_half - x_t), and every peer, itself included, applies x_{t+1} = x_t +
    decompress(z), so the replicas stay exact. It needs an unbiased, low-variance compressor;
    CHOCO-SGD handles aggressive ones.
    """

    #: Its event-driven asynchronous form (``--async``).
    async_form = ADPSGD
    #: x_half of the compressed form.
    scratch = ("_half",)

    def __init__(self, *, variant: str = "atc", **kwargs) -> None:
        super().__init__(**kwargs)
        self.variant = Variant(variant).value
        self._half = np.empty_like(self.params) if self.compressed else None

    def round(self, sample: Sampler, t: int) -> np.ndarray:
        if self.compressed:
            return self._round_compressed(sample, t)
        losses = np.zeros(self.comm.n_peers)
        steps = self.local_steps
        if self.variant == "atc":
            for _ in range(steps):
                losses += self.local_step(sample)
            self.params = self.comm.mix(self.params, t)
        else:
            x, y = sample()
            step_losses, grad = self.gradient(self.params, x, y)
            losses += step_losses
            self.params = self.comm.mix(self.params, t)
            self.apply(self.params, grad)
            for _ in range(steps - 1):
                losses += self.local_step(sample)
        return losses / steps

    def _round_compressed(self, sample: Sampler, t: int) -> np.ndarray:
        x = self.params  # x_t, of which every neighbour holds an exact replica
        losses = np.zeros(self.comm.n_peers)
        inputs, labels = sample()
        step_losses, grad = self.gradient(x, inputs, labels)
        losses += step_losses
        self.params = half = self.comm.combine(x, t, out=self._half)
        self.apply(half, grad)
        for _ in range(self.local_steps - 1):
            losses += self.local_step(sample)
        self.params = x
        payload = self.compress(np.subtract(half, x, out=half), t)
        x += self.comm.exchange(self.compressor, payload, t)
        return losses / self.local_steps

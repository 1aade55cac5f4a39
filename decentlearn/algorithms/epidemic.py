"""Epidemic Learning (de Vos et al., NeurIPS 2023): D-PSGD with row-stochastic mixing, every peer
averaging its own model with the models that reached it (on an ``epidemic:S`` graph, from S
random senders each round)."""

from __future__ import annotations

from decentlearn.algorithms.base import register
from decentlearn.algorithms.dpsgd import DPSGD

__all__ = ["EpidemicLearning"]


@register("epidemic")
class EpidemicLearning(DPSGD):
    """Epidemic Learning: D-PSGD with row-stochastic mixing (see the module docstring)."""

    mixing = ("row", "doubly")

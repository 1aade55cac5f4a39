"""CoCoFL-style partial freezing (Pfeiffer, Rapp, Khalili and Henkel, "CoCoFL: Communication- and
Computation-Aware Federated Learning via Partial NN Freezing and Quantization"): constrained peers
freeze their first layers, which then run their forward pass in int8 and get no gradient, while
the layers above train in float32; every peer still trains and gossips.

A spec is ``FRACTION:K`` or tiers ``FRACTION:K,FRACTION:K,...``: a fraction of the peers freezes
the first K layers with parameters (``Model.param_layers``, in layout() order; a layer's bias
freezes with its weight). ``K = drop`` is the "dropping" baseline: those peers take no training
step at all (their data is lost) but keep gossiping. Which peers fall in which tier is drawn from
the run's seed: a random permutation of the peers, cut into consecutive tiers of
``round(cumulative fraction * n_peers)`` peers.

Compute and memory are counted per peer and local step by closed forms (``peer_costs``): the
multiply-accumulates (MACs) of the matrix products (Dense and Conv2d; ReLU, pooling and
GroupNorm are not counted), split into float32 and int8, the activations kept for backward and
the optimizer's momentum over the trained parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from decentlearn.nn.layers import Conv2d, Dense
from decentlearn.nn.model import Model

__all__ = ["DROP", "CocoflSpec", "assign", "parse", "peer_costs", "cost_summary"]

#: Tier value meaning "the peer does not train at all" (the dropping baseline).
DROP = -1


@dataclass(frozen=True)
class CocoflSpec:
    """Tiers of constrained peers: ``tiers[i] = (fraction of peers, layers frozen or DROP)``."""

    tiers: tuple[tuple[float, int], ...]

    def __post_init__(self) -> None:
        if not self.tiers:
            raise ValueError("cocofl needs at least one tier FRACTION:K")
        for frac, k in self.tiers:
            if not (isinstance(frac, float) and 0.0 <= frac <= 1.0):
                raise ValueError(f"cocofl fraction must be a number in [0, 1], got {frac!r}")
            if not isinstance(k, int) or (k < 1 and k != DROP):
                raise ValueError(f"cocofl layer count must be an int >= 1 or 'drop', got {k!r}")
        total = sum(f for f, _ in self.tiers)
        if total > 1.0 + 1e-12:
            raise ValueError(f"cocofl fractions must sum to at most 1, got {total:g}")

    def __str__(self) -> str:
        return ",".join(f"{f:g}:{'drop' if k == DROP else k}" for f, k in self.tiers)


def parse(spec: str) -> CocoflSpec:
    """Parses "0.5:2", "0.25:1,0.25:2" or "0.5:drop" (ValueError if malformed)."""
    if not isinstance(spec, str):
        raise TypeError(f"cocofl must be a str such as '0.5:2', got {type(spec).__name__}")
    tiers = []
    for part in spec.split(","):
        frac, sep, k = part.strip().partition(":")
        try:
            f = float(frac)
            n = DROP if k.strip() == "drop" else int(k)
        except ValueError:
            f, n, sep = math.nan, 0, ""
        if not sep or not math.isfinite(f):
            raise ValueError(f"cocofl must be FRACTION:LAYERS[,FRACTION:LAYERS...] with LAYERS an "
                             f"int or 'drop' (e.g. '0.5:2'), got {spec!r}")
        tiers.append((f, n))
    return CocoflSpec(tuple(tiers))


def assign(spec: CocoflSpec, n_peers: int, n_param_layers: int, seed: int) -> np.ndarray:
    """Layers frozen by each peer (n_peers,) int64: 0 for unconstrained peers, ``n_param_layers``
    for dropped ones. Raises ValueError if a tier would leave nothing to train."""
    for _, k in spec.tiers:
        if k != DROP and k >= n_param_layers:
            raise ValueError(f"cocofl layer count must be < {n_param_layers} (the model's layers "
                             f"with parameters) so that something still trains, got {k}")
    perm = np.random.default_rng(seed).permutation(n_peers)
    counts = np.zeros(n_peers, dtype=np.int64)
    start, cum = 0, 0.0
    for frac, k in spec.tiers:
        cum += frac
        stop = min(n_peers, round(cum * n_peers))
        counts[perm[start:stop]] = n_param_layers if k == DROP else k
        start = stop
    return counts


def peer_costs(model: Model, n_frozen: int, batch: int, momentum: bool = True) -> dict:
    """Per-sample-batch costs of one local step of a peer freezing ``n_frozen`` layers with
    parameters (``len(param_layers)``: a dropped peer, all zero).

    MACs: a Dense layer (in, out) costs B·in·out for the forward pass, as much again for dW and
    for dX; a Conv2d layer B·Ho·Wo·Cout·Cin·k² each. Frozen layers cost their forward pass only
    (in int8); trained ones forward, dW and dX, except the lowest trained layer, whose dX
    is never needed, counted as int8 for a layer of ``precision="int8"`` (all three products
    run in int8, see decentlearn.nn.lowp) and as float32 otherwise. Activation bytes: the float32
    inputs of the trained layers with parameters (B·prod(input shape)·4; an in-place ReLU's
    output is the next layer's input). Optimizer bytes: a float32 momentum per trained
    parameter (0 without momentum).
    """
    n_param = len(model.param_layers)
    names = model.param_layers
    macs_fp32 = macs_int8 = act = 0
    if n_frozen < n_param:
        first_trained = names[n_frozen]
        trained = False
        lowest = True
        for (name, layer), (shape_in, shape_out) in zip(model.layers, model.io_shapes):
            trained = trained or name == first_trained
            if isinstance(layer, Dense):
                m = batch * layer.in_features * layer.out_features
            elif isinstance(layer, Conv2d):
                m = batch * math.prod(shape_out) * layer.in_channels * layer.kernel_size ** 2
            else:
                m = 0
            if not trained:
                macs_int8 += m  # frozen Dense and Conv2d layers forward in int8
                continue
            if getattr(layer, "precision", "fp32") == "int8":
                macs_int8 += m * (2 if lowest else 3)  # all three products in int8
            else:
                macs_fp32 += m * (2 if lowest else 3)
            if name in names:
                act += batch * math.prod(shape_in) * 4
                lowest = False
    trained_params = model.dim - model.frozen_cut(n_frozen)
    return {"macs_fp32": macs_fp32, "macs_int8": macs_int8, "macs": macs_fp32 + macs_int8,
            "activation_bytes": act,
            "optimizer_state_bytes": 4 * trained_params if momentum else 0,
            "trained_params": trained_params}


def cost_summary(model: Model, counts: np.ndarray, batch: int, local_steps: int,
                 momentum: bool = True) -> dict:
    """Mean per-round costs of the unconstrained and the constrained peers (``counts`` from
    ``assign``), and the constrained peers' MACs relative to a full peer."""
    per_k = {int(k): peer_costs(model, int(k), batch, momentum) for k in np.unique(counts)}
    full = peer_costs(model, 0, batch, momentum)

    def mean(group: np.ndarray, key: str) -> float | None:
        if not group.size:
            return None
        return float(np.mean([per_k[int(k)][key] for k in group]))

    out: dict = {"full_peer": {k: v * local_steps if k.startswith("macs") else v
                               for k, v in full.items()}}
    for label, group in (("unconstrained", counts[counts == 0]),
                         ("constrained", counts[counts > 0])):
        out[label] = {
            "peers": int(group.size),
            "compute_macs_per_round": _scaled(mean(group, "macs"), local_steps),
            "int8_macs_per_round": _scaled(mean(group, "macs_int8"), local_steps),
            "activation_bytes": mean(group, "activation_bytes"),
            "optimizer_state_bytes": mean(group, "optimizer_state_bytes"),
        }
        m = out[label]["compute_macs_per_round"]
        # None also for models whose MACs are not counted (torch models: macs 0)
        out[label]["compute_relative_to_full"] = (None if m is None or not full["macs"]
                                                  else m / (full["macs"] * local_steps))
    return out


def _scaled(value: float | None, factor: int) -> float | None:
    return None if value is None else value * factor

"""Batch normalisation batched over peers, and the BatchNorm variant of the CNN (``cnn-bn``).

Hsieh et al. ("The Non-IID Data Quagmire of Decentralized Machine Learning", ICML 2020) show that
BatchNorm suffers most under label skew: each peer normalises with the statistics of minibatches
drawn from its own few classes, while the model is evaluated on all classes. GroupNorm
(``GroupNorm``, ``cnn:gn``) normalises each sample on its own and recovers most of the loss.

Running statistics are per-peer state kept IN the peer's parameter row (entries ``running_mean`` and
``running_var`` of the layer, after its ``weight`` and ``bias``): training forward passes update
them in place (exponential average with ``momentum``, unbiased batch variance, as PyTorch), their
gradient is always zero, and evaluation (``train=False``) normalises with them. Because they live in
the row, every algorithm exchanges and averages them exactly like the weights (the "averaged"
choice, as FedAvg does when it averages a whole ``state_dict``); the average model's statistics are
the peers' average. Use weight decay 0 with this layer (decay would shrink the statistics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from decentlearn.nn.layers import Conv2d, Layer
from decentlearn.nn.zoo import make_model, register_model


@dataclass(frozen=True)
class BatchNorm2d(Layer):
    """BatchNorm over (batch, H, W) per channel and peer, with per-channel affine and running
    statistics in the parameter row (see the module docstring)."""

    num_channels: int
    momentum: float = 0.1
    eps: float = 1e-5
    kind: ClassVar[str] = "bn"
    spatial: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if isinstance(self.num_channels, bool) or not isinstance(self.num_channels, int) \
                or self.num_channels < 1:
            raise ValueError(f"num_channels must be an int >= 1, got {self.num_channels!r}")
        if isinstance(self.momentum, bool) or not isinstance(self.momentum, (int, float)) \
                or not 0 < self.momentum <= 1:
            raise ValueError(f"momentum must be a number in (0, 1], got {self.momentum!r}")
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or self.eps <= 0:
            raise ValueError(f"eps must be a float > 0, got {self.eps!r}")

    def param_shapes(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        c = (self.num_channels,)
        return (("weight", c), ("bias", c), ("running_mean", c), ("running_var", c))

    def init_params(self, rng: np.random.Generator) -> list[np.ndarray]:
        c = self.num_channels
        return [np.ones(c), np.zeros(c), np.zeros(c), np.ones(c)]

    def out_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(in_shape) != 3 or in_shape[0] != self.num_channels:
            raise ValueError(
                f"BatchNorm2d expects inputs of shape ({self.num_channels}, H, W), got {in_shape}")
        return in_shape

    def forward(self, w, x: np.ndarray, train: bool, scratch) -> tuple[np.ndarray, Any]:
        gamma, beta, running_mean, running_var = w
        n_peers, c, b, h, wd = x.shape
        m = b * h * wd
        xc = scratch.empty("xc", (n_peers, c, m), x.dtype)
        np.copyto(xc, np.reshape(x, (n_peers, c, m)))
        if train:
            mean = np.einsum("pci->pc", xc) / m
            xc -= mean[:, :, None]
            var = np.einsum("pci,pci->pc", xc, xc) / m
            if running_mean.flags.writeable:
                mom = np.float32(self.momentum)
                unbiased = var * (m / max(m - 1, 1))
                running_mean *= 1 - mom
                running_mean += mom * mean
                running_var *= 1 - mom
                running_var += mom * unbiased
        else:
            xc -= running_mean[:, :, None]
            var = running_var.copy()
        rstd = 1.0 / np.sqrt(var + np.float32(self.eps))  # (P, C)
        y = scratch.empty("y", xc.shape, x.dtype)
        np.multiply(xc, (gamma * rstd)[:, :, None], out=y)
        y += beta[:, :, None]
        if train:
            xc *= rstd[:, :, None]  # xhat
        return np.reshape(y, x.shape), ((xc, rstd, x.shape) if train else None)

    def backward(self, w, g, dy: np.ndarray, ctx: Any, need_dx: bool, scratch):
        gamma = w[0]
        g_gamma, g_beta, g_mean, g_var = g
        xhat, rstd, shape = ctx
        n_peers, c, m = xhat.shape
        dyv = np.reshape(dy, (n_peers, c, m))
        s_dy = np.einsum("pci->pc", dyv)
        s_dyx = np.einsum("pci,pci->pc", dyv, xhat)
        g_beta[...] = s_dy
        g_gamma[...] = s_dyx
        g_mean[...] = 0
        g_var[...] = 0
        if not need_dx:
            return None
        # dx = gamma rstd / m · (m dy - sum(dy) - xhat sum(dy xhat))
        dx = scratch.empty("dx", xhat.shape, dy.dtype)
        np.multiply(xhat, (s_dyx / m)[:, :, None], out=dx)
        dx += (s_dy / m)[:, :, None]
        np.subtract(dyv, dx, out=dx)
        dx *= (gamma * rstd)[:, :, None]
        return np.reshape(dx, shape)


@register_model("cnn-bn")
def _build_cnn_bn(arg: str | None, input_shape: tuple[int, ...], n_classes: int) -> list:
    """The ``cnn`` model (LeNet-5 style) with a BatchNorm2d after each convolution."""
    if arg is not None:
        raise ValueError(f"spec 'cnn-bn' takes no argument, got 'cnn-bn:{arg}'")
    layers = make_model("cnn", input_shape, n_classes).layers
    out: list = []
    for _, layer in layers:
        out.append(layer)
        if isinstance(layer, Conv2d):
            out.append(BatchNorm2d(layer.out_channels))
    return out

"""The model registry and the registered model builders (``make_model("mlp:256,128", ...)``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from decentlearn.nn.lowp import check_precision
from decentlearn.nn.layers import (
    Conv2d,
    Dense,
    Flatten,
    GroupNorm,
    Layer,
    MaxPool2d,
    ReLU,
    _check_positive_int,
)
from decentlearn.nn.model import Model
from decentlearn.registry import Registry


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

ModelBuilder = Callable[[str | None, tuple[int, ...], int], list[Layer]]
_MODELS: Registry[ModelBuilder] = Registry("model")


def register_model(name: str) -> Callable[[ModelBuilder], ModelBuilder]:
    """Decorator registering ``builder(arg, input_shape, n_classes) -> layers`` under ``name``."""
    return _MODELS.register(name)


def available_models() -> tuple[str, ...]:
    return tuple(_MODELS.available())


def make_model(
    spec: str,
    input_shape: tuple[int, ...],
    n_classes: int,
    precision: str = "fp32",
    seed: int = 0,
) -> Model:
    """Build a model from ``"name"`` or ``"name:arg"``, e.g. ``"mlp:256,128"`` or ``"cnn:gn"``;
    ``"torch:..."`` builds a decentlearn.torch.TorchModel (docs/torch.md).

    ``precision="int8"`` makes every Dense and Conv2d layer compute in int8 (decentlearn.nn.lowp)
    with stochastic gradient rounding seeded by ``seed``."""
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a str, got {type(spec).__name__}")
    if spec.startswith("torch:"):  # a torch.nn.Module (decentlearn.torch; needs the torch extra)
        from decentlearn.torch import make_torch_model
        return make_torch_model(spec[len("torch:"):], input_shape, n_classes, precision, seed)
    name, sep, arg = spec.partition(":")
    builder = _MODELS.get(name, spec)  # unknown: ValueError naming the closest model
    if not isinstance(input_shape, tuple):
        raise TypeError(f"input_shape must be a tuple of ints, got {input_shape!r}")
    precision = check_precision(precision)
    layers = builder(arg if sep else None, input_shape, n_classes)
    if precision != "fp32":
        layers = [
            dataclasses.replace(ly, precision=precision) if isinstance(ly, (Dense, Conv2d)) else ly
            for ly in layers
        ]
    return Model(layers, input_shape, n_classes, spec=spec, seed=seed)


def _flat_features(input_shape: tuple[int, ...]) -> int:
    for s in input_shape:
        _check_positive_int(s, "input_shape entries")
    return math.prod(input_shape)


@register_model("linear")
def _build_linear(arg: str | None, input_shape: tuple[int, ...], n_classes: int) -> list[Layer]:
    if arg is not None:
        raise ValueError(f"spec 'linear' takes no argument, got 'linear:{arg}'")
    return [Dense(_flat_features(input_shape), n_classes, init="torch_uniform")]


@register_model("mlp")
def _build_mlp(arg: str | None, input_shape: tuple[int, ...], n_classes: int) -> list[Layer]:
    hidden = [128]
    if arg is not None:
        try:
            hidden = [int(h) for h in arg.split(",")]
        except ValueError:
            hidden = []
        if not hidden or min(hidden) <= 0:
            raise ValueError(
                f"spec 'mlp:<sizes>' needs comma-separated positive hidden sizes such as "
                f"'mlp:256,128', got 'mlp:{arg}'"
            )
    layers: list[Layer] = []
    fan_in = _flat_features(input_shape)
    for h in hidden:
        layers += [Dense(fan_in, h), ReLU()]
        fan_in = h
    layers.append(Dense(fan_in, n_classes, init="torch_uniform"))
    return layers


# GroupNorm groups for the cnn:gn option: 2 groups of 3 channels after conv1, 4 of 4 after conv2.
_CNN_GN_GROUPS = {6: 2, 16: 4}


@register_model("cnn")
def _build_cnn(arg: str | None, input_shape: tuple[int, ...], n_classes: int) -> list[Layer]:
    if arg not in (None, "gn"):
        raise ValueError(f"spec 'cnn' takes no argument or 'gn', got 'cnn:{arg}'")
    if len(input_shape) != 3:
        raise ValueError(f"spec 'cnn' needs input_shape (C, H, W), got {input_shape}")
    c, h, w = (_check_positive_int(s, "input_shape entries") for s in input_shape)
    if h % 4 or w % 4:
        raise ValueError(f"spec 'cnn' needs H and W divisible by 4, got input_shape {input_shape}")
    layers: list[Layer] = []
    for cin, cout in ((c, 6), (6, 16)):
        layers.append(Conv2d(cin, cout, kernel_size=5, padding=2))
        if arg == "gn":
            layers.append(GroupNorm(_CNN_GN_GROUPS[cout], cout))
        # Pool before ReLU: max and ReLU commute, so this is the same function and gradient
        # (ties only among non-positive values, whose gradient ReLU zeroes) at 1/4 the ReLU work.
        layers += [MaxPool2d(), ReLU()]
    layers += [
        Flatten(),
        Dense(16 * (h // 4) * (w // 4), 120),
        ReLU(),
        Dense(120, 84),
        ReLU(),
        Dense(84, n_classes, init="torch_uniform"),
    ]
    return layers

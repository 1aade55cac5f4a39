"""The torch model zoo behind ``--model torch:NAME[:ARG]``: ResNet-20 (CIFAR-style), a small
VGG-11, GN-LeNet (the D-Cliques paper's CIFAR model), a char-level LSTM, and torch twins of
decentlearn's native ``mlp`` and ``cnn`` (same architecture, same parameter order, so a native
parameter row is a valid torch row; tests/test_torch.py checks both give the same losses).

Every builder is ``builder(arg, input_shape, n_classes) -> torch.nn.Module``; ``make_module``
also accepts ``package.module:factory`` for a user's own factory, called the same way.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable

import torch
from torch import nn

from decentlearn.registry import Registry

ModuleBuilder = Callable[[str | None, tuple[int, ...], int], nn.Module]
_MODULES: Registry[ModuleBuilder] = Registry("torch model")


def register_module(name: str) -> Callable[[ModuleBuilder], ModuleBuilder]:
    """Decorator registering ``builder(arg, input_shape, n_classes) -> nn.Module`` as
    ``torch:<name>``."""
    return _MODULES.register(name)


def available_modules() -> tuple[str, ...]:
    return tuple(_MODULES.available())


def make_module(spec: str, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """The module of ``spec`` (what follows ``torch:``): ``NAME``, ``NAME:ARG`` or
    ``package.module:factory`` (a dotted module path, imported, whose ``factory(None,
    input_shape, n_classes)`` returns the module)."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"model spec after 'torch:' must be a name such as 'resnet20' or "
                         f"'package.module:factory', got {spec!r}")
    name, sep, arg = spec.partition(":")
    if name not in _MODULES and ("." in name or (sep and arg.isidentifier())):
        if not sep or not arg.isidentifier():
            raise ValueError(f"model 'torch:{spec}': a user factory is named "
                             f"'torch:package.module:factory', got no factory name after ':'")
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            raise ValueError(f"model 'torch:{spec}': cannot import module {name!r} ({e})") from None
        factory = getattr(mod, arg, None)
        if not callable(factory):
            raise ValueError(f"model 'torch:{spec}': module {name!r} has no callable {arg!r}")
        module = factory(None, input_shape, n_classes)
        if not isinstance(module, nn.Module):
            raise TypeError(f"model 'torch:{spec}': {name}.{arg}(None, input_shape, n_classes) "
                            f"must return a torch.nn.Module, got {type(module).__name__}")
        return module
    builder = _MODULES.get(name, f"torch:{spec}")
    return builder(arg if sep else None, input_shape, n_classes)


def _no_arg(name: str, arg: str | None) -> None:
    if arg is not None:
        raise ValueError(f"model 'torch:{name}' takes no argument, got 'torch:{name}:{arg}'")


def _image_shape(name: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(input_shape) != 3:
        raise ValueError(f"model 'torch:{name}' needs image inputs (C, H, W), got {input_shape}")
    return input_shape  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# Twins of the native models (same layers, same parameter order and shapes)


class DenseInOut(nn.Module):
    """``nn.Linear`` with its weight stored (in, out), as decentlearn's native Dense stores it,
    so that a native parameter row is a valid row of the twin; y = x W + b. Initialised like
    ``nn.Linear`` (uniform in +-1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.weight.shape[0])
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias


class _NativeCNN(nn.Module):
    """decentlearn's ``cnn``: conv5x5(6) - pool - relu - conv5x5(16) - pool - relu - 120 - 84."""

    def __init__(self, c: int, h: int, w: int, n_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5, padding=2)
        self.fc1 = DenseInOut(16 * (h // 4) * (w // 4), 120)
        self.fc2 = DenseInOut(120, 84)
        self.fc3 = DenseInOut(84, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(nn.functional.max_pool2d(self.conv1(x), 2))
        x = torch.relu(nn.functional.max_pool2d(self.conv2(x), 2))
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc3(torch.relu(self.fc2(x)))


@register_module("mlp")
def _build_mlp(arg: str | None, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    try:
        hidden = [128] if arg is None else [int(h) for h in arg.split(",")]
    except ValueError:
        hidden = []
    if not hidden or min(hidden) <= 0:
        raise ValueError(f"model 'torch:mlp:<sizes>' needs comma-separated positive hidden "
                         f"sizes such as 'torch:mlp:256,128', got 'torch:mlp:{arg}'")
    layers: list[nn.Module] = [nn.Flatten()]
    fan_in = math.prod(input_shape)
    for h in hidden:
        layers += [DenseInOut(fan_in, h), nn.ReLU()]
        fan_in = h
    layers.append(DenseInOut(fan_in, n_classes))
    return nn.Sequential(*layers)


@register_module("cnn")
def _build_cnn(arg: str | None, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    _no_arg("cnn", arg)
    c, h, w = _image_shape("cnn", input_shape)
    if h % 4 or w % 4:
        raise ValueError(f"model 'torch:cnn' needs H and W divisible by 4, got {input_shape}")
    return _NativeCNN(c, h, w, n_classes)


# --------------------------------------------------------------------------------------------
# ResNet-20 (He et al. 2016, the CIFAR variant: 3 stages of 3 basic blocks, 16/32/64 channels)


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, norm: Callable[[int], nn.Module]) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = norm(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:  # option B: 1x1 projection
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), norm(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """ResNet-20 for 32x32 (or any size) images; ``norm`` is "bn" (BatchNorm, default) or "gn"
    (GroupNorm with 2 groups per stage width's 8 channels, Hsieh et al.'s non-IID fix)."""

    def __init__(self, in_channels: int, n_classes: int, norm: str = "bn") -> None:
        super().__init__()
        make_norm: Callable[[int], nn.Module] = (
            nn.BatchNorm2d if norm == "bn" else (lambda c: nn.GroupNorm(c // 8, c)))
        self.conv = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.bn = make_norm(16)
        blocks: list[nn.Module] = []
        cin = 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for b in range(3):
                blocks.append(_BasicBlock(cin, cout, stride if b == 0 else 1, make_norm))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        x = self.blocks(x)
        return self.fc(x.mean(dim=(-2, -1)))


@register_module("resnet20")
def _build_resnet20(arg: str | None, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    if arg not in (None, "bn", "gn"):
        raise ValueError(f"model 'torch:resnet20' takes no argument, 'bn' or 'gn', got "
                         f"'torch:resnet20:{arg}'")
    c, _, _ = _image_shape("resnet20", input_shape)
    return ResNet20(c, n_classes, arg or "bn")


# --------------------------------------------------------------------------------------------
# VGG-11, small: VGG's 8 conv layers at 1/4 width (16..128 channels), BatchNorm, one 128-unit
# hidden layer; pools stop when the image is 1x1, so 28x28 inputs work too.


@register_module("vgg11")
def _build_vgg11(arg: str | None, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    _no_arg("vgg11", arg)
    c, h, w = _image_shape("vgg11", input_shape)
    cfg = [16, "M", 32, "M", 64, 64, "M", 128, 128, "M", 128, 128, "M"]
    layers: list[nn.Module] = []
    for v in cfg:
        if v == "M":
            if min(h, w) >= 2:
                layers.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
            continue
        layers += [nn.Conv2d(c, v, 3, padding=1, bias=False), nn.BatchNorm2d(v), nn.ReLU()]
        c = v
    layers += [nn.Flatten(), nn.Linear(c * h * w, 128), nn.ReLU(), nn.Linear(128, n_classes)]
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------------------------
# GN-LeNet (Hsieh et al. 2020; D-Cliques' CIFAR-10 model): 3 x (conv5x5(32/32/64) - GroupNorm(2)
# - ReLU - maxpool 3/2), then a linear layer.


@register_module("gn-lenet")
def _build_gn_lenet(arg: str | None, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    _no_arg("gn-lenet", arg)
    c, h, w = _image_shape("gn-lenet", input_shape)
    layers: list[nn.Module] = []
    for cout in (32, 32, 64):
        layers += [nn.Conv2d(c, cout, 5, padding=2), nn.GroupNorm(2, cout), nn.ReLU(),
                   nn.MaxPool2d(3, 2, padding=1)]
        c = cout
        h, w = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    layers += [nn.Flatten(), nn.Linear(c * h * w, n_classes)]
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------------------------
# Char-level LSTM (LEAF's Shakespeare model: embedding 8, 2 x LSTM 256, next-character logits)


class CharLSTM(nn.Module):
    """Next-character prediction: input (B, T) character ids (stored as floats, as decentlearn's
    datasets are float32), output the logits of the character after the last one.

    The LSTM cell is written out (gates = x W_ih^T + h W_hh^T + b, PyTorch's gate order i, f, g,
    o): ``torch.func.vmap`` has no batching rule for the fused ``aten::lstm``, and would fall back
    to a per-peer loop."""

    def __init__(self, vocab: int, embed: int = 8, hidden: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.hidden = hidden
        self.embed = nn.Embedding(vocab, embed)
        self.cells = nn.ModuleList(
            nn.ModuleDict({"ih": nn.Linear(embed if i == 0 else hidden, 4 * hidden),
                           "hh": nn.Linear(hidden, 4 * hidden, bias=False)})
            for i in range(layers))
        self.fc = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = self.embed(x.long())  # (B, T, E)
        for cell in self.cells:
            pre = cell["ih"](seq)  # all time steps' input part at once: (B, T, 4H)
            h = seq.new_zeros(seq.shape[0], self.hidden)
            c = torch.zeros_like(h)
            outs = []
            for t in range(seq.shape[1]):
                i, f, g, o = (pre[:, t] + cell["hh"](h)).chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outs.append(h)
            seq = torch.stack(outs, dim=1)
        return self.fc(seq[:, -1])


@register_module("char-lstm")
def _build_char_lstm(arg: str | None, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    hidden = 256
    if arg is not None:
        if not arg.isdigit() or int(arg) < 1:
            raise ValueError(f"model 'torch:char-lstm[:HIDDEN]' needs a positive hidden size, "
                             f"got 'torch:char-lstm:{arg}'")
        hidden = int(arg)
    if len(input_shape) != 1:
        raise ValueError(f"model 'torch:char-lstm' needs inputs of shape (sequence length,), got "
                         f"{input_shape}")
    return CharLSTM(n_classes, hidden=hidden)

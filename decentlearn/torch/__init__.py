"""Bring your own PyTorch model: ``TorchModel`` puts any ``torch.nn.Module`` behind decentlearn's
model interface, trained by every peer at once on rows of the shared ``(n_peers, dim)`` float32
array (decentlearn.torch.adapter); ``decentlearn.torch.models`` is the zoo behind
``--model torch:NAME`` (resnet20, vgg11, gn-lenet, char-lstm, and twins of the native mlp and cnn)
and ``--model torch:package.module:factory``; ``decentlearn.torch.device`` says where the passes
may run (``--device cpu | cuda | cuda:N``, the CUDA report of ``decentlearn info``). See
docs/torch.md.

Needs the ``torch`` extra (``pip install "decentlearn[torch]"``); the rest of decentlearn never
imports torch. This package is ``decentlearn.torch``: its modules import PyTorch as ``torch``
(absolute imports), never this package.
"""

from __future__ import annotations

INSTALL_HINT = 'pip install "decentlearn[torch]"'


class TorchMissingError(ModuleNotFoundError):
    """PyTorch is not installed; the message says how to install it, in one line. A
    ModuleNotFoundError whose ``name`` is ``"torch"``, as the plain import error would be."""


def require_torch() -> None:
    """Raises TorchMissingError (one line, with the install command) when torch is missing."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise TorchMissingError(f"torch models need PyTorch, which is not installed ({e}); "
                                f"install it with: {INSTALL_HINT}", name="torch") from None


require_torch()

from decentlearn.torch.adapter import TorchModel  # noqa: E402
from decentlearn.torch.models import (  # noqa: E402
    available_modules,
    make_module,
    register_module,
)


def make_torch_model(spec: str, input_shape: tuple[int, ...], n_classes: int,
                     precision: str = "fp32", seed: int = 0) -> TorchModel:
    """The TorchModel of ``spec`` (what follows ``torch:``, e.g. ``"resnet20"`` or
    ``"mypkg.models:build"``). ``precision`` must be "fp32": int8 layers are native only."""
    if precision != "fp32":
        raise ValueError(f"precision={precision!r} is for decentlearn's native models; torch "
                         "models compute in float32: use precision 'fp32'")
    module = make_module(spec, input_shape, n_classes)
    return TorchModel(module, input_shape, n_classes, spec=f"torch:{spec}", seed=seed)


__all__ = ["INSTALL_HINT", "TorchMissingError", "TorchModel", "available_modules",
           "make_module", "make_torch_model", "register_module", "require_torch"]

"""Neural-network models evaluated for all peers at once. Every peer's parameters are one row of a
C-contiguous ``(n_peers, dim)`` array; each layer reads its weights as views into that array and
writes its gradients into views of a gradient array with the same layout, so there is no per-peer
Python loop and no per-call concatenation. Forward and backward passes are stacked NumPy ops
(``np.matmul`` on 3-D stacks calls BLAS gemm once per peer), convolutions are im2col/col2im batched
over peers, and activations between spatial layers are kept channel-major, ``(P, C, B, H, W)``, so
a convolution is a ``(Cout, K) @ (K, pixels)`` product per peer. Inputs shared by all peers
(evaluation) are broadcast, never copied per peer, and large intermediates live in per-thread
scratch buffers reused from call to call. Models are built from a spec string through a registry
(``make_model("mlp:256,128", (1, 28, 28), 10)``); docs/models.md gives layouts and shapes.

The package: ``layers`` (Scratch, Layer and the layers), ``model`` (Model and its loss),
``zoo`` (the model registry and the builders of ``linear``, ``mlp`` and ``cnn``), ``batchnorm``
(BatchNorm2d and the ``cnn-bn`` model), ``lowp`` (the int8 arithmetic of ``precision="int8"``),
``cocofl`` (CoCoFL's partial freezing and its cost model); the argument checks every model shares
(decentlearn.torch's included) are in ``decentlearn.checks``.
"""

# Every module of the package, imported here so that the model registry is complete whatever is
# imported first (batchnorm registers "cnn-bn").
from decentlearn.nn import batchnorm, cocofl, layers, lowp, model, zoo  # noqa: F401
from decentlearn.nn.batchnorm import BatchNorm2d
from decentlearn.nn.layers import (
    INITIALIZERS,
    Conv2d,
    Dense,
    Flatten,
    GroupNorm,
    Layer,
    MaxPool2d,
    ReLU,
    Scratch,
)
from decentlearn.nn.model import Model
from decentlearn.nn.zoo import available_models, make_model, register_model

__all__ = [
    "INITIALIZERS",
    "BatchNorm2d",
    "Conv2d",
    "Dense",
    "Flatten",
    "GroupNorm",
    "Layer",
    "MaxPool2d",
    "Model",
    "ReLU",
    "Scratch",
    "available_models",
    "make_model",
    "register_model",
]

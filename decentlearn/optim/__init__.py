"""Optimizers that update every peer's parameters at once. The state of an optimizer for P peers is
one ``(P, dim)`` array per moment (the momentum buffer), so it can be averaged or reset by the
simulator like the parameters themselves. For float32 one ``step`` is one C kernel over the whole
matrix (``ops.sgd_step``, ``ops.adam_step``, ``ops.lamb_step``, ``ops.lars_step``: rows or column
blocks split over threads, frozen prefixes honoured, bit-identical to their NumPy twins in
decentlearn/_reference/optim.py for any thread count); float64 runs SGD's in-place whole-matrix
NumPy operations and the other optimizers' twins.
``SGD`` follows PyTorch's ``torch.optim.SGD`` (dampening 0): ``g = grad + wd * params``;
``buf = momentum * buf + g``; ``g = g + momentum * buf`` with Nesterov, else ``g = buf``;
``params -= lr * g``.

Beside SGD, ``Adam``/``AdamW`` (Kingma & Ba; Loshchilov & Hutter), ``LARS`` (You et al. 2017) and
``LAMB`` (You et al. 2019), the optimizers of large-batch training, update every peer's row at
once; their state is per peer — ``(P, D)`` moment arrays and a
``(P,)`` step count (bias corrections are per row, so peers that step at different times under
asynchrony or churn stay exact). LARS and LAMB scale each layer's update by a trust ratio computed
per peer and per layer (``segments``: the parameter tensors of the model's layout). ``make``
builds any of them from an ``OptimizerConfig``; ``LRSchedule`` gives the learning rate of every
round (linear scaling, warmup, step or cosine decay). docs/algorithms.md has the formulas.

The package: ``base`` (the Optimizer base class, OptimizerConfig, the registry and ``make``), one
module per optimizer (``sgd``, ``adam`` for adam and adamw, ``lars``, ``lamb``), ``adaptive`` (what
Adam, LARS and LAMB share) and ``schedule`` (LRSchedule).
"""

# Every optimizer module, imported here so that the registry is complete whatever is imported
# first.
from decentlearn.optim import adam, adaptive, base, lamb, lars, schedule, sgd  # noqa: F401
from decentlearn.optim.adam import Adam
from decentlearn.optim.base import Optimizer, OptimizerConfig, available, make, register
from decentlearn.optim.lamb import LAMB
from decentlearn.optim.lars import LARS
from decentlearn.optim.schedule import LRSchedule
from decentlearn.optim.sgd import SGD, SGDConfig

#: The registered optimizer names (``OptimizerConfig.name``, ``--optimizer``), sorted.
OPTIMIZERS = tuple(available())

__all__ = ["OPTIMIZERS", "SGD", "Adam", "LAMB", "LARS", "LRSchedule", "Optimizer",
           "OptimizerConfig", "SGDConfig", "available", "make", "register"]

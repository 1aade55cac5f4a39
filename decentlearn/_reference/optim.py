"""NumPy reference (the spec) of the SGD step in csrc/optim.c, with the signature of
decentlearn.ops.optim.sgd_step. It uses the kernel's float32 operations in its order, so it is
bit-identical.
"""

from __future__ import annotations

import numpy as np


def sgd_step(params, grad, buf, lr, momentum=0.0, weight_decay=0.0, nesterov=False, frozen=None,
             n_threads=None) -> None:
    f32 = np.float32
    lr, mu, wd = f32(lr), f32(momentum), f32(weight_decay)
    p0 = params.copy()
    g = grad.astype(f32, copy=True)
    if wd != 0:
        g = g + wd * params
    if mu != 0:
        m = mu * buf + g
        buf[...] = m
        u = g + mu * m if nesterov else m
    else:
        u = g
    params -= lr * u
    if frozen is not None:
        for r, cut in enumerate(np.asarray(frozen)):
            params[r, :cut] = p0[r, :cut]
            if mu != 0:
                buf[r, :cut] = 0

"""NumPy references (the spec) of the softmax cross-entropy kernels in csrc/loss.c, with the
signatures of decentlearn.ops.softmax_xent / exp_f32.

exp(x) for float32 x is computed in float64: n = round(x / ln 2) (the 1.5 * 2**52 shifter),
r = x - n ln 2, a degree-8 Taylor polynomial of exp(r) by Horner's rule, times 2**n built from the
shifter's low bits, then rounded to float32; x is first clamped to [-104, 89]. Each step is one
NumPy operation (one rounding), as the C kernel's, so the two agree bit for bit. The loss per peer
is (sum over the batch, in order, of log(float64(s)) - float64(z_y)) / B, where z are the
max-shifted logits and s the float32 sum of exp(z) in class order; the gradient is
exp(z) * float32(1 / (s B)), minus float32(1 / B) at the label.
"""

from __future__ import annotations

import numpy as np

_SHIFTER = float.fromhex("0x1.8p52")
_LOG2E = float.fromhex("0x1.71547652b82fep0")
_LN2 = float.fromhex("0x1.62e42fefa39efp-1")
_COEFFS = (1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5,
           1.0, 1.0)


def exp_f32(x, out=None, n_threads=None) -> np.ndarray:
    """exp of float32 x, rounded to float32 (a new array when out is None). Returns out."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        xd = x.astype(np.float64)
        xd = np.where(xd < -104.0, -104.0, xd)
        xd = np.where(xd > 89.0, 89.0, xd)
        t = xd * _LOG2E + _SHIFTER
        n = t - _SHIFTER
        r = xd - n * _LN2
        p = np.full_like(r, _COEFFS[0])
        for c in _COEFFS[1:]:
            p = p * r + c
        scale = ((t.view(np.uint64) + np.uint64(1023)) << np.uint64(52)).view(np.float64)
        y = (p * scale).astype(np.float32)
    if out is None:
        return y
    out[...] = y
    return out


def softmax_xent(logits, labels, loss=None, want_grad=True, n_threads=None,
                 correct=None) -> np.ndarray:
    """Mean cross-entropy per peer of logits (P, B, C) float32 against labels (P, B), float64;
    logits become the gradient (want_grad) or exp(z - max z); correct (P,) int64 or None gets
    the rows whose np.argmax is the label. Returns loss."""
    n_peers, batch, n_classes = logits.shape
    labels = np.asarray(labels, dtype=np.int64)
    if labels.ndim == 2 and labels.shape[0] == 1:
        labels = np.broadcast_to(labels, (n_peers, batch))
    if labels.shape != (n_peers, batch):
        raise ValueError(f"labels must have shape {(n_peers, batch)}, got {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(f"labels must be class indices in [0, {n_classes})")
    if correct is not None:
        correct[...] = np.count_nonzero(np.argmax(logits, axis=-1) == labels, axis=1)
    with np.errstate(all="ignore"):  # NaN and infinity propagate, as in the kernel
        z = logits
        m = z[..., 0].copy()
        for c in range(1, n_classes):
            np.maximum(m, z[..., c], out=m)
        z -= m[..., None]
        z_y = np.take_along_axis(z, labels[..., None], axis=-1)[..., 0]
        exp_f32(z, out=z)
        s = z[..., 0].copy()
        for c in range(1, n_classes):
            s += z[..., c]
        d = np.log(s.astype(np.float64)) - z_y.astype(np.float64)
        acc = np.zeros(n_peers)
        for b in range(batch):
            acc += d[:, b]
        if loss is None:
            loss = np.empty(n_peers)
        loss[...] = acc / batch
        if want_grad:
            inv = np.float32(1.0) / (s * np.float32(batch))
            z *= inv[..., None]
            rows = np.arange(n_peers)[:, None]
            cols = np.arange(batch)[None, :]
            z[rows, cols, labels] -= np.float32(1.0 / batch)
    return loss

"""The Synthetic(alpha, beta) data of FedProx (Li et al. 2020, "Federated Optimization in
Heterogeneous Networks"; also in LEAF), one device per peer.

For device k: u_k ~ N(0, alpha), W_k ~ N(u_k, 1) (10 x 60), b_k ~ N(u_k, 1) (10); B_k ~ N(0, beta),
v_k ~ N(B_k, 1) (60); x ~ N(v_k, Sigma) with Sigma diagonal, Sigma_jj = j^-1.2; y = argmax(W_k x + b_k)
(the argmax of the softmax). As in the FedProx generator, the second argument of N is the standard
deviation (numpy.random.normal). alpha controls how much the models differ between devices, beta
how much their inputs differ. The IID variant shares one W, b ~ N(0, 1) and draws every x from
N(0, Sigma). Samples per device: floor(lognormal(4, 2)) + 50 as in FedProx, clipped to
[min_samples, max_samples]; each device's samples are split 80/20 into train and test.
"""

from __future__ import annotations

import pathlib

import numpy as np

from decentlearn.data._spec import check_int, parse_float
from decentlearn.data.datasets import Dataset, register_dataset

__all__ = ["SYNTHETIC_CLASSES", "SYNTHETIC_DIM", "make_synthetic"]

SYNTHETIC_DIM = 60
SYNTHETIC_CLASSES = 10
_FORMS = "synthetic:ALPHA:BETA (ALPHA, BETA >= 0, e.g. synthetic:1:1) or synthetic:iid"


def make_synthetic(
    n_devices: int,
    alpha: float = 1.0,
    beta: float = 1.0,
    *,
    iid: bool = False,
    seed: int = 0,
    min_samples: int = 50,
    max_samples: int = 2000,
    test_fraction: float = 0.2,
) -> Dataset:
    """Generate FedProx Synthetic(alpha, beta) (or the IID variant) for ``n_devices`` devices.

    The training samples are stored device after device; ``groups`` gives each one's device.
    The test set holds each device's held-out ``test_fraction`` (rounded, at least 1 sample).
    """
    n_devices = check_int(n_devices, "n_devices", minimum=1)
    seed = check_int(seed, "seed", minimum=0)
    min_samples = check_int(min_samples, "min_samples", minimum=2)
    max_samples = check_int(max_samples, "max_samples", minimum=min_samples)
    for argname, value in (("alpha", alpha), ("beta", beta)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not np.isfinite(value)
            or value < 0
        ):
            raise ValueError(f"{argname} must be a finite number >= 0, got {value!r}")
    if not isinstance(iid, bool):
        raise TypeError(f"iid must be a bool, got {type(iid).__name__}")
    if not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")

    rng = np.random.default_rng(seed)
    d, c = SYNTHETIC_DIM, SYNTHETIC_CLASSES
    sizes = np.clip(rng.lognormal(4.0, 2.0, n_devices).astype(np.int64) + 50, min_samples, max_samples)
    sd_x = np.arange(1, d + 1, dtype=np.float64) ** -0.6  # sqrt of Sigma_jj = j^-1.2
    if iid:
        w_shared = rng.normal(0.0, 1.0, (c, d))
        b_shared = rng.normal(0.0, 1.0, c)
        mean_x = np.zeros((n_devices, d))
    else:
        u = rng.normal(0.0, alpha, n_devices)
        big_b = rng.normal(0.0, beta, n_devices)
        mean_x = rng.normal(big_b[:, None], 1.0, (n_devices, d))

    n_test = np.maximum(1, np.rint(sizes * test_fraction).astype(np.int64))
    n_train = sizes - n_test
    train_off = np.concatenate([[0], np.cumsum(n_train)])
    test_off = np.concatenate([[0], np.cumsum(n_test)])
    x_train = np.empty((int(train_off[-1]), d), dtype=np.float32)
    x_test = np.empty((int(test_off[-1]), d), dtype=np.float32)
    y_train = np.empty(len(x_train), dtype=np.int64)
    y_test = np.empty(len(x_test), dtype=np.int64)
    for k in range(n_devices):
        if iid:
            w, b = w_shared, b_shared
        else:
            w = rng.normal(u[k], 1.0, (c, d))
            b = rng.normal(u[k], 1.0, c)
        x = mean_x[k] + rng.standard_normal((int(sizes[k]), d)) * sd_x
        y = np.argmax(x @ w.T + b, axis=1)
        a, m = int(n_train[k]), slice(int(train_off[k]), int(train_off[k + 1]))
        x_train[m], y_train[m] = x[:a], y[:a]
        t = slice(int(test_off[k]), int(test_off[k + 1]))
        x_test[t], y_test[t] = x[a:], y[a:]

    name = "synthetic:iid" if iid else f"synthetic:{alpha:g}:{beta:g}"
    return Dataset(
        name=name,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        n_classes=c,
        input_shape=(d,),
        groups=np.repeat(np.arange(n_devices, dtype=np.int64), n_train),
    )


@register_dataset("synthetic", form="synthetic:ALPHA:BETA | synthetic:iid")
def _load_synthetic(
    args: tuple[str, ...],
    *,
    spec: str,
    data_dir: pathlib.Path | None,
    download: bool,
    seed: int,
    n_peers: int | None,
) -> Dataset:
    if len(args) == 1 and args[0].lower() == "iid":
        alpha, beta, iid = 0.0, 0.0, True
    elif len(args) == 2:
        alpha = parse_float(args[0], what="ALPHA", spec=spec, forms=_FORMS)
        beta = parse_float(args[1], what="BETA", spec=spec, forms=_FORMS)
        iid = False
    else:
        raise ValueError(f"dataset spec {spec!r} is not valid; valid forms: {_FORMS}")
    if n_peers is None:
        raise ValueError(f"n_peers is required for {spec!r}: the generator makes one device per peer")
    return make_synthetic(n_peers, alpha, beta, iid=iid, seed=seed)

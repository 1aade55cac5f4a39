"""The ``Dataset`` container, the dataset registry and the loaders of the image data sets.

``load_dataset("digits")`` works offline from the copy shipped in the package; MNIST,
Fashion-MNIST and CIFAR-10 are read from a folder found by ``resolve_data_dir`` (or downloaded on
request). Images come out as float32 ``(N, C, H, W)``, scaled to [0, 1] and then standardized with
the per-channel mean and standard deviation of the training set; labels as int64.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from decentlearn.data._spec import check_int, split_spec
from decentlearn.data.cifar import CIFAR10_DIRNAME, find_cifar10_dir, read_cifar10
from decentlearn.data.digits import read_digits
from decentlearn.data.idx import read_idx
from decentlearn.registry import Registry

__all__ = [
    "check_dataset_spec",
    "CIFAR10_DIRNAME",
    "DATA_ENV",
    "SYSTEM_DIRS",
    "Dataset",
    "DatasetLoader",
    "available_datasets",
    "cache_dir",
    "download_dir",
    "find_idx_files",
    "load_dataset",
    "register_dataset",
    "resolve_data_dir",
    "standardize_images",
]

#: Environment variable naming a root folder of data sets.
DATA_ENV = "DECENTLEARN_DATA"

#: Folders where a distribution package installs a data set (Debian: ``dataset-fashion-mnist``).
SYSTEM_DIRS: dict[str, tuple[pathlib.Path, ...]] = {
    "fashion-mnist": (pathlib.Path("/usr/share/datasets/fashion-mnist"),),
}

#: How to get a data set that was not found, beyond ``download=True``.
_INSTALL_HINTS: dict[str, str] = {
    "fashion-mnist": "on Debian/Ubuntu: apt-get install dataset-fashion-mnist",
}

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
_DIGITS_FILE = _PACKAGE_DIR / "digits.npz"


def _check_array(value: object, argname: str, dtype: type, ndim: int | None = None) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{argname} must be a numpy.ndarray, got {type(value).__name__}")
    if value.dtype != dtype:
        raise TypeError(f"{argname} must have dtype {np.dtype(dtype).name}, got {value.dtype}")
    if ndim is not None and value.ndim != ndim:
        raise ValueError(f"{argname} must be {ndim}-D, got shape {value.shape}")
    return value


@dataclass(frozen=True, eq=False, repr=False)
class Dataset:
    """A labelled data set split into train and test parts.

    ``x_*`` are float32 C-contiguous ``(n, *input_shape)``; ``y_*`` are int64 labels in
    ``[0, n_classes)``. ``groups`` (int64, one entry per training sample) names the natural owner
    of each training sample, for data sets generated per device (``synthetic``); else None.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    input_shape: tuple[int, ...]
    groups: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {type(self.name).__name__}")
        if not isinstance(self.input_shape, tuple) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in self.input_shape
        ):
            raise TypeError(f"input_shape must be a tuple of positive ints, got {self.input_shape!r}")
        n_classes = check_int(self.n_classes, "n_classes", minimum=1)
        for part in ("train", "test"):
            x = _check_array(getattr(self, f"x_{part}"), f"x_{part}", np.float32)
            y = _check_array(getattr(self, f"y_{part}"), f"y_{part}", np.int64, ndim=1)
            if x.shape[1:] != self.input_shape:
                raise ValueError(
                    f"x_{part} must have shape (n, *input_shape) = (n, {', '.join(map(str, self.input_shape))}), "
                    f"got {x.shape}"
                )
            if not x.flags.c_contiguous:
                raise ValueError(f"x_{part} must be C-contiguous")
            if len(y) != len(x):
                raise ValueError(
                    f"y_{part} must have {len(x)} labels (one per row of x_{part}), got {len(y)}"
                )
            if len(y) and (y.min() < 0 or y.max() >= n_classes):
                raise ValueError(
                    f"y_{part} must hold labels in [0, {n_classes}), got values in [{y.min()}, {y.max()}]"
                )
        if self.groups is not None:
            groups = _check_array(self.groups, "groups", np.int64, ndim=1)
            if len(groups) != len(self.y_train):
                raise ValueError(
                    f"groups must have one entry per training sample ({len(self.y_train)}), got {len(groups)}"
                )
            if len(groups) and groups.min() < 0:
                raise ValueError(f"groups must be >= 0, got minimum {groups.min()}")

    @property
    def n_train(self) -> int:
        return len(self.y_train)

    @property
    def n_test(self) -> int:
        return len(self.y_test)

    def __repr__(self) -> str:
        groups = "" if self.groups is None else f", groups={len(np.unique(self.groups))}"
        return (
            f"Dataset(name={self.name!r}, train={self.n_train}, test={self.n_test}, "
            f"input_shape={self.input_shape}, n_classes={self.n_classes}{groups})"
        )


class DatasetLoader(Protocol):
    """A registered loader: gets the spec's arguments (``"synthetic:1:1"`` -> ``("1", "1")``)."""

    def __call__(
        self,
        args: tuple[str, ...],
        *,
        spec: str,
        data_dir: pathlib.Path | None,
        download: bool,
        seed: int,
        n_peers: int | None,
    ) -> Dataset: ...


@dataclass(frozen=True)
class _Entry:
    loader: DatasetLoader
    form: str


_DATASETS: Registry[_Entry] = Registry("dataset")
_L = TypeVar("_L", bound=Callable[..., Dataset])
_T = TypeVar("_T")


def register_dataset(name: str, *, form: str | None = None) -> Callable[[_L], _L]:
    """Register a loader under ``name``; ``form`` documents its spec (e.g. ``"synthetic:ALPHA:BETA"``)."""
    if not isinstance(name, str) or not name or ":" in name or name != name.lower():
        raise ValueError(f"name must be a non-empty lower-case str without ':', got {name!r}")

    add = _DATASETS.register(name, form=form)

    def decorate(loader: _L) -> _L:
        add(_Entry(loader, form or name))
        return loader

    return decorate


def check_dataset_spec(spec: str) -> None:
    """ValueError (naming the closest data set) unless ``spec`` names a registered data set; its
    arguments are checked when it is loaded."""
    _DATASETS.get(split_spec(spec, "dataset")[0], spec)


def available_datasets() -> tuple[str, ...]:
    """The valid dataset specs, e.g. ``('cifar10', 'digits', ..., 'synthetic:ALPHA:BETA | synthetic:iid')``."""
    return tuple(_DATASETS.forms())


def load_dataset(
    name: str,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    download: bool = False,
    seed: int = 0,
    n_peers: int | None = None,
) -> Dataset:
    """Load a data set by spec: ``digits`` (embedded), ``mnist``, ``fashion-mnist``, ``cifar10``,
    ``synthetic:ALPHA:BETA`` or ``synthetic:iid``.

    ``data_dir`` is the folder holding the files (it is then the only place looked at); without it
    ``$DECENTLEARN_DATA/<name>``, ``$DECENTLEARN_DATA``, system folders and
    ``~/.cache/decentlearn/<name>`` are tried. With ``download=True`` missing files are fetched
    into ``data_dir`` (or the first of the env / cache folders). ``seed`` and ``n_peers`` are used
    by generated data sets only (``synthetic`` requires ``n_peers``: one device per peer); the
    splits of the fixed data sets never depend on ``seed``.
    """
    key, args = split_spec(name, "name")
    if key == "arrays":  # decentlearn.data.arrays.ArrayDataset's spec
        raise ValueError(f"dataset {name!r} was given as arrays (ArrayDataset) in Python and "
                         "cannot be loaded by name: pass RunConfig(dataset=ArrayDataset(...)) "
                         "with the same arrays (docs/data.md)")
    entry = _DATASETS.get(key, name)
    if data_dir is not None and not isinstance(data_dir, (str, os.PathLike)):
        raise TypeError(f"data_dir must be a str, os.PathLike or None, got {type(data_dir).__name__}")
    if not isinstance(download, bool):
        raise TypeError(f"download must be a bool, got {type(download).__name__}")
    seed = check_int(seed, "seed", minimum=0)
    if n_peers is not None:
        n_peers = check_int(n_peers, "n_peers", minimum=1)
    path = None if data_dir is None else pathlib.Path(data_dir).expanduser()
    return entry.loader(
        args, spec=name, data_dir=path, download=download, seed=seed, n_peers=n_peers
    )


# --------------------------------------------------------------------------------------------
# Finding data folders


def cache_dir(name: str) -> pathlib.Path:
    """``~/.cache/decentlearn/<name>``: the last folder looked at, and the default download target."""
    return pathlib.Path("~/.cache/decentlearn").expanduser() / name


def _search_dirs(name: str, data_dir: pathlib.Path | None, download: bool) -> list[pathlib.Path]:
    if data_dir is not None:
        if not data_dir.is_dir():
            if download and not data_dir.exists():
                return []  # created by the download
            raise FileNotFoundError(f"data_dir {str(data_dir)!r} does not exist or is not a folder")
        return [data_dir, data_dir / name]
    dirs: list[pathlib.Path] = []
    env = os.environ.get(DATA_ENV)
    if env:
        root = pathlib.Path(env).expanduser()
        dirs += [root / name, root]
    dirs += SYSTEM_DIRS.get(name, ())
    dirs.append(cache_dir(name))
    return dirs


def download_dir(name: str, data_dir: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """Where ``load_dataset(name, data_dir, download=True)`` puts missing files: ``data_dir`` if
    given, else ``$DECENTLEARN_DATA/<name>`` if that variable is set, else
    ``~/.cache/decentlearn/<name>``. Each data set gets its own folder, since MNIST and
    Fashion-MNIST use the same file names."""
    if data_dir is not None:
        return pathlib.Path(data_dir).expanduser()
    env = os.environ.get(DATA_ENV)
    return pathlib.Path(env).expanduser() / name if env else cache_dir(name)


def resolve_data_dir(
    name: str,
    data_dir: pathlib.Path | None,
    find: Callable[[pathlib.Path], _T | None],
    *,
    download: bool = False,
) -> _T:
    """Return ``find(folder)`` for the first searched folder where it is not None.

    When none matches: download into the default target if ``download``, else raise
    FileNotFoundError listing the folders looked at and how to get the data.
    """
    dirs = _search_dirs(name, data_dir, download)
    for d in dirs:
        if d.is_dir():
            found = find(d)
            if found is not None:
                return found
    if download:
        from decentlearn.data.download import download as fetch

        target = fetch(name, download_dir(name, data_dir))
        found = find(target)
        if found is None:  # pragma: no cover - the download table and the finder disagree
            raise FileNotFoundError(
                f"downloaded {name} into {str(target)!r} but its files were not found there"
            )
        return found
    hints = [f"load_dataset({name!r}, download=True)", f"`decentlearn download {name}`"]
    if name in _INSTALL_HINTS:
        hints.insert(0, _INSTALL_HINTS[name])
    if data_dir is None:
        hints.append(f"point ${DATA_ENV} or data_dir at a folder holding them")
    looked = ", ".join(str(d) for d in dirs)
    raise FileNotFoundError(
        f"{name} data files not found (looked in {looked}); to get them: " + "; or ".join(hints)
    )


# --------------------------------------------------------------------------------------------
# Standardization


def standardize_images(
    train: np.ndarray, test: np.ndarray, max_value: int = 255
) -> tuple[np.ndarray, np.ndarray]:
    """Map uint8 ``(n, C, H, W)`` images to float32: ``(x / max_value - mean_c) / std_c``.

    ``mean_c`` and ``std_c`` are the exact per-channel statistics of the scaled training images
    (computed in float64 from a histogram of the 256 possible values). A constant channel gets
    std 1.
    """
    for argname, a in (("train", train), ("test", test)):
        _check_array(a, argname, np.uint8, ndim=4)
    if train.shape[1:] != test.shape[1:]:
        raise ValueError(f"test must have the image shape of train {train.shape[1:]}, got {test.shape[1:]}")
    if len(train) == 0:
        raise ValueError("train must hold at least one image")
    values = np.arange(256, dtype=np.float64) / max_value
    x_train = np.empty(train.shape, dtype=np.float32)
    x_test = np.empty(test.shape, dtype=np.float32)
    for c in range(train.shape[1]):
        hist = np.bincount(train[:, c].ravel(), minlength=256).astype(np.float64)
        n = hist.sum()
        mean = hist @ values / n
        std = float(np.sqrt(hist @ (values - mean) ** 2 / n))
        std = std if std > 0 else 1.0
        # x * a + b in float32: an order of magnitude faster than a 256-entry lookup table.
        a, b = np.float32(1.0 / (max_value * std)), np.float32(-mean / std)
        for out, raw in ((x_train, train), (x_test, test)):
            view = out[:, c]
            view[...] = raw[:, c]
            view *= a
            view += b
    return x_train, x_test


def _image_dataset(
    name: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    max_value: int,
    n_classes: int,
) -> Dataset:
    xs_train, xs_test = standardize_images(x_train, x_test, max_value)
    return Dataset(
        name=name,
        x_train=xs_train,
        y_train=y_train.astype(np.int64),
        x_test=xs_test,
        y_test=y_test.astype(np.int64),
        n_classes=n_classes,
        input_shape=tuple(int(s) for s in x_train.shape[1:]),
    )


def _no_args(args: tuple[str, ...], spec: str, form: str) -> None:
    if args:
        raise ValueError(f"dataset {spec!r} takes no ':' arguments; valid form: {form!r}")


# --------------------------------------------------------------------------------------------
# digits (embedded)


@register_dataset("digits")
def _load_digits(
    args: tuple[str, ...],
    *,
    spec: str,
    data_dir: pathlib.Path | None,
    download: bool,
    seed: int,
    n_peers: int | None,
) -> Dataset:
    _no_args(args, spec, "digits")
    images, labels, test = read_digits(_DIGITS_FILE)
    images = images[:, None, :, :]  # (n, 1, 8, 8)
    return _image_dataset("digits", images[~test], labels[~test], images[test], labels[test], 16, 10)


# --------------------------------------------------------------------------------------------
# MNIST and Fashion-MNIST (IDX files)

_IDX_STEMS = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


def find_idx_files(directory: pathlib.Path) -> dict[str, pathlib.Path] | None:
    """The four MNIST-style IDX files in ``directory`` (raw or ``.gz``; ``train-images.idx3-ubyte``
    spellings too), or None if any is missing."""
    found: dict[str, pathlib.Path] = {}
    for key, stem in _IDX_STEMS.items():
        alt = stem.replace("-idx", ".idx")
        for candidate in (stem, stem + ".gz", alt, alt + ".gz"):
            if (directory / candidate).is_file():
                found[key] = directory / candidate
                break
        else:
            return None
    return found


def _read_idx_pair(images_path: pathlib.Path, labels_path: pathlib.Path) -> tuple[np.ndarray, np.ndarray]:
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(
            f"{images_path}: expected uint8 images of shape (n, 28, 28), got {images.dtype} {images.shape}"
        )
    if labels.dtype != np.uint8 or labels.ndim != 1:
        raise ValueError(
            f"{labels_path}: expected uint8 labels of shape (n,), got {labels.dtype} {labels.shape}"
        )
    if len(labels) != len(images):
        raise ValueError(f"{labels_path}: {len(labels)} labels for the {len(images)} images of {images_path}")
    if len(labels) and labels.max() > 9:
        raise ValueError(f"{labels_path}: label {int(labels.max())} outside 0..9")
    return images[:, None, :, :], labels


def _load_idx_dataset(
    name: str, args: tuple[str, ...], spec: str, data_dir: pathlib.Path | None, download: bool
) -> Dataset:
    _no_args(args, spec, name)
    files = resolve_data_dir(name, data_dir, find_idx_files, download=download)
    x_train, y_train = _read_idx_pair(files["x_train"], files["y_train"])
    x_test, y_test = _read_idx_pair(files["x_test"], files["y_test"])
    return _image_dataset(name, x_train, y_train, x_test, y_test, 255, 10)


def _idx_loader(name: str) -> Callable[..., Dataset]:
    """The registry loader of an IDX data set (MNIST and Fashion-MNIST share file names and format)."""

    def load(args: tuple[str, ...], *, spec: str, data_dir: pathlib.Path | None, download: bool,
             seed: int, n_peers: int | None) -> Dataset:
        return _load_idx_dataset(name, args, spec, data_dir, download)

    return load


for _name in ("mnist", "fashion-mnist"):
    register_dataset(_name)(_idx_loader(_name))


# --------------------------------------------------------------------------------------------
# CIFAR-10 (binary version)


@register_dataset("cifar10")
def _load_cifar10(
    args: tuple[str, ...],
    *,
    spec: str,
    data_dir: pathlib.Path | None,
    download: bool,
    seed: int,
    n_peers: int | None,
) -> Dataset:
    _no_args(args, spec, "cifar10")
    folder = resolve_data_dir("cifar10", data_dir, find_cifar10_dir, download=download)
    x_train, y_train, x_test, y_test = read_cifar10(folder)
    return _image_dataset("cifar10", x_train, y_train, x_test, y_test, 255, 10)

"""Next-character prediction on LEAF's Shakespeare data (Caldas et al., "LEAF: A Benchmark for
Federated Settings", 2018): every speaking role of every play is one user, so the natural
partition gives each peer one speaker's lines.

Format (what LEAF's preprocessing writes): a folder with ``train/`` and ``test/`` subfolders of
JSON files ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [80-character
strings], "y": [the next character]}}}``. Characters are mapped to their index in LEAF's
80-letter alphabet ``LETTERS``; ``x`` comes out as float32 ids (decentlearn's datasets are
float32; ``torch:char-lstm`` turns them back into integers) and ``y`` as int64 labels.

LEAF publishes no fixed copy of its output (it regenerates it from Project Gutenberg), so there
is no official URL: ``download_leaf`` fetches the files from a mirror that serves a
``SHA256SUMS`` manifest (``sha256sum train/*.json test/*.json`` output) beside them, and checks
every file against it. The manifest is as trustworthy as the mirror (use https).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import urllib.error
import urllib.request

import numpy as np

from decentlearn.data.datasets import Dataset, register_dataset, resolve_data_dir
from decentlearn.data.download import DownloadError, RemoteFile, _describe, download

#: LEAF's alphabet (``shakespeare/utils/language_utils.py``): the index is the class label.
LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"

MANIFEST = "SHA256SUMS"
_MANIFEST_LINE = re.compile(r"^([0-9a-f]{64}) [ *]((?:train|test)/[A-Za-z0-9_.-]+\.json)$")
_MAX_MANIFEST_BYTES = 1 << 20
_INDEX = {c: i for i, c in enumerate(LETTERS)}


def find_leaf_dir(directory: pathlib.Path) -> pathlib.Path | None:
    """``directory`` when it holds ``train/*.json`` and ``test/*.json``, else None."""
    for part in ("train", "test"):
        if not any((directory / part).glob("*.json")):
            return None
    return directory


def _encode(text: str, where: str) -> list[int]:
    try:
        return [_INDEX[c] for c in text]
    except KeyError as e:
        raise ValueError(f"{where}: character {e.args[0]!r} is not in LEAF's Shakespeare "
                         "alphabet (decentlearn.data.shakespeare.LETTERS)") from None


def read_leaf(folder: pathlib.Path, part: str) -> dict[str, tuple[list[str], list[str]]]:
    """{user: (x strings, y characters)} of every JSON file of ``folder/part``, in file order."""
    users: dict[str, tuple[list[str], list[str]]] = {}
    for path in sorted((folder / part).glob("*.json")):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            user_data = data["user_data"]
            for user in data["users"]:
                xs, ys = users.setdefault(user, ([], []))
                xs.extend(user_data[user]["x"])
                ys.extend(user_data[user]["y"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a LEAF JSON file ({type(e).__name__}: {e}); expected "
                             "{'users': [...], 'user_data': {user: {'x': [...], 'y': [...]}}}") \
                from None
    return users


def _arrays(users: list[str], data: dict, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xs: list[list[int]] = []
    ys: list[int] = []
    groups: list[int] = []
    for g, user in enumerate(users):
        x_u, y_u = data.get(user, ([], []))
        if len(x_u) != len(y_u):
            raise ValueError(f"{where}: user {user!r} has {len(x_u)} x and {len(y_u)} y entries")
        for x, y in zip(x_u, y_u):
            if len(y) != 1:
                raise ValueError(f"{where}: user {user!r}: y entries must be one character, got "
                                 f"{y!r}")
            xs.append(_encode(x, where))
            ys.append(_encode(y, where)[0])
            groups.append(g)
    lengths = {len(x) for x in xs}
    if len(lengths) > 1:
        raise ValueError(f"{where}: x strings must all have the same length, got lengths "
                         f"{sorted(lengths)[:5]}")
    seq = lengths.pop() if lengths else 0
    x_arr = np.array(xs, dtype=np.float32).reshape(len(xs), seq)
    return x_arr, np.array(ys, dtype=np.int64), np.array(groups, dtype=np.int64)


def load_leaf_shakespeare(folder: pathlib.Path, n_peers: int | None) -> Dataset:
    """The Dataset of a LEAF folder: the ``n_peers`` speakers with the most training samples
    (ties by name; every speaker when None), their training samples (``groups`` = speaker, for
    ``--partition natural``) and their test samples."""
    train = read_leaf(folder, "train")
    test = read_leaf(folder, "test")
    speakers = sorted(train, key=lambda u: (-len(train[u][0]), u))
    speakers = [u for u in speakers if train[u][0]]
    if n_peers is not None:
        if len(speakers) < n_peers:
            raise ValueError(f"shakespeare: {folder} has {len(speakers)} speakers with training "
                             f"samples but n_peers={n_peers}; one speaker per peer is needed")
        speakers = speakers[:n_peers]
    x_train, y_train, groups = _arrays(speakers, train, str(folder / "train"))
    x_test, y_test, _ = _arrays(speakers, test, str(folder / "test"))
    if len(y_test) == 0:
        raise ValueError(f"shakespeare: {folder / 'test'} holds no sample of the chosen speakers")
    if x_test.shape[1] != x_train.shape[1]:
        raise ValueError(f"shakespeare: test sequences have length {x_test.shape[1]}, training "
                         f"ones {x_train.shape[1]}")
    return Dataset(name="shakespeare", x_train=x_train, y_train=y_train, x_test=x_test,
                   y_test=y_test, n_classes=len(LETTERS), input_shape=(x_train.shape[1],),
                   groups=groups)


@register_dataset("shakespeare")
def _load_shakespeare(args: tuple[str, ...], *, spec: str, data_dir: pathlib.Path | None,
                      download: bool, seed: int, n_peers: int | None) -> Dataset:
    if args:
        raise ValueError(f"dataset {spec!r} takes no ':' arguments; valid form: 'shakespeare'")
    if download:
        raise ValueError("shakespeare has no official download (LEAF regenerates its files): "
                         "fetch them from a mirror with "
                         "decentlearn.data.shakespeare.download_leaf(root, base_url)")
    folder = resolve_data_dir("shakespeare", data_dir, find_leaf_dir)
    return load_leaf_shakespeare(folder, n_peers)


def download_leaf(root: str | os.PathLike[str], base_url: str, *, timeout: float = 60.0,
                  progress=False) -> pathlib.Path:
    """Fetches ``base_url/SHA256SUMS`` and every ``train/*.json`` / ``test/*.json`` it lists into
    ``root`` (checked against the manifest's sha256, written atomically, skipped when already
    present and valid, as decentlearn.data.download does); returns ``root``. Raises
    DownloadError (one line naming the URL) when the manifest or a file cannot be fetched, and
    ValueError for a malformed manifest."""
    if not isinstance(base_url, str) or not base_url:
        raise TypeError(f"base_url must be a non-empty str, got {base_url!r}")
    base = base_url.rstrip("/")
    url = f"{base}/{MANIFEST}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            raw = r.read(_MAX_MANIFEST_BYTES + 1)
    except urllib.error.HTTPError as e:
        e.close()
        raise DownloadError(url, _describe(e)) from e
    except (OSError, ValueError) as e:
        raise DownloadError(url, _describe(e)) from e
    if len(raw) > _MAX_MANIFEST_BYTES:
        raise ValueError(f"{url}: manifest larger than {_MAX_MANIFEST_BYTES} bytes")
    entries: dict[str, list[RemoteFile]] = {"train": [], "test": []}
    for n, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        m = _MANIFEST_LINE.match(line.strip())
        if m is None:
            raise ValueError(f"{url}: line {n} is not '<sha256>  train|test/<name>.json': "
                             f"{line[:80]!r}")
        part, name = m.group(2).split("/")
        entries[part].append(RemoteFile(name, f"{base}/{part}/{name}", "sha256:" + m.group(1)))
    if not entries["train"] or not entries["test"]:
        raise ValueError(f"{url}: the manifest must list train/ and test/ JSON files")
    root = pathlib.Path(root).expanduser()
    for part, files in entries.items():
        download("shakespeare", root / part, files=files, timeout=timeout, progress=progress)
    return root

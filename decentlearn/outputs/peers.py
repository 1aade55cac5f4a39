"""``peers.csv``: every peer's test accuracy and loss at every evaluation, and its reader.

metrics.csv keeps the peers' mean, minimum and maximum; peers.csv keeps each peer's value, in long
format (one row per peer per evaluation, peers in order)::

    round,peer,test_accuracy,test_loss
    10,0,0.815,0.6120930989583333
    10,1,0.7725,0.7094217936197917
    ...

Values are the evaluator's float64 numbers written in full (Python's shortest round-trip form),
so ``mean(test_accuracy)`` over a round's rows is metrics.csv's ``test_accuracy_mean``. Any tool
reads it (``pandas.read_csv``, a spreadsheet); :func:`load_peers` returns it as arrays.

:class:`PeersWriter` streams it like metrics.csv: each evaluation's rows are appended and reach
the disk in one write, so an interrupted or killed run keeps every evaluation before the last; a
resumed run cuts the file back to the checkpoint's round and goes on appending.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from decentlearn import atomic
from decentlearn.atomic import OutputError

__all__ = ["PEER_COLUMNS", "PEERS_FILE", "Peers", "PeersWriter", "load_peers"]

#: The file name in a run directory.
PEERS_FILE = "peers.csv"

#: Its columns.
PEER_COLUMNS = ("round", "peer", "test_accuracy", "test_loss")

_HEADER = (",".join(PEER_COLUMNS) + "\n").encode()


class PeersWriter:
    """Appends each evaluation's per-peer rows to ``path`` (header first, see the module
    docstring); on a write error the file is cut back to its last complete evaluation."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._file: IO[bytes] | None = None
        self._size = 0

    def append(self, round: int, accuracy: np.ndarray, loss: np.ndarray) -> None:
        """The rows of the evaluation after ``round`` rounds: peer i's ``accuracy[i]`` and
        ``loss[i]``."""
        acc = np.asarray(accuracy, dtype=np.float64).ravel()
        los = np.asarray(loss, dtype=np.float64).ravel()
        if acc.shape != los.shape:
            raise ValueError(f"loss must have one value per peer ({acc.size}), got {los.size}")
        r = int(round)
        data = "".join(f"{r},{i},{a!r},{b!r}\n"
                       for i, (a, b) in enumerate(zip(acc.tolist(), los.tolist()))).encode()
        try:
            if self._file is None:
                self._file = open(self.path, "wb", buffering=0)
                self._size = 0
                data = _HEADER + data  # one write per evaluation, the first with the header
            atomic.write_all(self._file.fileno(), data)
        except OSError as e:
            if self._file is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._file.fileno(), self._size)
            raise OutputError(self.path, e) from None
        self._size += len(data)

    def resume(self, last_round: int) -> None:
        """Continues the file of a run resumed after ``last_round`` rounds: rows of later rounds
        (written after the checkpoint) and a partial last line are cut off; later evaluations
        are appended. A missing file is started anew."""
        self.close()
        if not self.path.is_file():
            return
        keep = 0
        try:
            with open(self.path, "rb") as f:
                header = f.readline()
                if header != _HEADER:
                    keep = None
                else:
                    keep = len(header)
                    for line in f:
                        if not line.endswith(b"\n") or int(line.split(b",", 1)[0]) > last_round:
                            break
                        keep += len(line)
        except (OSError, ValueError):
            keep = None
        try:
            if keep is None:  # not ours, or unreadable: start again
                self.path.unlink()
                return
            self._file = open(self.path, "r+b", buffering=0)
            os.ftruncate(self._file.fileno(), keep)
            self._file.seek(keep)
        except OSError as e:
            raise OutputError(self.path, e) from None
        self._size = keep

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


@dataclass(frozen=True)
class Peers:
    """peers.csv as arrays: ``rounds`` (E,) int64, the round after which each of the E
    evaluations was made; ``accuracy`` and ``loss`` (E, n_peers) float64, row e = evaluation e,
    column i = peer i."""

    rounds: np.ndarray
    accuracy: np.ndarray
    loss: np.ndarray

    @property
    def n_peers(self) -> int:
        return int(self.accuracy.shape[1])

    def __repr__(self) -> str:
        return f"Peers(evaluations={len(self.rounds)}, n_peers={self.n_peers})"


def load_peers(run_dir: str | os.PathLike) -> Peers:
    """Reads ``run_dir/peers.csv`` into :class:`Peers`. A last evaluation with fewer rows than
    the others (a run killed while writing it) is left out. ValueError (one line naming the
    file) when the file is missing or malformed."""
    path = Path(run_dir) / PEERS_FILE
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({(e.strerror or str(e)).lower()})") from None
    data = data[:data.rfind(b"\n") + 1]  # complete lines only
    lines = data.decode("utf-8", errors="replace").splitlines()
    if not lines or lines[0] != ",".join(PEER_COLUMNS):
        raise ValueError(f"{path}: expected the header {','.join(PEER_COLUMNS)!r}")
    if len(lines) == 1:
        empty = np.zeros((0, 0))
        return Peers(np.zeros(0, dtype=np.int64), empty, empty.copy())
    try:
        table = np.loadtxt(lines[1:], delimiter=",", dtype=np.float64, ndmin=2)
    except ValueError as e:
        raise ValueError(f"{path}: malformed ({str(e).splitlines()[0]})") from None
    if table.shape[1] != len(PEER_COLUMNS):
        raise ValueError(f"{path}: expected {len(PEER_COLUMNS)} columns, got {table.shape[1]}")
    rounds, peer = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
    starts = np.flatnonzero(np.r_[True, rounds[1:] != rounds[:-1]])
    counts = np.diff(np.r_[starts, len(rounds)])
    n = int(counts[0])
    if len(counts) > 1 and counts[-1] < n:  # the evaluation being written when the run died
        table, rounds, peer = (table[:starts[-1]], rounds[:starts[-1]], peer[:starts[-1]])
        starts, counts = starts[:-1], counts[:-1]
    evals = rounds[starts]
    if (counts != n).any() or (np.diff(evals) <= 0).any() \
            or not np.array_equal(peer, np.tile(np.arange(n), len(starts))):
        raise ValueError(f"{path}: expected {n} rows per evaluation, peers 0..{n - 1} in order "
                         "and increasing rounds")
    return Peers(evals, table[:, 2].reshape(-1, n).copy(), table[:, 3].reshape(-1, n).copy())

"""Checkpoints: the complete state of a run at a round boundary, saved atomically and restored
bit for bit, so that a resumed run ends with the same parameters and metrics as an uninterrupted
one (docs/checkpoints.md).

The state is a flat dict ``name -> value``: NumPy arrays and NumPy scalars (kept with their dtype)
go to the file's array payload, everything else must be JSON (None, bool, int, float, str, and
lists/dicts of those; a ``numpy.random.Generator`` is stored as its bit generator's state). Every
stateful object has ``state_dict()`` / ``load_state_dict(state)``; most of them just name their
attributes (``state_of(obj, names)`` / ``load_attrs(obj, names, state)``), and nested objects are
flattened with dotted prefixes (``algorithm.optimizer.momentum``).

A checkpoint file is an uncompressed zip (``.npz``-like, written and read here without pickle)
holding one ``.npy`` member per array, ``__state__.npy`` (the JSON values, UTF-8 bytes) and
``__meta__.npy`` (format name and version, decentlearn version, config fingerprint, n_peers, dim,
round, and the SHA-256 of the arrays and of the JSON state). Checkpoint files are untrusted bytes:
every member's header is checked against the zip directory and the file size before anything is
allocated, object dtypes are refused, and any damage ends in one :class:`CheckpointError` line.

Writers: the simulator (``Simulator.save_checkpoint``) and a multi-process backend, which gathers
every per-peer array (first axis = n_peers) to one rank in peer order and calls :func:`write` with
the same names; :func:`read` gives them back.
"""

from __future__ import annotations

import contextlib
import logging
import hashlib
import io
import json
import math
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from decentlearn.errors import CheckpointError
from decentlearn.state import check_json, is_array

__all__ = ["CheckpointError", "FILENAME", "FINGERPRINT_EXCLUDE", "FORMAT_VERSION",
           "CheckpointCallback", "fingerprint", "read", "stop_at_round_end", "write"]

#: Bumped whenever the layout or the meaning of saved names changes; other versions are refused.
FORMAT_VERSION = 1
FORMAT_NAME = "decentlearn-checkpoint"
#: The checkpoint's file name inside a run directory.
FILENAME = "checkpoint.npz"
#: RunConfig fields left out of the fingerprint: they may differ between the run that wrote a
#: checkpoint and the one that resumes it without changing any number of the run (``rounds``
#: extends it; results never depend on ``threads``; ``data_dir`` only locates the same data).
FINGERPRINT_EXCLUDE = ("rounds", "threads", "data_dir")

_META = "__meta__"
_STATE = "__state__"


# ---- fingerprint ------------------------------------------------------------------------------

def fingerprint(config: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of a RunConfig's fields, FINGERPRINT_EXCLUDE left out."""
    d = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    d = {k: v for k, v in d.items() if k not in FINGERPRINT_EXCLUDE}
    text = json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


# ---- file format ------------------------------------------------------------------------------

def _split(state: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    arrays, values = {}, {}
    for name, value in state.items():
        if not isinstance(name, str) or not name or name.startswith("__") or "/" in name:
            raise ValueError(f"state name must be a non-empty str without '/' not starting with "
                             f"'__', got {name!r}")
        if is_array(value):
            a = np.asarray(value)
            if a.dtype.hasobject:
                raise TypeError(f"state {name!r}: object arrays cannot be checkpointed")
            arrays[name] = a
        else:
            values[name] = check_json(value, name)
    return arrays, values


def _digest(arrays: dict[str, np.ndarray], state_bytes: bytes) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes())
    h.update(state_bytes)
    return h.hexdigest()


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, allow_nan=True).encode()


def write(path: str | os.PathLike, state: dict[str, Any], *, fingerprint: str, n_peers: int,
          dim: int, round: int, extra: dict | None = None) -> None:
    """Writes ``state`` (flat dict of arrays, numpy scalars and JSON values) to ``path``
    atomically (atomic.atomic_writer: temporary file, fsync, rename). ``fingerprint`` is
    :func:`fingerprint` of the run's config; ``n_peers``/``dim`` the size of the peers' matrix;
    ``round`` the number of finished rounds; ``extra`` JSON metadata kept as is."""
    from decentlearn import __version__
    from decentlearn.atomic import atomic_writer

    arrays, values = _split(state)
    state_bytes = _json_bytes(values)
    meta = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
            "decentlearn_version": __version__, "fingerprint": str(fingerprint),
            "n_peers": int(n_peers), "dim": int(dim), "round": int(round),
            "arrays": sorted(arrays), "extra": check_json(extra or {}, "extra")}
    meta["checksum"] = _digest(arrays, state_bytes + _json_bytes(meta))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        members = [(_META, np.frombuffer(_json_bytes(meta), dtype=np.uint8)),
                   (_STATE, np.frombuffer(state_bytes, dtype=np.uint8)),
                   *sorted(arrays.items())]
        for name, a in members:
            with zf.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.ascontiguousarray(a), allow_pickle=False)
    with atomic_writer(path) as f:
        f.write(buf.getbuffer())


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, file_size: int) -> np.ndarray:
    if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size \
            or info.file_size > file_size:
        raise ValueError(f"member {info.filename!r} has an unexpected size or compression")
    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"member {info.filename!r} has npy version {version}")
        if dtype.hasobject:
            raise ValueError(f"member {info.filename!r} holds objects")
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        if f.tell() + nbytes != info.file_size:
            raise ValueError(f"member {info.filename!r} is {info.file_size} bytes, its header "
                             f"says {f.tell() + nbytes}")
        data = f.read(nbytes)
        if len(data) != nbytes:
            raise ValueError(f"member {info.filename!r} is cut short")
    a = np.frombuffer(data, dtype=dtype, count=count)
    return a.reshape(shape, order="F" if fortran else "C").copy(order="C")


def read(path: str | os.PathLike, *, fingerprint: str | None = None, n_peers: int | None = None,
         dim: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state, meta) of the checkpoint at ``path``, checked (format version, checksum, and when
    given the config ``fingerprint``, ``n_peers`` and ``dim``). Raises CheckpointError (one
    line) for a missing, truncated, corrupted or foreign checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint (write one with --checkpoint-every N)")
    try:
        size = path.stat().st_size
        arrays: dict[str, np.ndarray] = {}
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            if sum(i.file_size for i in infos) > size:
                raise ValueError("members larger than the file")
            for info in infos:
                name = info.filename
                if not name.endswith(".npy") or name[:-4] in arrays:
                    raise ValueError(f"unexpected member {name!r}")
                arrays[name[:-4]] = _read_member(zf, info, size)
        meta = json.loads(arrays.pop(_META).tobytes().decode())
        state_bytes = arrays.pop(_STATE).tobytes()
        values = json.loads(state_bytes.decode())
        if not isinstance(meta, dict) or not isinstance(values, dict):
            raise ValueError("metadata is not a JSON object")
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - any damage to untrusted bytes is one clean error
        reason = " ".join(str(e).split()) or type(e).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or corrupted: "
                              f"{reason[:200]})") from None
    if meta.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{path}: not a decentlearn checkpoint")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format version {meta.get('format_version')!r}, "
                              f"this decentlearn reads version {FORMAT_VERSION}")
    core = {k: v for k, v in meta.items() if k != "checksum"}
    if meta.get("checksum") != _digest(arrays, state_bytes + _json_bytes(core)) \
            or meta.get("arrays") != sorted(arrays):
        raise CheckpointError(f"{path}: checkpoint is corrupted (checksum mismatch)")
    for key, want in (("n_peers", n_peers), ("dim", dim)):
        if want is not None and meta.get(key) != want:
            raise CheckpointError(f"{path}: checkpoint has {key}={meta.get(key)}, this run has "
                                  f"{key}={want}: it belongs to another run")
    if fingerprint is not None and meta.get("fingerprint") != fingerprint:
        raise CheckpointError(f"{path}: checkpoint was written by another configuration (config "
                              "fingerprint differs; only rounds, threads and data_dir may change "
                              "on resume)")
    state: dict[str, Any] = dict(values)
    for name, a in arrays.items():
        if name in state:
            raise CheckpointError(f"{path}: checkpoint is corrupted (state {name!r} twice)")
        state[name] = a[()] if a.ndim == 0 else a
    _check_progress(path, state, meta)
    return state, meta


def _check_progress(path: Path, state: dict[str, Any], meta: dict[str, Any]) -> None:
    """CheckpointError unless the checkpoint's progress agrees with itself: the metadata's
    ``round`` (finished rounds) is an integer >= 0 and equals the run state's ``next_round``,
    and its metrics rows are of rounds 1 .. round, in increasing order. (The checksum only says
    the bytes are the ones written; a file rewritten with its checksum recomputed may say
    anything.)"""
    done = meta.get("round")
    if isinstance(done, bool) or not isinstance(done, int) or done < 0:
        raise CheckpointError(f"{path}: checkpoint is inconsistent: its round must be an integer "
                              f">= 0, got {done!r}")
    if "run.next_round" not in state:
        return
    ahead = state["run.next_round"]
    if isinstance(ahead, (bool, np.bool_)) or not isinstance(ahead, (int, np.integer)) \
            or int(ahead) != done:
        raise CheckpointError(f"{path}: checkpoint is inconsistent: its metadata says {done} "
                              f"rounds done, its run state next_round={ahead!r}")
    rounds = [row.get("round") if isinstance(row, dict) else None
              for row in state.get("run.history") or []]
    if not all(isinstance(r, int) and not isinstance(r, bool) and 1 <= r <= done
               for r in rounds) or rounds != sorted(set(rounds)):
        raise CheckpointError(f"{path}: checkpoint is inconsistent: its metrics rows' rounds "
                              f"{rounds[:5]}{'...' if len(rounds) > 5 else ''} are not "
                              f"increasing rounds of 1..{done}")


class CheckpointCallback:
    """A simulator callback that saves a checkpoint to ``path`` every ``every`` rounds and after
    the last round (``sim.Callback``'s ``on_round_complete`` hook, at a round boundary).

    Inside :func:`stop_at_round_end` it also ends the run gracefully: once a termination signal
    has been received, the round in progress finishes, its checkpoint is written, and
    ``on_round_complete`` raises :class:`decentlearn.interrupts.Interrupted`. With peers split over
    processes, every process calls ``comm.total`` at every round end while watching, so all of
    them stop after the same round even when the signal reached only some of them.
    """

    def __init__(self, path: str | os.PathLike, every: int) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1, got {every!r}")
        self.path = Path(path)
        self.every = every
        #: Rounds finished at the last checkpoint written (None: none yet).
        self.saved_round: int | None = None
        #: The termination signal received (None: none), set by stop_at_round_end's handler.
        self.stop_signum: int | None = None
        #: True inside stop_at_round_end: round ends check (and agree on) a stop request.
        self.watching = False

    def on_round_end(self, sim, t: int) -> None:
        pass

    def on_eval(self, sim, row: dict) -> None:
        pass

    def on_round_complete(self, sim, t: int) -> None:
        stop = False
        if self.watching:
            requested = int(self.stop_signum is not None)
            total = getattr(sim.comm, "total", None)
            stop = (total(requested) if total is not None else requested) > 0
        last = t + 1 == sim.config.rounds
        if (t + 1) % self.every == 0 or last or stop:
            self.save(sim)
        if stop and not last:
            import signal

            from decentlearn.interrupts import Interrupted
            raise Interrupted(self.stop_signum or signal.SIGTERM)

    def save(self, sim) -> None:
        sim.save_checkpoint(self.path, extra={"checkpoint_every": self.every})
        self.saved_round = sim.next_round
        if getattr(sim, "is_root", True):
            logging.getLogger(__name__).info("checkpoint of round %d written to %s",
                                             sim.next_round, self.path)


@contextlib.contextmanager
def stop_at_round_end(saver: CheckpointCallback, signums: tuple[int, ...] | None = None):
    """Within the block, the first of ``signums`` (default SIGTERM) asks ``saver`` to finish the
    round in progress, write its checkpoint and stop the run (see ``CheckpointCallback``); a
    second one raises :class:`decentlearn.interrupts.Interrupted` at once. Previous handlers are
    restored afterwards. Outside the main thread only the periodic checkpoints are written."""
    import signal
    import threading

    from decentlearn.interrupts import Interrupted
    if signums is None:
        signums = (signal.SIGTERM,)
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if saver.stop_signum is not None:
            raise Interrupted(signum)
        saver.stop_signum = signum

    previous = {s: signal.signal(s, handler) for s in signums}
    saver.watching = True
    try:
        yield
    finally:
        saver.watching = False
        for s, h in previous.items():
            signal.signal(s, h)

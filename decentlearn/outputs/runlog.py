"""``run.log``: the log records of a run, in its run directory.

decentlearn logs through Python's :mod:`logging`, under the ``decentlearn`` logger (the runner
logs the setup, every evaluation, checkpoints and the end of a run at INFO; setup problems at
WARNING). Library code never configures logging for the whole process; a run directory gets its
own file: while :class:`~decentlearn.outputs.rundir.RunWriter` writes a run, :class:`RunLog`
appends every ``decentlearn`` record at ``level`` (INFO) or above to ``run.log``, one line each::

    2026-11-26 17:42:03,118 INFO decentlearn.runner: round 10/50: test accuracy 0.8150 ...

To send these records elsewhere as well, configure logging as usual (``logging.basicConfig``,
a handler on ``logging.getLogger("decentlearn")``). While a RunLog is attached the
``decentlearn`` logger passes INFO records to its file; records reach the handlers above it
(the root's) exactly as they would without the RunLog, at the level they had before.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

__all__ = ["LOG_FORMAT", "LOGGER", "RunLog"]

#: The logger every decentlearn module logs under (``decentlearn.runner``, ``decentlearn.data``...).
LOGGER = "decentlearn"

#: One line per record.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Forward(logging.Handler):
    """Passes records at or above the level the user had set to the handlers above the
    ``decentlearn`` logger (propagation, without the lowered level)."""

    def __init__(self, threshold: int) -> None:
        super().__init__(logging.NOTSET)
        self.threshold = threshold

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < self.threshold:
            return
        logger = logging.getLogger(LOGGER).parent
        while logger is not None:  # as Logger.callHandlers does above the decentlearn logger
            for handler in logger.handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)
            logger = logger.parent if logger.propagate else None


class RunLog:
    """Appends the ``decentlearn`` log records of a run to ``path`` between :meth:`attach` and
    :meth:`detach` (see the module docstring). Attaching twice is a no-op."""

    def __init__(self, path: str | os.PathLike, level: int = logging.INFO) -> None:
        if isinstance(level, bool) or not isinstance(level, int):
            raise TypeError(f"level must be a logging level (int), got {type(level).__name__}")
        self.path, self.level = Path(path), level
        self._file: logging.Handler | None = None
        self._saved: tuple | None = None

    def attach(self) -> None:
        if self._file is not None:
            return
        logger = logging.getLogger(LOGGER)
        handler = logging.FileHandler(self.path, mode="a", encoding="utf-8", delay=False)
        handler.setLevel(self.level)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        self._file = handler
        before = logger.getEffectiveLevel()
        self._saved = (logger.level, logger.propagate, None)
        logger.addHandler(handler)
        if before > self.level:  # lower it for the file, keep what propagates as it was
            forward = _Forward(before) if logger.propagate else None
            self._saved = (logger.level, logger.propagate, forward)
            logger.setLevel(self.level)
            if forward is not None:
                logger.propagate = False
                logger.addHandler(forward)

    def detach(self) -> None:
        if self._file is None:
            return
        logger = logging.getLogger(LOGGER)
        level, propagate, forward = self._saved
        logger.removeHandler(self._file)
        if forward is not None:
            logger.removeHandler(forward)
        logger.setLevel(level)
        logger.propagate = propagate
        self._file.close()
        self._file, self._saved = None, None

    def __enter__(self) -> RunLog:
        self.attach()
        return self

    def __exit__(self, *exc) -> None:
        self.detach()

"""Termination signals as exceptions, so that ``finally`` blocks and context managers still run.

SIGINT already raises KeyboardInterrupt in Python's main thread; :func:`signals_as_interrupts`
makes other signals (SIGTERM, as sent by a scheduler ending a job) raise :class:`Interrupted`, a
KeyboardInterrupt subclass, for the duration of a block. A run directory's writer then records
the run as ``interrupted`` and a checkpointing run can stop at a round boundary
(``decentlearn.runner.checkpoint.stop_at_round_end``).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class Interrupted(KeyboardInterrupt):
    """A termination signal (SIGTERM, ...) raised as an exception by signals_as_interrupts."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def signals_as_interrupts(signums: tuple[int, ...] = (signal.SIGTERM,)) -> Iterator[None]:
    """Within the block, the given signals raise :class:`Interrupted` in the main thread (like
    SIGINT raises KeyboardInterrupt), so ``finally``/``__exit__`` code runs; the previous handlers
    are restored afterwards. Outside the main thread it does nothing (Python delivers signals to
    the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)

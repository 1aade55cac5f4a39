"""Error feedback, a wrapper around any compressor (``ef:SPEC``): what a compressor drops is kept
and sent later."""

from __future__ import annotations

import numpy as np

from decentlearn import ops
from decentlearn.compress.base import Compressor, Payload, register_wrapper
from decentlearn.state import declared_scratch


class ErrorFeedback:
    """Error feedback (Seide et al. 2014; Karimireddy et al. 2019) around any compressor.

    Keeps each row's residual e: sends C(x + e) and keeps e <- (x + e) - decompress(C(x + e)), so
    what a biased compressor drops is sent later instead of lost. A float32 x may be a column
    block ``M[:, a:b]`` of a wider matrix (rows contiguous): it is read in place.
    """

    #: Work arrays reused from message to message (x + e and the decoded message), not state.
    scratch = ("_corrected", "decoded")

    def __init__(self, compressor: Compressor) -> None:
        if not isinstance(compressor, Compressor):
            raise TypeError(f"compressor must be a Compressor, got {type(compressor).__name__}")
        self.compressor = compressor
        self.error: np.ndarray | None = None
        #: The last message as its receiver decodes it, decompress(C(x + e)) (None before the
        #: first); overwritten by the next compress() (its buffer is reused, as is x + e's).
        self.decoded: np.ndarray | None = None
        self._corrected: np.ndarray | None = None

    @property
    def spec(self) -> str:
        return f"ef:{self.compressor.spec}"

    #: Error feedback makes no compressor unbiased, but it keeps what a biased one drops.
    @property
    def unbiased(self) -> bool:
        return self.compressor.unbiased

    @property
    def biased(self) -> bool:
        return self.compressor.biased

    def variance_factor(self, dim: int) -> float | None:
        return self.compressor.variance_factor(dim)

    def compress(self, x: np.ndarray, **kwargs) -> Payload:
        if self.error is None or self.error.shape != x.shape:
            self.error = np.zeros(x.shape, dtype=x.dtype)
        nt = kwargs.get("n_threads")
        # x C-contiguous, or 2-D with contiguous rows (a column block of a wider matrix: one
        # tensor's columns of every row, read in place)
        rows = x.flags.c_contiguous or (x.ndim == 2 and x.strides[1] == x.itemsize
                                        and x.strides[0] >= x.shape[1] * x.itemsize)
        fast = (x.dtype == np.float32 and rows and self.error.dtype == np.float32
                and self.error.flags.c_contiguous)
        if fast:
            # x + e and (x + e) - decompress(...) on the run's threads, NumPy's bits (ops.axpby),
            # into buffers kept from round to round (no fresh pages to fault in every round)
            if self._corrected is None or self._corrected.shape != x.shape:
                self._corrected = np.empty(x.shape, dtype=np.float32)
                self.decoded = np.empty(x.shape, dtype=np.float32)
            corrected = ops.axpby(1, x, 1, self.error, out=self._corrected, n_threads=nt)
        else:
            corrected = x + self.error
        payload = self.compressor.compress(corrected, **kwargs)
        if fast:
            decoded = self.compressor.decompress(payload, n_threads=nt, out=self.decoded)
            ops.axpby(1, corrected, -1, decoded, out=self.error, n_threads=nt)
        else:
            self.decoded = decoded = self.compressor.decompress(payload, n_threads=nt)
            np.subtract(corrected, decoded, out=self.error)
        return payload

    def decompress(self, payload: Payload, **kwargs) -> np.ndarray:
        return self.compressor.decompress(payload, **kwargs)

    def reset(self) -> None:
        self.error = self.decoded = self._corrected = None

    def state_kinds(self) -> dict[str, str]:
        """One residual row per row compressed: per peer when the owner compresses the peers'
        rows (an owner that compresses something else, e.g. a server's model, says so)."""
        return {"error": "row"}

    def scratch_arrays(self) -> dict[str, np.ndarray]:
        return declared_scratch(self)

    def state_dict(self) -> dict:
        """The residuals (None before the first message), for checkpoints."""
        return {"error": None if self.error is None else self.error.copy()}

    def load_state_dict(self, state: dict) -> None:
        from decentlearn.state import load_attrs
        load_attrs(self, ("error",), state, "error_feedback.")

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.compressor!r})"


@register_wrapper("ef")
def wrap(inner: Compressor | ErrorFeedback, spec: str) -> ErrorFeedback:
    """``make("ef:SPEC")``: the compressor of SPEC in error feedback, applied once."""
    if isinstance(inner, ErrorFeedback):
        raise ValueError(f"{spec!r}: error feedback is applied once ('ef:' twice)")
    return ErrorFeedback(inner)

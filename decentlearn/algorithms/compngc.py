"""CompNGC: NGC whose cross-gradients are sent compressed, with error feedback per directed edge."""

from __future__ import annotations

import numpy as np

from decentlearn import compress
from decentlearn.algorithms.base import register
from decentlearn.algorithms.ngc import NGC
from decentlearn.state import nest, subtree

__all__ = ["CompNGC"]


@register("compngc")
class CompNGC(NGC):
    """NGC with compressed cross-gradients and error feedback per directed edge, so what a biased
    compressor drops is sent in later rounds. The compressor (default ``sign``: 1 bit per value
    and a float32 scale) is applied to each parameter tensor of the model separately (one scale
    per tensor, as the paper's scaled sign; ``model.layout()``), ~32x fewer bytes than float32.
    The model exchange stays float32. Needs a static undirected graph (the error memory is kept
    per edge)."""

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False

    def _setup_compressor(self) -> None:
        if self.compressor is None or self.compressor.spec == "none":
            self.compressor = compress.make("sign")
        if not self.comm.static:
            raise ValueError("compngc keeps an error-feedback memory per edge and needs a static "
                             "graph (a topology with period 1)")
        layout = getattr(self.model, "layout", None)
        dim = self.model.dim
        #: Column slices compressed separately (the model's tensors; the whole row otherwise).
        self.tensor_slices = [sl for _, sl, _ in layout()] if layout else [slice(0, dim)]
        codec = self.compressor
        if not isinstance(codec, compress.Compressor):  # a backend's wrapper (the MPI timer)
            codec = compress.make(codec.spec)
        self._memories = [compress.ErrorFeedback(codec) for _ in self.tensor_slices]
        self._decoder = self.compressor

    def state_kinds(self) -> dict[str, str]:
        """The error memories hold one row per edge of the static graph (CSR order), not per
        peer: a process hosting a block of peers holds the rows of its peers' in-edges,
        ``edge_range()`` (the MPI backend gathers them in edge order into a checkpoint and cuts
        them on resume)."""
        kinds = super().state_kinds()
        for k, ef in enumerate(self._memories):
            kinds.update({f"memories.{k}.{key}": "edge" for key in ef.state_dict()})
        return kinds

    def edge_range(self) -> tuple[int, int]:
        """[e0, e1): the global indices of the edges whose rows this process holds."""
        recv, _, _ = self.comm.edges(0)
        lo, n = getattr(self.comm, "peer0", 0), self.comm.n_peers
        e0, e1 = np.searchsorted(recv, [lo, lo + n])
        return int(e0), int(e1)

    def state_dict(self) -> dict:
        out = super().state_dict()
        for k, ef in enumerate(self._memories):  # the per-edge residuals of every tensor
            out.update(nest(f"memories.{k}", ef.state_dict()))
        return out

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        for k, ef in enumerate(self._memories):
            ef.load_state_dict(subtree(f"memories.{k}", state))

    def _exchange_cross(self, cross: np.ndarray, t: int, first: int) -> np.ndarray:
        received = None
        for sl, ef in zip(self.tensor_slices, self._memories):  # a few tensors, not peers
            part = np.ascontiguousarray(cross[:, sl])
            payload = ef.compress(part, seed=self.seed, step=t, peer0=first,
                                  n_threads=self.comm.n_threads)
            self.cross_bytes += self.comm.total(payload.nbytes)
            got = self.comm.reply(self._decoder, payload, t)
            if received is None:  # the out-edges' rows (all edges in one process)
                received = np.empty((got.shape[0], cross.shape[1]), dtype=np.float32)
            received[:, sl] = got
        return received

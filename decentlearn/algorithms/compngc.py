"""CompNGC: NGC whose cross-gradients are sent compressed, with error feedback per directed edge
(Aketi, Kodge and Roy; the authors' ``optimizers/compressngc.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decentlearn import compress, ops
from decentlearn.algorithms.base import option, register
from decentlearn.algorithms.ngc import NGC, _check_choice
from decentlearn.state import nest, subtree

#: ``compngc_local``: the gradients a peer uses itself go through the compressor (the authors'
#: code) or are used exact.
LOCAL = ("compressed", "exact")

__all__ = ["CompNGC"]


@register("compngc")
class CompNGC(NGC):
    """NGC (steps 1-6 of :class:`~decentlearn.algorithms.NGC`) whose cross-gradients (step 4) are
    sent compressed, with error feedback per directed edge, so what a biased compressor drops is
    sent in later rounds. The compressor (default ``sign``: 1 bit per value and a float32 scale,
    the paper's scaled sign ||v||_1 / size · sign(v)) is applied to each parameter tensor of the
    model separately (one scale per tensor, as the authors' code; ``model.layout()``), ~32x fewer
    bytes than float32. The model exchange stays float32.

    As in the authors' ``CompNGC_sender`` / ``CompNGC_receiver`` (``compngc_local=
    "compressed"``, the default), the gradients a peer uses itself go through the same compressor
    and error feedback: its model-variant cross-gradients enter g~ as the compressed messages it
    sends (memory per directed edge), and its self-gradient is compressed too, with a memory of
    its own per peer (no bytes: it is not sent). ``"exact"`` uses both uncompressed
    (decentlearn's earlier form). decentlearn's ``sign`` sends 0 as +scale (1 bit per value);
    the authors' ``torch.sign`` keeps 0 (identical unless a value is exactly 0).
    Needs a static undirected graph (the error memory is kept per edge)."""

    #: Its server rounds / point-to-point replies are not timed by decentlearn.network yet.
    simulated_time = False
    #: Work arrays: each tensor's received rows and the assembled self-gradient matrix.
    scratch = ("_got", "_self_out")

    @dataclass(frozen=True)
    class Options(NGC.Options):
        compngc_local: str = option("compressed", "the self- and model-variant gradients a peer "
                                    "uses itself: compressed with error feedback (the authors' "
                                    "code) or exact", metavar="compressed|exact")

        def __post_init__(self) -> None:
            super().__post_init__()
            _check_choice(self.compngc_local, "compngc_local", LOCAL)

    def __init__(self, *, compngc_local: str = "compressed", **kwargs) -> None:
        _check_choice(compngc_local, "compngc_local", LOCAL)
        #: Whether the self- and model-variant gradients go through the compressor.
        self.compress_local = compngc_local == "compressed"
        super().__init__(**kwargs)

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
        #: Error feedback of each peer's own self-gradient, one memory row per peer and tensor.
        self._self_memories = [compress.ErrorFeedback(codec) for _ in self.tensor_slices]
        self._codec = codec
        self._decoder = self.compressor
        n = len(self.tensor_slices)
        self._got = [None] * n
        self._self_out = None

    def state_kinds(self) -> dict[str, str]:
        """The error memories hold one row per edge of the static graph (CSR order), not per
        peer: a process hosting a block of peers holds the rows of its peers' in-edges,
        ``edge_range()`` (the MPI backend gathers them in edge order into a checkpoint and cuts
        them on resume)."""
        kinds = super().state_kinds()
        for k, ef in enumerate(self._memories):
            kinds.update({f"memories.{k}.{key}": "edge" for key in ef.state_dict()})
        if self.compress_local:
            for k, ef in enumerate(self._self_memories):
                kinds.update({f"self_memories.{k}.{key}": "row" for key in ef.state_dict()})
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
        if self.compress_local:  # the per-peer residuals of the self-gradients
            for k, ef in enumerate(self._self_memories):
                out.update(nest(f"self_memories.{k}", ef.state_dict()))
        return out

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        for k, ef in enumerate(self._memories):
            ef.load_state_dict(subtree(f"memories.{k}", state))
        if self.compress_local:
            for k, ef in enumerate(self._self_memories):
                ef.load_state_dict(subtree(f"self_memories.{k}", state))

    def _exchange_cross(self, cross: np.ndarray, t: int,
                        first: int) -> list[tuple[slice, np.ndarray, np.ndarray]]:
        """Each tensor's columns of the cross-gradients, compressed with its error feedback (read
        in place: ef's x + e takes the column block), sent and decoded: one block per tensor,
        (columns, received rows, the senders' own copy of what they sent as ef decoded it, or
        the exact columns with ``compngc_local="exact"``)."""
        nt = self.comm.n_threads
        n_out = self._n_out_edges(t)
        blocks = []
        for k, (sl, ef) in enumerate(zip(self.tensor_slices, self._memories)):  # a few tensors
            width = sl.stop - sl.start
            payload = ef.compress(cross[:, sl], seed=self.seed, step=t, peer0=first,
                                  n_threads=nt)
            self.cross_bytes += self.comm.total(payload.nbytes)
            got = self.comm.reply(self._decoder, payload, t,
                                  out=self._kept("_got", (n_out, width), k))
            # ef.decoded: this tensor's memory's buffer, valid until its next compress()
            local = ef.decoded if self.compress_local else cross[:, sl]
            blocks.append((sl, got, local))
        return blocks

    def _self_term(self, g_self: np.ndarray, t: int, n_edges: int) -> np.ndarray:
        """The authors' receiver compresses its own self-gradient per tensor with error feedback
        (a memory per peer); keyed by (seed, t, n_edges + peer) so its random draws, if any, are
        apart from those of the round's edge messages (keys 0 .. n_edges - 1)."""
        if not self.compress_local:
            return g_self
        out = self._kept("_self_out", g_self.shape)
        peer0 = n_edges + self.comm.peer0
        nt = self.comm.n_threads
        for k, (sl, ef) in enumerate(zip(self.tensor_slices, self._self_memories)):
            ef.compress(g_self[:, sl], seed=self.seed, step=t, peer0=peer0, n_threads=nt)
            ops.copy2d(ef.decoded, out[:, sl], n_threads=nt)
        return out

    def scratch_arrays(self) -> dict[str, np.ndarray]:
        out = super().scratch_arrays()
        for name, memories in (("memories", self._memories),
                               ("self_memories", self._self_memories)):
            for k, ef in enumerate(memories):
                out.update(nest(f"{name}.{k}", ef.scratch_arrays()))
        return out

"""Compressors: what peers send instead of their float32 vectors, and exactly how many bytes.

A compressor works on a (n_peers, dim) float32 matrix, one message per row (a 1-D vector is one
row). ``compress(x, seed=, step=, peer0=)`` returns a ``Payload``; ``decompress(payload)`` returns
the decoded float32 array of the input's shape. ``Payload.nbytes`` is the exact size of the wire
messages and the only source of communication cost in the project; ``Payload.to_bytes()`` writes
them, and ``compressor.from_bytes(data, shape)`` parses them back, treating the bytes as untrusted:
any truncated, oversized or inconsistent message raises ValueError.

Stochastic compressors draw from a counter-based generator keyed by (seed, step, peer, index)
(natural, dither, qsgd, bucket and int8 from the compressors' one-round generator, random-k from
the two-round one; docs/compression.md#randomness), so results are bit-identical for any thread
count and any split of rows between processes.
Error feedback is a wrapper (``ErrorFeedback(compressor)``), not a flag. Specs such as
``"topk:0.01"`` are parsed by the registry: ``make("topk:0.01")``.

The package: ``base`` (Compressor, Payload, the registry, ``make``), one module per compressor
(``identity`` is ``none``; ``topk``, ``randk``, ``threshold``, ``qsgd``, ``bucket``, ``sign``,
``int8``, ``natural``, ``dither``, ``stc``), ``error_feedback`` (the ``ef:`` wrapper), and the
helpers they share: ``wire`` (bounds-checked reading of untrusted bytes), ``sparse_pairs`` (the
(index, value) messages of the sparsifiers) and ``quantizer`` (fixed-length rows).
"""

# Every compressor module, imported here so that the registry is complete whatever is imported
# first.
from decentlearn.compress import (  # noqa: F401
    base,
    bucket,
    dither,
    error_feedback,
    identity,
    int8,
    natural,
    qsgd,
    quantizer,
    randk,
    sign,
    sparse_pairs,
    stc,
    threshold,
    topk,
    wire,
)
from decentlearn.compress.base import (
    MAX_EMPTY_ROWS,
    Compressor,
    Payload,
    available,
    make,
    parse_int,
    parse_ratio,
    register,
    register_wrapper,
)
from decentlearn.compress.bucket import Bucket
from decentlearn.compress.dither import NaturalDithering
from decentlearn.compress.error_feedback import ErrorFeedback
from decentlearn.compress.identity import Identity
from decentlearn.compress.int8 import Int8
from decentlearn.compress.natural import Natural
from decentlearn.compress.qsgd import QSGD
from decentlearn.compress.randk import RandK
from decentlearn.compress.sign import Sign
from decentlearn.compress.stc import STC
from decentlearn.compress.threshold import Threshold
from decentlearn.compress.topk import TopK
from decentlearn.compress.wire import Reader

__all__ = [
    "MAX_EMPTY_ROWS",
    "QSGD",
    "STC",
    "Bucket",
    "Compressor",
    "ErrorFeedback",
    "Identity",
    "Int8",
    "Natural",
    "NaturalDithering",
    "Payload",
    "RandK",
    "Reader",
    "Sign",
    "Threshold",
    "TopK",
    "available",
    "make",
    "parse_int",
    "parse_ratio",
    "register",
    "register_wrapper",
]

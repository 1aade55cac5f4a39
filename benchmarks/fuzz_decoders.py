"""Fuzz campaign over every compressor's decoder, checked against independent NumPy decoders.

    python benchmarks/fuzz_decoders.py --mode mutate  [--runs 1000000] [--seed S] [--json FILE]
    python benchmarks/fuzz_decoders.py --mode atheris [--runs 1000000] [--json FILE]

Each input is (spec, declared shape, bytes); the library decodes it with ``from_bytes`` +
``decompress`` and decentlearn/_reference/wire.py decodes it independently (NumPy and ``struct``
only, no library parsing code, no C). The only acceptable outcomes are

* both refuse it (the library with a ValueError), or
* both decode it, to bit-identical float32 arrays of the declared shape.

Anything else is counted: ``mismatches`` (the library decoded what the reference refuses, or
decoded something else: a silent wrong output), ``over_refused`` (the library refused what the
reference decodes), ``crashes`` (any other exception from the library; a segfault or a sanitizer
report ends the process, and the campaign with it). Rows declared near 2^31 elements are compared
in their sparse form (indices and values) without building the dense array.

``mutate`` (no dependency) draws, per round, one of: a valid message for a random compressor and
shape, truncated / extended / bit-flipped / replaced by random bytes; a hand-made sparse message
(top-k, random-k, threshold, STC) whose indices sit at the edges of a declared dim near 2^31 or
2^32; a zero-dim shape or an absurd row count. ``atheris`` (``pip install atheris``) is libFuzzer,
coverage-guided over the Python parsing code. For the sanitizer campaign (AddressSanitizer +
UndefinedBehaviorSanitizer build, mutate mode) use tools/sanitize.sh; docs/testing.md has the
figures and the command that reproduces them.
"""

import argparse
import json
import os
import struct
import sys
import time

import numpy as np

SPECS = ["none", "natural", "dither:8", "dither:3:inf", "dither:1", "dither:31:1", "topk:0.05",
         "topk:0.07", "randk:0.1", "randk:0.1:unbiased", "threshold:1.0", "threshold:0.0",
         "stc:0.05", "stc:0.07", "qsgd:16", "qsgd:3", "qsgd:1", "qsgd:127", "bucket:8:128",
         "bucket:4:64", "bucket:4:16", "sign", "int8"]
#: Sparse specs whose k stays tiny at dims near 2^31, so that edge messages are a few bytes.
HUGE_SPECS = ["topk:1e-09", "randk:1e-09", "randk:1e-09:unbiased", "threshold:1.0", "stc:1e-09"]
HUGE_DIMS = [2**31 - 2, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**32, 2**32 + 7, 2**40]
#: Above this many decoded bytes, an accepted input is compared in its sparse form only.
DENSE_LIMIT = 1 << 26
COUNTS = {"inputs": 0, "refused": 0, "decoded": 0, "decoded_sparse_only": 0, "mismatches": 0,
          "over_refused": 0, "crashes": 0, "reference_errors": 0, "too_short": 0,
          "max_seconds_per_input": 0.0}
EXAMPLES: list[dict] = []


def _example(kind: str, spec: str, shape, blob: bytes, detail: str) -> None:
    if len(EXAMPLES) < 20:
        EXAMPLES.append({"kind": kind, "spec": spec, "shape": list(shape), "bytes": len(blob),
                         "head": blob[:96].hex(), "detail": detail[:300]})


def _impl_sparse(payload) -> list[tuple[np.ndarray, np.ndarray]]:
    """(indices, values) per row from a sparse Payload's arrays (no dense array built)."""
    kind, a = payload.compressor.kind, payload.arrays
    if kind in ("topk", "randk"):
        return [(a["idx"][r].astype(np.int64), a["val"][r]) for r in range(payload.n_rows)]
    if kind == "threshold":
        off = a["offsets"]
        return [(a["idx"][off[r]:off[r + 1]].astype(np.int64), a["val"][off[r]:off[r + 1]])
                for r in range(payload.n_rows)]
    if kind == "stc":
        vals = np.where(a["negative"] != 0, -a["mu"][:, None], a["mu"][:, None]).astype(np.float32)
        return [(a["positions"][r].astype(np.int64), vals[r]) for r in range(payload.n_rows)]
    raise AssertionError(f"{kind} is not sparse")


_MADE: dict = {}


def _make(compress, spec: str):
    if spec not in _MADE:
        _MADE[spec] = compress.make(spec)
    return _MADE[spec]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def check(compress, ref, spec: str, blob: bytes, shape: tuple) -> None:
    """One untrusted input, decoded by the library and by the reference; tallies the outcome."""
    COUNTS["inputs"] += 1
    t0 = time.perf_counter()
    c = _make(compress, spec)
    rows_dim = (1,) + tuple(shape) if len(shape) == 1 else tuple(shape)
    dense = 4 * rows_dim[0] * rows_dim[1] <= DENSE_LIMIT
    got, error = None, None
    try:
        payload = c.from_bytes(blob, shape)
        got = c.decompress(payload) if dense else _impl_sparse(payload)
    except ValueError as e:
        error = e
    except Exception as e:  # noqa: BLE001 - any other exception is a finding
        COUNTS["crashes"] += 1
        _example("crash", spec, shape, blob, f"{type(e).__name__}: {e}")
        return
    try:
        want = ref.decode(spec, blob, shape) if dense else ref.parse_sparse(spec, blob, shape)
    except ValueError:
        want = None
    except Exception as e:  # noqa: BLE001
        COUNTS["reference_errors"] += 1
        _example("reference_error", spec, shape, blob, f"{type(e).__name__}: {e}")
        return
    if error is not None:
        if want is None:
            COUNTS["refused"] += 1
        else:
            COUNTS["over_refused"] += 1
            _example("over_refused", spec, shape, blob, str(error))
    elif want is None:
        COUNTS["mismatches"] += 1
        _example("mismatch", spec, shape, blob, "decoded an input the reference refuses")
    elif dense:
        if got.shape != tuple(shape) or got.dtype != np.float32 or \
                not _same_bits(got.reshape(want.shape), want):
            COUNTS["mismatches"] += 1
            _example("mismatch", spec, shape, blob, "decoded values differ from the reference")
        else:
            COUNTS["decoded"] += 1
    else:
        same = len(got) == len(want) and all(
            np.array_equal(gi, wi) and _same_bits(gv, wv) for (gi, gv), (wi, wv) in zip(got, want))
        if not same:
            COUNTS["mismatches"] += 1
            _example("mismatch", spec, shape, blob, "sparse rows differ from the reference")
        else:
            COUNTS["decoded_sparse_only"] += 1
    dt = time.perf_counter() - t0
    COUNTS["max_seconds_per_input"] = max(COUNTS["max_seconds_per_input"], round(dt, 4))


def mutations(wire: bytes, rng: np.random.Generator) -> list[bytes]:
    flipped = bytearray(wire)
    for _ in range(int(rng.integers(1, 4))):
        if flipped:
            flipped[int(rng.integers(0, len(flipped)))] ^= 1 << int(rng.integers(0, 8))
    return [wire[:int(rng.integers(0, len(wire) + 1))],
            wire + rng.integers(0, 256, int(rng.integers(1, 16)), dtype=np.uint8).tobytes(),
            bytes(flipped),
            rng.integers(0, 256, int(rng.integers(0, 2 * len(wire) + 8)), dtype=np.uint8).tobytes()]


def _edge_indices(dim: int, count: int, rng: np.random.Generator) -> list[int]:
    pool = np.array([0, 1, dim - 2, dim - 1, dim, dim + 1, 2**31 - 2, 2**31 - 1, 2**31,
                     2**31 + 1, 2**32 - 1, int(rng.integers(0, 2**32))], dtype=object)
    idx = [int(v) % 2**32 for v in pool[rng.integers(0, len(pool), count)]]
    if rng.random() < 0.5:  # increasing runs just below dim: valid when dim allows it
        top = min(dim, 2**32)
        idx = [v for v in range(max(0, top - count), top)]
    return idx if rng.random() < 0.3 else sorted(set(idx))


def _sparse_edge_message(ref, spec: str, dim: int, rng: np.random.Generator) -> bytes:
    """One row's hand-made message whose indices sit at the edges of dim (valid or not)."""
    name = spec.split(":")[0]
    if name == "stc":
        k = ref.ratio_k(spec.split(":")[1], dim) if dim <= 2**62 else 3
        from decentlearn._reference import stc as ref_stc
        pos = sorted({int(v) for v in _edge_indices(dim, k, rng) if v < min(dim, 2**31 - 1)})
        if len(pos) == k and rng.random() < 0.7:
            b = ref_stc.golomb_param(k, min(dim, 2**31 - 1))
            neg = rng.integers(0, 2, k).astype(np.uint8)
            bits = ref_stc._encode_row(np.array(pos, np.int64), neg, min(dim, 2**31 - 1), b)
            nbits = len(bits)
            code = np.packbits(np.array(bits, np.uint8), bitorder="little").tobytes()
        else:
            nbits = int(rng.integers(0, 200))
            code = rng.integers(0, 256, (nbits + 7) // 8, dtype=np.uint8).tobytes()
        mu = float(rng.choice([0.0, 1.5, -1.0, np.inf, np.nan, 1e-45]))
        if rng.random() < 0.1:
            nbits ^= 1 << int(rng.integers(0, 32))
        return struct.pack("<IfI", k, mu, nbits % 2**32) + code
    if name == "threshold":
        idx = _edge_indices(dim, int(rng.integers(0, 5)), rng)
        head = struct.pack("<I", len(idx))
    else:
        k = ref.ratio_k(spec.split(":")[1], dim) if dim <= 2**62 else 3
        idx = _edge_indices(dim, k, rng)
        idx = (idx + [0] * k)[:k]
        head = b""
    vals = rng.standard_normal(len(idx)).astype(np.float32)
    if rng.random() < 0.1 and len(vals):
        vals[int(rng.integers(0, len(vals)))] = np.nan
    return head + np.array(idx, "<u4").tobytes() + vals.astype("<f4").tobytes()


def _zero_dim_message(spec: str, rows: int, rng: np.random.Generator) -> bytes:
    name = spec.split(":")[0]
    per_row = {"threshold": struct.pack("<I", 0), "stc": struct.pack("<IfI", 0, 1.0, 0),
               "dither": struct.pack("<f", 1.0), "qsgd": struct.pack("<f", 1.0),
               "sign": struct.pack("<f", 1.0), "int8": struct.pack("<f", 1.0)}.get(name, b"")
    choice = rng.random()
    if choice < 0.5 and rows <= 4096:
        return per_row * rows
    if choice < 0.75:
        return b""
    return rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8).tobytes()


def run_mutate(compress, ref, specs, runs: int, seed: int, report) -> None:
    rng = np.random.default_rng(seed)
    last = 0
    while COUNTS["inputs"] < runs:
        kind = rng.random()
        if kind < 0.84:  # mutated valid messages
            spec = specs[int(rng.integers(0, len(specs)))]
            rows = int(rng.integers(1, 4))
            dim = int(rng.integers(1, 2000)) if rng.random() < 0.2 else int(rng.integers(1, 200))
            x = (rng.standard_normal((rows, dim)) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
            wire = _make(compress, spec).compress(x, seed=int(rng.integers(0, 2**31))).to_bytes()
            shape = (dim,) if rows == 1 and rng.random() < 0.3 else (rows, dim)
            blobs = mutations(wire, rng) + [wire]
            for blob in blobs:
                check(compress, ref, spec, blob, shape)
        elif kind < 0.94:  # sparse messages at the edges of dims near 2^31 and 2^32
            spec = HUGE_SPECS[int(rng.integers(0, len(HUGE_SPECS)))]
            dim = HUGE_DIMS[int(rng.integers(0, len(HUGE_DIMS)))]
            rows = int(rng.integers(1, 3))
            blob = b"".join(_sparse_edge_message(ref, spec, dim, rng) for _ in range(rows))
            check(compress, ref, spec, blob, (rows, dim))
            if rows == 1:
                check(compress, ref, spec, blob, (dim,))
        else:  # zero-dim shapes and absurd row counts
            spec = specs[int(rng.integers(0, len(specs)))]
            rows = int(rng.choice([0, 1, 2, 7, 64, 4096, 65537, 10**7, 2**40, 2**62],
                                  p=[.1, .15, .15, .15, .15, .05, .07, .08, .05, .05]))
            dim = 0 if rng.random() < 0.7 else int(rng.integers(1, 50))
            blob = _zero_dim_message(spec, rows, rng) if dim == 0 else \
                rng.integers(0, 256, int(rng.integers(0, 256)), dtype=np.uint8).tobytes()
            check(compress, ref, spec, blob, (rows, dim))
        if COUNTS["inputs"] - last >= 20_000:
            last = COUNTS["inputs"]
            report()


def run_atheris(compress, ref, specs, runs: int, report, rest) -> None:
    import atheris

    corpus = "/tmp/decentlearn-fuzz-corpus"
    os.makedirs(corpus, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(400):  # seed corpus: valid messages, with the choice of spec and shape in front
        spec = specs[i % len(specs)]
        rows, dim = int(rng.integers(1, 4)), int(rng.integers(1, 200))
        x = rng.standard_normal((rows, dim)).astype(np.float32)
        blob = compress.make(spec).compress(x, seed=i).to_bytes()
        with open(f"{corpus}/seed{i:04d}", "wb") as f:
            f.write(bytes([specs.index(spec), rows - 1, dim & 0xFF, dim >> 8]) + blob)

    def one_input(data: bytes) -> None:
        if len(data) < 4:
            COUNTS["too_short"] += 1
            return
        shape = (1 + data[1] % 4, (data[2] | (data[3] << 8)) % 4096 + 1)
        check(compress, ref, specs[data[0] % len(specs)], data[4:], shape)
        if COUNTS["inputs"] % 20_000 == 0:
            report()

    atheris.Setup([sys.argv[0], f"-runs={runs}", "-max_len=4096", corpus, *rest], one_input)
    atheris.Fuzz()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["atheris", "mutate"], default="mutate")
    p.add_argument("--runs", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--json", default=None)
    args, rest = p.parse_known_args()
    if args.mode == "atheris":
        import atheris

        with atheris.instrument_imports(include=["decentlearn"]):
            from decentlearn import compress
    else:
        from decentlearn import compress
    from decentlearn import _core
    from decentlearn._reference import wire as ref

    specs = [s for s in SPECS if s.split(":")[0] in compress.available()]
    start = time.time()

    def report() -> None:
        out = dict(COUNTS, mode=args.mode, seed=args.seed, core=_core.__file__,
                   asan="libasan" in os.environ.get("LD_PRELOAD", ""), specs=specs + HUGE_SPECS,
                   seconds=round(time.time() - start, 1), examples=EXAMPLES)
        print(json.dumps({k: v for k, v in out.items() if k not in ("specs", "examples", "core")}),
              file=sys.stderr, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)

    if args.mode == "atheris":
        run_atheris(compress, ref, specs, args.runs, report, rest)
    else:
        run_mutate(compress, ref, specs, args.runs, args.seed, report)
    report()
    bad = COUNTS["mismatches"] + COUNTS["crashes"] + COUNTS["over_refused"] + \
        COUNTS["reference_errors"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

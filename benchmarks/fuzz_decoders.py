"""Long fuzz runs of every compressor's decoder: from_bytes + decompress on untrusted bytes.

    python benchmarks/fuzz_decoders.py --mode atheris [--runs 1000000] [--json FILE]
    python benchmarks/fuzz_decoders.py --mode mutate  [--runs 1000000] [--json FILE]

``atheris`` (``pip install atheris``): libFuzzer, coverage-guided over the Python parsing code,
which drives the C decoders. ``mutate``: no dependency; each input is a valid message for a random
compressor and shape, truncated, extended, bit-flipped or replaced by random bytes. The only
acceptable outcomes are a ValueError or a float32 array of the right shape; anything else (another
exception, a crash, a sanitizer report) stops the run. For out-of-bounds checks inside the C
decoders, run ``mutate`` on an AddressSanitizer build (gcc's libasan would break atheris's
coverage, so use mutate mode there):

    CFLAGS="-fsanitize=address -fno-omit-frame-pointer" LDFLAGS=-fsanitize=address \\
        python setup.py build_ext --inplace --force
    LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \\
        python benchmarks/fuzz_decoders.py --mode mutate --runs 1000000

The documented results are in docs/compression.md.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

SPECS = ["none", "natural", "dither:8", "dither:3:inf", "topk:0.05", "randk:0.1", "threshold:1.0",
         "stc:0.05", "qsgd:16", "qsgd:3", "bucket:8:128", "bucket:4:64", "sign", "int8"]
COUNTS = {"inputs": 0, "too_short": 0, "value_error": 0, "decoded": 0}


def check(compress, spec: str, blob: bytes, shape: tuple[int, int]) -> None:
    """One untrusted input: ValueError or a float32 array of the shape; anything else raises."""
    COUNTS["inputs"] += 1
    c = compress.make(spec)
    try:
        y = c.decompress(c.from_bytes(blob, shape))
    except ValueError:
        COUNTS["value_error"] += 1
        return
    if y.shape != shape or y.dtype != np.float32:
        raise AssertionError(f"{spec}: decoded shape {y.shape} dtype {y.dtype}")
    COUNTS["decoded"] += 1


def mutations(wire: bytes, rng: np.random.Generator) -> list[bytes]:
    flipped = bytearray(wire)
    for _ in range(int(rng.integers(1, 4))):
        if flipped:
            flipped[int(rng.integers(0, len(flipped)))] ^= 1 << int(rng.integers(0, 8))
    return [wire[:int(rng.integers(0, len(wire) + 1))],
            wire + rng.integers(0, 256, int(rng.integers(1, 16)), dtype=np.uint8).tobytes(),
            bytes(flipped),
            rng.integers(0, 256, int(rng.integers(0, 2 * len(wire) + 8)), dtype=np.uint8).tobytes()]


def run_mutate(compress, specs, runs: int, report) -> None:
    rng = np.random.default_rng(12345)
    while COUNTS["inputs"] < runs:
        spec = specs[int(rng.integers(0, len(specs)))]
        rows, dim = int(rng.integers(1, 4)), int(rng.integers(1, 2000))
        x = (rng.standard_normal((rows, dim)) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
        wire = compress.make(spec).compress(x, seed=int(rng.integers(0, 2**31))).to_bytes()
        for blob in mutations(wire, rng):
            check(compress, spec, blob, (rows, dim))
        if COUNTS["inputs"] % 20_000 < 4:
            report()


def run_atheris(compress, specs, runs: int, report, rest) -> None:
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
        check(compress, specs[data[0] % len(specs)], data[4:], shape)
        if COUNTS["inputs"] % 20_000 == 0:
            report()

    atheris.Setup([sys.argv[0], f"-runs={runs}", "-max_len=4096", corpus, *rest], one_input)
    atheris.Fuzz()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["atheris", "mutate"], default="mutate")
    p.add_argument("--runs", type=int, default=1_000_000)
    p.add_argument("--json", default=None)
    args, rest = p.parse_known_args()
    if args.mode == "atheris":
        import atheris

        with atheris.instrument_imports(include=["decentlearn"]):
            from decentlearn import compress
    else:
        from decentlearn import compress

    specs = [s for s in SPECS if s.split(":")[0] in compress.available()]
    start = time.time()

    def report() -> None:
        out = dict(COUNTS, mode=args.mode, specs=specs, seconds=round(time.time() - start, 1))
        print(json.dumps(out), file=sys.stderr, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)

    if args.mode == "atheris":
        run_atheris(compress, specs, args.runs, report, rest)
    else:
        run_mutate(compress, specs, args.runs, report)
        report()


if __name__ == "__main__":
    main()

"""Long fuzz run of every compressor's decoder: from_bytes + decompress on untrusted bytes.

    python benchmarks/fuzz_decoders.py [--runs 1000000] [--seed-corpus 200] [--json FILE]

Uses atheris (libFuzzer for Python; ``pip install atheris``), coverage-guided over the Python
parsing code, which drives the C decoders. Each input picks a compressor, a shape, and either a
mutated valid message or raw bytes. The only acceptable outcomes are a ValueError or a finite-shape
float32 array; anything else (another exception, a crash, a sanitizer report) stops the run with
the reproducer saved by libFuzzer. For out-of-bounds checks inside the C decoders, build the
extension with AddressSanitizer first:

    CFLAGS="-fsanitize=address -fno-omit-frame-pointer" LDFLAGS=-fsanitize=address \\
        python setup.py build_ext --inplace --force
    LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \\
        python benchmarks/fuzz_decoders.py --runs 1000000

The result of the last documented run is in docs/compression.md.
"""

import argparse
import json
import sys
import time

import atheris
import numpy as np

with atheris.instrument_imports(include=["decentlearn"]):
    from decentlearn import compress

SPECS = ["none", "natural", "dither:8", "dither:3:inf", "topk:0.05", "randk:0.1", "threshold:1.0",
         "stc:0.05", "qsgd:16", "qsgd:3", "bucket:8:128", "bucket:4:64", "sign", "int8"]
COUNTS = {"inputs": 0, "value_error": 0, "decoded": 0}


def build_corpus(specs, n):
    rng = np.random.default_rng(0)
    corpus = []
    for i in range(n):
        spec = specs[i % len(specs)]
        rows, dim = int(rng.integers(1, 4)), int(rng.integers(1, 200))
        x = rng.standard_normal((rows, dim)).astype(np.float32)
        wire = compress.make(spec).compress(x, seed=i).to_bytes()
        corpus.append(bytes([specs.index(spec), rows, dim & 0xFF, dim >> 8]) + wire)
    return corpus


def one_input(data: bytes, specs, report) -> None:
    COUNTS["inputs"] += 1
    if COUNTS["inputs"] % 20_000 == 0:
        report()
    if len(data) < 4:
        return
    spec = specs[data[0] % len(specs)]
    rows, dim = 1 + data[1] % 4, (data[2] | (data[3] << 8)) % 4096 + 1
    c = compress.make(spec)
    try:
        y = c.decompress(c.from_bytes(data[4:], (rows, dim)))
    except ValueError:
        COUNTS["value_error"] += 1
        return
    if y.shape != (rows, dim) or y.dtype != np.float32:
        raise AssertionError(f"{spec}: decoded shape {y.shape} dtype {y.dtype}")
    COUNTS["decoded"] += 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1_000_000)
    p.add_argument("--seed-corpus", type=int, default=200)
    p.add_argument("--json", default=None)
    args, rest = p.parse_known_args()
    specs = [s for s in SPECS if s.split(":")[0] in compress.available()]
    corpus_dir = "/tmp/decentlearn-fuzz-corpus"
    import os
    os.makedirs(corpus_dir, exist_ok=True)
    for i, blob in enumerate(build_corpus(specs, args.seed_corpus)):
        with open(f"{corpus_dir}/seed{i:04d}", "wb") as f:
            f.write(blob)
    start = time.time()

    def report():
        out = dict(COUNTS, specs=specs, seconds=round(time.time() - start, 1))
        print(json.dumps(out), file=sys.stderr, flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)

    atheris.Setup([sys.argv[0], f"-runs={args.runs}", "-max_len=4096", corpus_dir, *rest],
                  lambda data: one_input(data, specs, report))
    atheris.Fuzz()


if __name__ == "__main__":
    main()

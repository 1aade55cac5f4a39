#!/usr/bin/env bash
# Sanitizer job: builds decentlearn._core with AddressSanitizer + UndefinedBehaviorSanitizer in a
# separate build directory (the in-place .so of the normal build is never touched), then runs the
# kernel tests, a short CLI run and a fuzz campaign of every decoder against the NumPy reference
# decoders.
#
#   tools/sanitize.sh                 # build, kernel tests, CLI run, 20 000-input fuzz campaign (CI)
#   FUZZ_RUNS=1000000 tools/sanitize.sh fuzz   # only the fuzz campaign, 1M inputs
#   tools/sanitize.sh build | tests | cli | fuzz   # one step
#
# Any sanitizer report aborts the process (-fno-sanitize-recover, abort_on_error), so a passing
# job means 0 reports. See docs/testing.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${SANITIZE_DIR:-$ROOT/build/sanitize}
PY=${PYTHON:-python}
FUZZ_RUNS=${FUZZ_RUNS:-20000}
FUZZ_SEED=${FUZZ_SEED:-1}
STEP=${1:-all}

LIBASAN=$(${CC:-gcc} -print-file-name=libasan.so)
# libstdc++ is preloaded with the ASan runtime: a C++ extension loaded later (matplotlib's ft2font,
# which a CLI run imports for its figures) otherwise fails to start under the preloaded runtime.
LIBSTDCXX=$(${CC:-gcc} -print-file-name=libstdc++.so.6)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

build() {
    # The sanitized package: a copy of the Python sources next to the sanitized extension.
    rm -rf "$OUT/site" && mkdir -p "$OUT/site"
    (cd "$ROOT" && DECENTLEARN_SANITIZE=1 DECENTLEARN_REQUIRE_OPENMP=1 "$PY" setup.py -q build_ext \
        --build-lib "$OUT/lib" --build-temp "$OUT/tmp" --force)
    (cd "$ROOT" && tar --exclude='*.so' --exclude='__pycache__' -cf - decentlearn) |
        tar -xf - -C "$OUT/site"
    cp "$OUT"/lib/decentlearn/_core*.so "$OUT/site/decentlearn/"
}

# Runs python with the sanitizer runtimes preloaded (python itself is not instrumented) and the
# sanitized package first on the path, from a directory where the source tree is not importable.
san_python() {
    (cd "$OUT/site" && LD_PRELOAD="$LIBASAN $LIBSTDCXX" PYTHONPATH="$OUT/site" "$PY" "$@")
}

tests() {
    san_python -c "import decentlearn as d; from decentlearn import _core; assert d.__file__.startswith('$OUT/site'), d.__file__
print('sanitized build:', d.__file__, 'openmp:', _core.config()['openmp'])"
    san_python -m pytest -q -x -p no:cacheprovider --rootdir "$ROOT" -c "$ROOT/pyproject.toml" \
        "$ROOT/tests/test_rng_bitpack.py" "$ROOT/tests/test_topk.py" "$ROOT/tests/test_stc.py" \
        "$ROOT/tests/test_quant.py" "$ROOT/tests/test_natural.py" "$ROOT/tests/test_gossip.py" \
        "$ROOT/tests/test_gemm.py" "$ROOT/tests/test_gemm_batched.py" \
        "$ROOT/tests/test_gemm_isa_paths.py" \
        "$ROOT/tests/test_compress_api.py" "$ROOT/tests/test_decoders.py" "$ROOT/tests/test_args.py" \
        "$ROOT/tests/test_nn_kernels.py" "$ROOT/tests/test_limits.py" \
        "$ROOT/tests/test_gemm_dense.py" "$ROOT/tests/test_conv_kernels.py" \
        "$ROOT/tests/test_pool_kernels.py" "$ROOT/tests/test_lowp.py" "$ROOT/tests/test_loss_kernel.py" \
        "$ROOT/tests/test_norm_kernel.py" "$ROOT/tests/test_act_kernel.py" \
        "$ROOT/tests/test_consensus_kernel.py" "$ROOT/tests/test_optim_kernels.py" \
        "$ROOT/tests/test_optimizers.py" "$ROOT/tests/test_axpby.py" "$ROOT/tests/test_spmm.py"
}

# A short CLI run (figures included) in a scratch folder: every layer from the CLI down to _core.
cli() {
    local runs
    runs=$(mktemp -d)
    san_python -m decentlearn run --peers 4 --rounds 2 --eval-every 1 --out "$runs/run"
    rm -rf "$runs"
}

fuzz() {
    san_python "$ROOT/benchmarks/fuzz_decoders.py" --mode mutate --runs "$FUZZ_RUNS" \
        --seed "$FUZZ_SEED" --json "$OUT/fuzz-$FUZZ_SEED.json"
}

case "$STEP" in
    build) build ;;
    tests) tests ;;
    cli) cli ;;
    fuzz) fuzz ;;
    all) build; tests; cli; fuzz ;;
    *) echo "usage: tools/sanitize.sh [all|build|tests|cli|fuzz]" >&2; exit 2 ;;
esac

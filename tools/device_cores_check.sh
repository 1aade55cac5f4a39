#!/usr/bin/env bash
# Issue 24's many-core figures in one script, for a lent machine with >= 16 cores (the GPU machine:
# 16 Xeon cores with AVX-512 VNNI and AMX; python3 with numpy, scipy, threadpoolctl, no registry).
# Run from the repository root; results go under $OUT: summary.txt, and cores_check.tgz with
# env.txt and one .log and one .json per step. Every step has a cap, all within one call: about
# 9 minutes on 16 cores for all of them (the build ~17 s), so pick with STEPS when the lent time
# is short (the eighth session's calls: 100-290 s each).
#   1. build the C extension in place (python3 setup.py build_ext --inplace);
#   2. lscpu, decentlearn info (ISA paths, OpenMP and OpenBLAS wait policies);
#   3. benchmarks/bench_threads.py --threads 1,2,4,8,16 (threads): the D-PSGD ring round of the
#      MLP on 256 and 1024 peers and of the CNN on 64 peers, the counts in turn, the speed-up
#      against 1 thread, and the parameters compared bit for bit across the thread counts
#      (issue 24: >= 8x, 12x, 10x); benchmarks/bench_phases.py (phases): each phase (and layer)
#      of those rounds; bench_threads.py again (threads_again; the lent machines are noisy);
#      tools/peak_scaling.py (peaks): the machine's own int8 peaks and copy bandwidth per count;
#      benchmarks/bench_eval.py (eval): evaluate() per count beside the NumPy steps it replaced;
#      tools/stc_phases.py (stc_phases): STC's stages beyond its top-k; tools/threads_diag.py
#      (threads_diag): the first intermediate that differs between thread counts or ISA paths;
#      benchmarks/bench_serial.py (serial): the time outside the C kernels per round, by layer
#      pass and phase, at 1 thread and at the most threads (its share bounds the speed-up);
#      benchmarks/ab_llc.py (ab_llc): gossip's outputs kept in a large last-level cache against
#      streamed past it, alternated in one process; bench_threads.py at the most threads with
#      GOMP_SPINCOUNT=10000 (decentlearn's) and 300000 (libgomp's), one process each (spin_ab);
#   4. tools/blas_spin_diag.py (blas_spin, and blas_spin_fixed with OPENBLAS_THREAD_TIMEOUT=16):
#      gemm_s8 alone and right after numpy's sgemm; `decentlearn bench gemm` with
#      OPENBLAS_THREAD_TIMEOUT=4 (bench_gemm_nospin); decentlearn bench all --threads 16
#      (bench_all_max), then on 2 cores (bench_all_2; taskset -c 0,1, --threads 2): STC / top-k,
#      exponential gossip's share of the copy bandwidth, natural encode against np.copyto and
#      its read-only floor, gemm_s8 with quantize+pack vs numpy sgemm, and per ISA path
#      (avx512vnni vs amx, each against its own measured peak);
#   5. benchmarks/bench_round.py on 2 cores (round_2, round_2_vnni; taskset -c 0,1): the
#      --precision int8 round against fp32 for the MLP and the CNN (issue 24: >= 1.5x on VNNI,
#      >= 2.5x with AMX), on the amx and the avx512vnni path;
#   6. the default test suite with this machine's compiler (pytest; -n CPUs when xdist is there).
# Step times on the lent 16-core Xeon (twelfth session, quiet host): build 17 s, threads 22 s
# (THREADS_REPEAT=3) or 47 s (5), phases 10 s, serial 13 s, peaks 5 s, eval 6 s, stc_phases 1 s,
# threads_diag 11 s, bench_all_max 19 s, bench_all_2 20 s, round_2 9 s, round_2_vnni 11 s, ab_llc
# 46 s, spin_ab 20 s; starting a machine took 30-55 s of the lent time per call, and the machine
# goes back 30 s after a call: calls made back to back skip the start.
# Then, e.g.: run(command="bash tools/device_cores_check.sh", timeout_s=600), or
#   run(command="STEPS=threads,eval,stc_phases,bench_all_max bash tools/device_cores_check.sh")
# Environment: OUT (default /tmp/cores_check), THREADS (default 1,2,4,8,16), QUICK=1 (small
# sizes: checks the script itself on any machine), STEPS (comma-separated step names, default
# all), THREADS_REPEAT (timed blocks per thread count, default 3), PYTEST_CAP (seconds for the
# suite, default 170), PYTEST_SUITE (test paths, default tests), PYTEST_OMP (each xdist worker's
# default thread count, default 2: 16 workers of 16 threads each oversubscribed the 16 cores 16x;
# tests that ask for a thread count still get it).
set -u
OUT=${OUT:-/tmp/cores_check}
THREADS=${THREADS:-1,2,4,8,16}
QUICK=${QUICK:-0}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
: > "$OUT/summary.txt"

STEP_TAIL=30
STEPS=${STEPS:-all}
# shellcheck source=tools/device_lib.sh
source "$(dirname "$0")/device_lib.sh"
want() { [ "$STEPS" = all ] || [[ ",$STEPS," == *",$1,"* ]]; }

{
    date -u
    lscpu 2>/dev/null | grep -E "Model name|Model:|^CPU\(s\)|Thread|NUMA node\(s\)|L2|L3" || true
    grep -o -m1 -E "amx_int8" /proc/cpuinfo || echo "no amx_int8 in /proc/cpuinfo"
    $PY --version
} > "$OUT/env.txt" 2>&1

t0=$SECONDS
if ! $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
    echo "build: FAILED" | tee -a "$OUT/summary.txt"
    tail -n 40 "$OUT/build.log"
    exit 1
fi
echo "build: ok, $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
$PY -m decentlearn info >> "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [ "$QUICK" = 1 ]; then
    REPEAT=1; ROUND=(--quick); BENCH=(--n 1000000 --peers 100 --dim 2560 --repeat 2)
    TROUNDS=(--rounds 2)
else
    REPEAT=${THREADS_REPEAT:-3}; ROUND=(--repeat 5); BENCH=(); TROUNDS=(--rounds 20)
fi
NCPU=$(nproc)
MAXT=${THREADS##*,}
if [ "$NCPU" -lt "$MAXT" ]; then
    echo "note: $NCPU CPUs here, fewer than $MAXT threads: the larger counts are capped" \
        | tee -a "$OUT/summary.txt"
fi
PIN2=()
if command -v taskset > /dev/null && [ "$NCPU" -ge 2 ]; then PIN2=(taskset -c 0,1); fi

want threads && step threads 60 $PY benchmarks/bench_threads.py --threads "$THREADS" --repeat "$REPEAT" \
    "${TROUNDS[@]}" --out "$OUT/threads.json"
want phases && step phases 45 $PY benchmarks/bench_phases.py --threads "$THREADS" "${TROUNDS[@]}" --layers \
    --out "$OUT/phases.json"
# the lent machines are noisy (speed-ups moved 2x between runs on 27 Nov 2026): a second run
want threads_again && step threads_again 60 $PY benchmarks/bench_threads.py --threads "$THREADS" --repeat "$REPEAT" \
    "${TROUNDS[@]}" --out "$OUT/threads_again.json"
# the cache rule of gossip's large outputs (kept in a last-level cache that holds four of them, or
# streamed past it as before), the two variants alternated in one process, bit-identical
want ab_llc && step ab_llc 60 $PY benchmarks/ab_llc.py --cases mlp-1024,mlp-256 --threads "1,$MAXT" \
    --blocks 7 "${TROUNDS[@]}" --out "$OUT/ab_llc.json"
# decentlearn's OpenMP spin count (GOMP_SPINCOUNT=10000) against libgomp's (300000) at the most
# threads, one process each, alternated twice (libgomp reads it when it loads)
if want spin_ab; then
    for rep in 1 2; do
        for spin in 10000 300000; do
            step "spin_${spin}_$rep" 40 env GOMP_SPINCOUNT=$spin $PY benchmarks/bench_threads.py \
                --cases mlp-256,cnn-64,mlp-1024 --threads "$MAXT" --repeat 5 "${TROUNDS[@]}" \
                --out "$OUT/spin_${spin}_$rep.json"
        done
    done
fi
# the serial part of each round (outside the C kernels, by layer pass and phase) at 1 thread, whose
# share caps the 16-thread speed-up (Amdahl), and at the most threads
want serial && step serial 40 $PY benchmarks/bench_serial.py --threads 1 --parts "${TROUNDS[@]}" \
    --out "$OUT/serial_1.json"
want serial && step serial_max 30 $PY benchmarks/bench_serial.py --threads "$MAXT" "${TROUNDS[@]}" \
    --out "$OUT/serial_max.json"
want peaks && step peaks 60 $PY tools/peak_scaling.py --threads "$THREADS" --out "$OUT/peaks.json"
want eval && step eval 100 env PYTHONPATH="$PWD/benchmarks:$PWD" $PY benchmarks/bench_eval.py \
    --threads "$THREADS" --repeat 5 --out "$OUT/eval.json"
want stc_phases && step stc_phases 40 $PY tools/stc_phases.py --threads "$MAXT"
want threads_diag && step threads_diag 60 $PY tools/threads_diag.py --threads 1,2,3,"$MAXT" \
    --cases mlp-256,cnn-64,mlp-8,cnn-4 --isas amx,avx2,generic --rounds 2
want blas_spin && step blas_spin 40 $PY tools/blas_spin_diag.py --threads "$MAXT"
want blas_spin_fixed && step blas_spin_fixed 40 env OPENBLAS_THREAD_TIMEOUT=16 $PY tools/blas_spin_diag.py \
    --threads "$MAXT"
want bench_gemm_nospin && step bench_gemm_nospin 40 env OPENBLAS_THREAD_TIMEOUT=4 $PY -m decentlearn \
    bench gemm --threads "$MAXT" --json "$OUT/bench_gemm_nospin.json"
want bench_all_max && step bench_all_max 60 $PY -m decentlearn bench all --threads "$MAXT" "${BENCH[@]}" \
    --json "$OUT/bench_all_max.json"
want bench_all_2 && step bench_all_2 45 "${PIN2[@]}" $PY -m decentlearn bench all --threads 2 "${BENCH[@]}" \
    --json "$OUT/bench_all_2.json"
want round_2 && step round_2 40 "${PIN2[@]}" $PY benchmarks/bench_round.py "${ROUND[@]}" \
    --out "$OUT/round_2.json"
want round_2_vnni && step round_2_vnni 40 env DECENTLEARN_ISA=avx512vnni "${PIN2[@]}" $PY benchmarks/bench_round.py \
    "${ROUND[@]}" --out "$OUT/round_2_vnni.json"
# The whole default suite with this machine's compiler and real thread teams, to its end (its
# Ctrl-C test interrupts a subprocess itself: stop it with SIGTERM, never SIGINT).
if $PY -c "import xdist" 2> /dev/null; then XDIST=(-n "$NCPU"); else XDIST=(); fi
if [ "$QUICK" = 1 ]; then SUITE=(tests/test_gossip.py tests/test_nn_kernels.py); else read -r -a SUITE <<< "${PYTEST_SUITE:-tests}"; fi
want pytest && step pytest ${PYTEST_CAP:-170} env OMP_NUM_THREADS=${PYTEST_OMP:-2} $PY -m pytest "${SUITE[@]}" -q -p no:cacheprovider -p no:benchmark "${XDIST[@]}" \
    -W ignore::DeprecationWarning
cat "$OUT/summary.txt"
# The device returns at most 8 files: everything but the summary goes into one archive.
(cd "$OUT" && tar czf cores_check.tgz --exclude summary.txt --exclude cores_check.tgz ./* \
    && find . -maxdepth 1 -type f ! -name summary.txt ! -name cores_check.tgz -delete)

#!/usr/bin/env bash
# Issue 23's GPU checks in one script, for a lent GPU machine (no registry access there: python3
# with numpy, scipy, torch, pytest). Run from the repository root; results go under $OUT (at most
# 7 files: env.txt, summary.txt, gpu_tests.log, bench.log, bench.json, accuracy.log,
# accuracy.json). About 5-8 minutes on one H100 with 16 cores:
#   1. build the C extension in place (python3 setup.py build_ext --inplace);
#   2. decentlearn info (CUDA report) and nvidia-smi;
#   3. the GPU tests (pytest -m gpu tests/test_torch_device.py): CUDA vs CPU bounds, determinism;
#   4. benchmarks/bench_torch.py --device cuda: whole D-PSGD rounds of ResNet-20 (GroupNorm),
#      batch 32, ring, 16 and 64 peers, against the CPU round at 2 threads and all cores;
#   5. tools/gpu_vs_cpu_accuracy.py: Fashion-MNIST, 16 peers, 50 rounds, ResNet-20 (GroupNorm),
#      GPU vs CPU from the same seed.
# Fashion-MNIST must travel with the tree (the machine reaches nothing): before the call, in the
# checkout that is sent,
#   mkdir -p .gpu_data && cp -r /usr/share/datasets/fashion-mnist .gpu_data/ \
#       && echo /.gpu_data/ >> .git/info/exclude
# and name .gpu_data in the call's carry (30 MB). Then, e.g.:
#   run(command="bash tools/device_gpu_check.sh", carry=[".gpu_data"], timeout_s=600)
# Environment: OUT (default /tmp/gpu_check), DATA (default .gpu_data), DEVICE (default cuda),
# QUICK=1 (tiny sizes: checks the script itself, on a CPU too, with DEVICE=cpu).
set -u
OUT=${OUT:-/tmp/gpu_check}
DATA=${DATA:-.gpu_data}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
: > "$OUT/summary.txt"

# shellcheck source=tools/device_lib.sh
source "$(dirname "$0")/device_lib.sh"

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
    lscpu 2>/dev/null | grep -E "Model name|^CPU\(s\)" || true
    $PY --version
} > "$OUT/env.txt" 2>&1

t0=$SECONDS
if ! $PY setup.py build_ext --inplace > /tmp/gpu_check_build.log 2>&1; then
    echo "build: FAILED" | tee -a "$OUT/summary.txt"
    tail -n 40 /tmp/gpu_check_build.log | tee -a "$OUT/env.txt"
    exit 1
fi
echo "build: ok, $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
$PY -m decentlearn info >> "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [ "$QUICK" = 1 ]; then
    PEERS=4,8; BATCH=4; SIZE=8; REPEAT=1; BENCH_MODEL=cnn
    DATASET=digits; MODEL=torch:cnn; NPEERS=4; ROUNDS=3
    DATA_ARGS=()
else
    PEERS=16,64; BATCH=32; SIZE=32; REPEAT=3; BENCH_MODEL=resnet20:gn
    DATASET=fashion-mnist; MODEL=torch:resnet20:gn
    NPEERS=16; ROUNDS=50
    DATA_ARGS=(--data-dir "$DATA")
    if [ ! -d "$DATA/fashion-mnist" ]; then
        echo "accuracy: $DATA/fashion-mnist is missing (see this script's header)" \
            | tee -a "$OUT/summary.txt"
    fi
fi

step gpu_tests 120 $PY -m pytest tests/test_torch_device.py -m gpu -q -rA -p no:cacheprovider
step bench 180 $PY benchmarks/bench_torch.py --device "$DEVICE" --model "$BENCH_MODEL" \
    --peers "$PEERS" --batch "$BATCH" --image-size "$SIZE" --repeat "$REPEAT" \
    --out "$OUT/bench.json"
step accuracy 180 $PY tools/gpu_vs_cpu_accuracy.py --device "$DEVICE" --dataset "$DATASET" \
    "${DATA_ARGS[@]}" --model "$MODEL" --peers "$NPEERS" --rounds "$ROUNDS" \
    --out "$OUT/accuracy.json"
cat "$OUT/summary.txt"

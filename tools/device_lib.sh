#!/usr/bin/env bash
# What the device scripts (tools/device_*_check.sh) share: step NAME SECONDS COMMAND... runs
# COMMAND with a time limit, its output in $OUT/NAME.log, its exit status and seconds appended to
# $OUT/summary.txt, and shows the log's tail. Sourced, not run.
step() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "== $name: $*"
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc, $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
    tail -n "${STEP_TAIL:-25}" "$OUT/$name.log"
}

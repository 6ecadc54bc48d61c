#!/usr/bin/env bash
# Runs every benchmark against a build directory: bench/run_all.sh [build-dir]
# Results (JSON, one file per benchmark) go to $BENCH_OUT (default <build-dir>/bench-results).
# The machine is shared and noisy: C++ benchmarks report medians over repetitions.
# To add a benchmark, append a line below.
set -euo pipefail
BUILD_DIR=${1:-build}
OUT=${BENCH_OUT:-$BUILD_DIR/bench-results}
REPETITIONS=${BENCH_REPETITIONS:-5}
mkdir -p "$OUT"

run_cpp() {  # run_cpp <binary relative to the build dir> [benchmark args...]
  local binary=$BUILD_DIR/$1; shift
  "$binary" --benchmark_repetitions="$REPETITIONS" --benchmark_report_aggregates_only=true \
    --benchmark_out="$OUT/$(basename "$binary").json" --benchmark_out_format=json "$@"
}

run_cpp bench/runtime_bench

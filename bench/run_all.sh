#!/usr/bin/env bash
# Runs every benchmark against a build directory: bench/run_all.sh [build-dir]
# Results (JSON, one file per benchmark) go to $BENCH_OUT (default <build-dir>/bench-results).
# The machine is shared and noisy: C++ benchmarks report medians over repetitions; Python ones
# interleave the frameworks ABBA in one process and report median [min-max] over rounds
# ($BENCH_ROUNDS, default 10; $BENCH_BLAS_CORE: auto, keep or an OpenBLAS core, see _common.py).
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

run_python() {  # run_python <script in bench/> [args...]: side by side with PyTorch, same threads
  local script=$1; shift
  PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 "$(dirname "$0")/$script" \
    --json "$OUT/${script%.py}.json" "$@"
}

if [[ -x $BUILD_DIR/bench/runtime_bench ]]; then
  run_cpp bench/runtime_bench
else
  echo "run_all.sh: $BUILD_DIR/bench/runtime_bench not built; skipping the C++ runtime benchmark" >&2
fi
if [[ -x $BUILD_DIR/bench/parallel_bench ]]; then
  run_cpp bench/parallel_bench
else
  echo "run_all.sh: $BUILD_DIR/bench/parallel_bench not built; skipping the parallelism benchmark" >&2
fi
run_python bench_mlp.py
run_python bench_lenet.py
run_python bench_memory.py
run_python bench_compile.py --rounds "${BENCH_COMPILE_ROUNDS:-3}"
run_python bench_callbacks.py --trace

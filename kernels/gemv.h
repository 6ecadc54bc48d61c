// Gemv: out (m x n) = a (m x k) · op(b) [+ bias per column [then relu]] for a few rows of a
// (batch-1 and small-batch inference), op(b) = b (k x n) or, with transpose_b, b stored (n x k)
// (a dense layer's weights: each output is a dot product of a with one contiguous row of b).
//
// Why not oneDNN's sgemm: with one row it is a GEMV, bound by reading b once. oneDNN's sgemm
// reads the batch-1 MLP's 784x512 weights at 67-83 GB/s on one core (19.5-24 us) where a plain
// read of them runs at 98 GB/s (16.4 us), and costs ~0.5 us on a tiny b (512x10) (measured
// side by side by bench/latency_bench on a loaded host). This loop reads each element of b once
// per row of a with AVX-512 loads, keeps the products in registers and applies the bias and
// relu before the one store of each output: 17.1 us (94 GB/s) and 0.2 us.
//
// Threads: GemvColumns computes columns [col_begin, col_end) only; callers split the columns
// over the kernels' pool in as many blocks as threads, so that on consecutive calls each thread
// tends to get the same block and reads its part of b from its own core's L2 (half of the
// 1.6 MB weights fits one core's 1 MB L2, the whole does not).
// Thread-safe (pure function of its arguments); needs AVX-512F (GemvAvailable()).
#pragma once

#include <cstdint>

namespace actorflow {

struct GemvArgs {
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;     // m x k, rows contiguous
  const float* b = nullptr;     // k x n, or n x k with transpose_b
  const float* bias = nullptr;  // n, or null
  bool relu = false;            // after the bias (needs bias); keeps NaN, as NanRelu
  float* out = nullptr;         // m x n
};

// Whether this CPU runs the AVX-512 loop (otherwise callers keep oneDNN).
bool GemvAvailable();

// The rows a GEMV is worth it for: above this, b is reused enough that a GEMM's blocking wins.
constexpr int64_t kGemvMaxRows = 8;

// Columns [col_begin, col_end) of out. Requires GemvAvailable().
void GemvColumns(const GemvArgs& args, int64_t col_begin, int64_t col_end);

// Column blocks for `blocks` threads: block i is [i * step, min(n, (i + 1) * step)), step a
// multiple of 16 (whole vectors) unless n is smaller.
int64_t GemvColumnStep(int64_t n, int blocks);

}  // namespace actorflow

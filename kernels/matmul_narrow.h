// NarrowGemm: C (m x n) = alpha * op(A) · op(B) + beta * C, then an optional epilogue, for
// GEMMs with one small dimension (a dense layer with few units or a gradient against it: the
// seed MLP's logits (100,512)·(10,512)ᵀ, its data gradient (100,10)·(10,512) and its weight
// gradient (100,10)ᵀ·(100,512)), where a blocked GEMM library spends most of its time packing
// and on edge tiles: oneDNN takes 14-20 us for these 1 MFLOP products on one core, about twice
// what the FMA units need. Two register-tiled loops read every operand where it lies, each on
// a layout where its vectors are contiguous:
//
//  - rows (op(B) stored k x n, untransposed): a tile of C's rows x 16-column vectors,
//    C[i][j..] = sum over p of op(A)[i][p] * B[p][j..] (A's elements broadcast, either
//    transpose). Used when k is small (every output vector is a few FMAs, loads of B stay in
//    L1) or m is small and B fits in L2.
//  - dots (A untransposed, B stored n x k, transpose_b): C[i][c] = A[i] · B[c], the two rows
//    contiguous along k; n small, so B's rows stay in cache. Lane-wise partial sums, then one
//    transposing reduction per tile row.
//
// Epilogue on each output vector before its one store, in this order: alpha, + beta * C (not
// read when beta == 0), + bias per column, relu (keeps NaN, as NanRelu), then the relu-gradient
// mask (kept where relu_output > 0, zero elsewhere, relu_output laid out like C); then, with
// column_sums, the stored value added to its column's sum (the rows loop only: a bias gradient
// summed while C is in registers, rows in ascending order, the floats of bias_add_grad).
// Sums over k: in k's order per output in the rows loop; in 16 lane-wise partial sums added
// pairwise in the dots loop (FMA contractions both; not bitwise oneDNN's results).
// Thread-safe (pure function of its arguments); needs AVX-512F (GemvAvailable()).
#pragma once

#include <cstdint>

namespace actorflow {

enum class NarrowGemmLoop { kNone, kRows, kDots };

// The narrowest dimension the loops are chosen for, and the largest operand that must stay
// cached: rows re-reads B once per row tile, dots re-reads B once per two rows of A.
constexpr int64_t kNarrowGemmMaxDimension = 16;
constexpr int64_t kNarrowGemmMaxCachedBytes = 512 * 1024;

// Which loop runs this GEMM (kNone: keep the GEMM library). Layout and sizes only.
NarrowGemmLoop ChooseNarrowGemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k);

struct NarrowGemmArgs {
  bool transpose_a = false, transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* a = nullptr;            // m x k, or k x m with transpose_a
  const float* b = nullptr;            // k x n, or n x k with transpose_b
  const float* bias = nullptr;         // n, or null
  bool relu = false;                   // after the bias
  const float* relu_output = nullptr;  // m x n, or null: C kept where relu_output > 0
  float* c = nullptr;                  // m x n, rows contiguous
  // n, or null: C's columns summed over its m rows after the epilogue; each part writes the
  // sums of its own columns (kRows only: NarrowGemmSumsColumns).
  float* column_sums = nullptr;
};

// Whether `loop` can fill NarrowGemmArgs::column_sums: kRows (parts own whole columns).
inline bool NarrowGemmSumsColumns(NarrowGemmLoop loop) { return loop == NarrowGemmLoop::kRows; }

// The part of C one thread computes: columns [begin, end) for kRows, rows [begin, end) for
// kDots (both C's full extent in the other dimension). Requires GemvAvailable() and a loop
// ChooseNarrowGemm returned for these arguments.
void NarrowGemmPart(const NarrowGemmArgs& args, NarrowGemmLoop loop, int64_t begin, int64_t end);

// The extent NarrowGemmPart splits (n for kRows, m for kDots) and the step of `parts` parts:
// part i is [i * step, min(extent, (i + 1) * step)); column steps are whole vectors.
int64_t NarrowGemmExtent(const NarrowGemmArgs& args, NarrowGemmLoop loop);
int64_t NarrowGemmStep(const NarrowGemmArgs& args, NarrowGemmLoop loop, int parts);

}  // namespace actorflow

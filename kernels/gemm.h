// Sgemm for the kernels: C = alpha * op(A) · op(B) + beta * C (row-major, C (M,N) with ldc N),
// on `threads` threads. With more than one thread the product is split into independent blocks
// of C (column blocks, or row blocks when N is narrow) claimed dynamically through
// ParallelChunks (parallel_chunks.h: a busy host slows it, never stalls it); each block is one
// single-threaded oneDNN sgemm. `omp_team` instead runs one oneDNN sgemm with an OpenMP team
// of `threads` (the fallback, disable_fusion("gemm_chunks")). Column blocks repack op(A) each,
// row blocks op(B): the split repacks the smaller operand (the seed MLP's forward GEMM splits
// columns, its weight gradient rows). The epilogue, when given, runs
// on each block right after its product, while the block is in cache: epilogue(row_begin,
// row_end, col_begin, col_end).
#pragma once

#include <cstdint>

#include "actors/status.h"

namespace actorflow {

// fn(context, row_begin, row_end, col_begin, col_end); a plain function, so nothing allocates.
struct GemmEpilogue {
  void (*fn)(const void* context, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end) = nullptr;
  const void* context = nullptr;
};

Status Sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
             const float* b, float beta, float* c, int threads, bool omp_team, const GemmEpilogue* epilogue = nullptr);

// The blocks Sgemm splits C into for `threads` threads: {row_blocks, col_blocks, row_step, col_step}
// (tests and the benchmark notes).
struct GemmBlocks {
  int64_t row_blocks = 1, col_blocks = 1, row_step = 0, col_step = 0;
};
GemmBlocks SgemmBlocks(int64_t m, int64_t n, int64_t k, int threads);

}  // namespace actorflow

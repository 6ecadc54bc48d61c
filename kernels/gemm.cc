#include "kernels/gemm.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "kernels/parallel_chunks.h"

namespace actorflow {
namespace {

constexpr int64_t kChunksPerThread = 2;  // a late helper still finds a share; more blocks repack more
constexpr int64_t kMinColumns = 32;      // narrower blocks re-pack op(A) too often
constexpr int64_t kMinRows = 16;

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

}  // namespace

GemmBlocks SgemmBlocks(int64_t m, int64_t n, int64_t k, int threads) {
  GemmBlocks blocks;
  blocks.row_step = m;
  blocks.col_step = n;
  const int64_t target = kChunksPerThread * std::max(1, threads);
  if (threads <= 1) return blocks;
  // Each block packs its share of one operand and all of the other again: column blocks repack
  // op(A) (m x k) each, row blocks op(B) (k x n). Split the way that repacks the smaller one.
  const bool columns = n >= 2 * kMinColumns && (m * k <= k * n || m < 2 * kMinRows);
  if (columns) {
    blocks.col_step = std::max(kMinColumns, RoundUp((n + target - 1) / target, 16));
    blocks.col_blocks = (n + blocks.col_step - 1) / blocks.col_step;
  } else if (m >= 2 * kMinRows) {
    blocks.row_step = std::max(kMinRows, RoundUp((m + target - 1) / target, 8));
    blocks.row_blocks = (m + blocks.row_step - 1) / blocks.row_step;
  }
  return blocks;
}

Status Sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
             float beta, float* c, int threads, bool omp_team, const GemmEpilogue* epilogue) {
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  const GemmBlocks blocks = SgemmBlocks(m, n, k, omp_team ? 1 : threads);
  if (blocks.row_blocks * blocks.col_blocks == 1) {
    omp_set_num_threads(std::max(1, threads));
    dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, n);
    if (s != dnnl_success) return Internal("dnnl_sgemm failed with status " + std::to_string(s));
    if (epilogue) epilogue->fn(epilogue->context, 0, m, 0, n);
    return Status::Ok();
  }
  std::atomic<int> failure{dnnl_success};
  auto block = [&](int chunk) {
    const int64_t r0 = (chunk / blocks.col_blocks) * blocks.row_step, c0 = (chunk % blocks.col_blocks) * blocks.col_step;
    const int64_t rows = std::min(blocks.row_step, m - r0), cols = std::min(blocks.col_step, n - c0);
    // Rows r0.. of op(A): A's rows, or A's columns when transposed; columns c0.. of op(B) alike.
    const float* a_block = a + (ta ? r0 : r0 * k);
    const float* b_block = b + (tb ? c0 * k : c0);
    dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', rows, cols, k, alpha, a_block, lda, b_block, ldb,
                                 beta, c + r0 * n + c0, n);
    if (s != dnnl_success) failure.store(s);
    else if (epilogue) epilogue->fn(epilogue->context, r0, r0 + rows, c0, c0 + cols);
  };
  ParallelChunks(static_cast<int>(blocks.row_blocks * blocks.col_blocks), threads, block);
  if (failure.load() != dnnl_success) return Internal("dnnl_sgemm failed with status " + std::to_string(failure.load()));
  return Status::Ok();
}

}  // namespace actorflow

#include "kernels/matmul_narrow.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "actors/check.h"

// GCC 12's unmasked AVX-512 shuffles pass _mm512_undefined_ps() as their merge source, which
// -Wuninitialized reports once per inlined use (GCC bug 105593); nothing here reads it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Compiled for AVX-512 whatever the build's -march; called only where the CPU has it.
#define AF_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace actorflow {
namespace {

// Register budget (32 zmm): the rows loop keeps R x V accumulators and V vectors of B, the dots
// loop R x NC accumulators, R vectors of A and one of B.
constexpr int kRowsWideTileRows = 6;     // m > kRowsNarrowMaxRows: 6 rows x 4 vectors
constexpr int kRowsNarrowMaxRows = 12;   // m <= 12: all rows x 2 vectors (B read once)
constexpr int kDotsTileRows = 2;
constexpr int kDotsMaxColumns = 12;

int RowsVectors(int64_t m) { return m <= kRowsNarrowMaxRows ? 2 : 4; }
int RowsTileRows(int64_t m) { return m <= kRowsNarrowMaxRows ? static_cast<int>(m) : kRowsWideTileRows; }

AF_AVX512 inline __mmask16 LaneMask(int64_t lanes) {
  return lanes >= 16 ? static_cast<__mmask16>(0xffff) : lanes <= 0 ? 0 : static_cast<__mmask16>((1u << lanes) - 1);
}

// The epilogue's arguments as values: read once per tile, not after every store (C's floats
// could alias alpha and beta for all the compiler knows).
struct Epilogue {
  float alpha, beta;
  const float* bias;
  bool relu;
  const float* relu_output;
  float* c;
  float* column_sums;
  int64_t n;
  explicit Epilogue(const NarrowGemmArgs& g)
      : alpha(g.alpha), beta(g.beta), bias(g.bias), relu(g.relu), relu_output(g.relu_output), c(g.c),
        column_sums(g.column_sums), n(g.n) {}
};

// The epilogue and the one store of C's row i, columns j.. (the lanes of `mask`; all 16 when
// Full: plain loads and stores); returns the stored vector.
template <bool Full>
AF_AVX512 inline __m512 Finish(const Epilogue& e, int64_t i, int64_t j, __mmask16 mask, __m512 v) {
  float* out = e.c + i * e.n + j;
  auto load = [mask](const float* from) AF_AVX512 { return Full ? _mm512_loadu_ps(from) : _mm512_maskz_loadu_ps(mask, from); };
  if (e.alpha != 1.0f) v = _mm512_mul_ps(v, _mm512_set1_ps(e.alpha));
  if (e.beta != 0.0f) v = _mm512_fmadd_ps(_mm512_set1_ps(e.beta), load(out), v);
  if (e.bias) v = _mm512_add_ps(v, load(e.bias + j));
  // max returns its second operand when either is NaN or both are zero: NanRelu.
  if (e.relu) v = _mm512_max_ps(_mm512_setzero_ps(), v);
  if (e.relu_output)
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(load(e.relu_output + i * e.n + j), _mm512_setzero_ps(), _CMP_GT_OQ), v);
  if (Full) _mm512_storeu_ps(out, v);
  else _mm512_mask_storeu_ps(out, mask, v);
  return v;
}

// C[i0..i0+R)[j0..j0+16V) = sum over p of op(A)[i][p] * B[p][j..]; mask[v]: the columns of
// vector v that exist (Full: all of them, no masked loads or stores).
template <int R, int V, bool Full>
AF_AVX512 void RowsTile(const NarrowGemmArgs& g, int64_t i0, int64_t j0, const __mmask16* mask) {
  __m512 acc[R][V];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 32
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  __mmask16 masks[V];
#pragma GCC unroll 32
  for (int v = 0; v < V; ++v) masks[v] = Full ? static_cast<__mmask16>(0xffff) : mask[v];
  // op(A)[i][p] is a[i * k + p], or a[p * m + i] with transpose_a.
  const int64_t row_stride = g.transpose_a ? 1 : g.k, p_stride = g.transpose_a ? g.m : 1;
  const float* a = g.a + i0 * row_stride;
  const float* b = g.b + j0;
  for (int64_t p = 0; p < g.k; ++p, a += p_stride, b += g.n) {
    __m512 bv[V];
#pragma GCC unroll 32
    for (int v = 0; v < V; ++v) bv[v] = Full ? _mm512_loadu_ps(b + 16 * v) : _mm512_maskz_loadu_ps(masks[v], b + 16 * v);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * row_stride]);
#pragma GCC unroll 32
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const Epilogue epilogue(g);
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 32
    for (int v = 0; v < V; ++v)
      if (Full || masks[v]) acc[r][v] = Finish<Full>(epilogue, i0 + r, j0 + 16 * v, masks[v], acc[r][v]);
  if (!epilogue.column_sums) return;
  // The tile's rows added to the column sums in ascending order, in registers: one load and
  // store of the sums per tile (not per row), the same additions in the same order.
#pragma GCC unroll 32
  for (int v = 0; v < V; ++v) {
    if (!Full && !masks[v]) continue;
    float* sums = epilogue.column_sums + j0 + 16 * v;
    __m512 sum = Full ? _mm512_loadu_ps(sums) : _mm512_maskz_loadu_ps(masks[v], sums);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) sum = _mm512_add_ps(sum, acc[r][v]);
    if (Full) _mm512_storeu_ps(sums, sum);
    else _mm512_mask_storeu_ps(sums, masks[v], sum);
  }
}

using RowsTileFn = void (*)(const NarrowGemmArgs&, int64_t, int64_t, const __mmask16*);

template <int V, bool Full, int... R>
constexpr std::array<RowsTileFn, sizeof...(R)> RowsTiles(std::integer_sequence<int, R...>) {
  return {&RowsTile<R + 1, V, Full>...};
}
// Index rows - 1.
constexpr auto kRowsTiles2 = RowsTiles<2, false>(std::make_integer_sequence<int, kRowsNarrowMaxRows>());
constexpr auto kRowsTiles4 = RowsTiles<4, false>(std::make_integer_sequence<int, kRowsWideTileRows>());
constexpr auto kFullRowsTiles2 = RowsTiles<2, true>(std::make_integer_sequence<int, kRowsNarrowMaxRows>());
constexpr auto kFullRowsTiles4 = RowsTiles<4, true>(std::make_integer_sequence<int, kRowsWideTileRows>());

// Row tiles outer, column tiles inner: C and the relu's output are then read and written
// row by row, and B (k x the part's columns) stays in L1 when k is small.
AF_AVX512 void RunRows(const NarrowGemmArgs& g, int64_t c0, int64_t c1) {
  const int vectors = RowsVectors(g.m), tile_rows = RowsTileRows(g.m);
  // Row tiles run in ascending order and each tile finishes its rows in order: every column's
  // sum adds C's rows 0, 1, ... m-1 to zero, one rounding each, as bias_add_grad does.
  if (g.column_sums) std::fill(g.column_sums + c0, g.column_sums + c1, 0.0f);
  for (int64_t i = 0; i < g.m; i += tile_rows) {
    const int rows = static_cast<int>(std::min<int64_t>(tile_rows, g.m - i));
    for (int64_t j = c0; j < c1; j += 16 * vectors) {
      __mmask16 mask[4];
      for (int v = 0; v < vectors; ++v) mask[v] = LaneMask(c1 - (j + 16 * v));
      const bool full = j + 16 * vectors <= c1;
      const RowsTileFn tile = vectors == 2 ? (full ? kFullRowsTiles2 : kRowsTiles2)[rows - 1]
                                           : (full ? kFullRowsTiles4 : kRowsTiles4)[rows - 1];
      tile(g, i, j, mask);
    }
  }
}

// One vector whose lane g (g < 16) is the sum of v[g]'s lanes: pairs are interleaved and added
// (unpack: each 128-bit quarter then holds two vectors' half sums), pairs of those shuffled and
// added (a quarter holds four vectors' quarter sums), then the quarters of four vectors, then
// of sixteen, are transposed across the register and added.
AF_AVX512 inline __m512 SumLanes(const __m512* v) {
  __m512 s[8], q[4], w[2];
#pragma GCC unroll 32
  for (int i = 0; i < 8; ++i)
    s[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 32
  for (int i = 0; i < 4; ++i)
    q[i] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 32
  for (int i = 0; i < 2; ++i)
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// C[i0..i0+R)[c0..c0+NC) = A[i] · B[c] (A m x k, B n x k, rows contiguous).
template <int R, int NC>
AF_AVX512 void DotsTile(const NarrowGemmArgs& g, int64_t i0, int64_t c0) {
  __m512 acc[R][NC];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 32
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  const float* a = g.a + i0 * g.k;
  const float* b = g.b + c0 * g.k;
  const int64_t k = g.k;
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    __m512 av[R];
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) av[r] = _mm512_loadu_ps(a + r * k + p);
#pragma GCC unroll 32
    for (int c = 0; c < NC; ++c) {
      __m512 bv = _mm512_loadu_ps(b + c * k + p);
      // One load for the R rows: left to itself GCC folds the load into each FMA (R loads per
      // vector of B; the loads, not the FMAs, then bound the loop).
      asm("" : "+v"(bv));
#pragma GCC unroll 32
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(av[r], bv, acc[r][c]);
    }
  }
  if (p < k) {
    const __mmask16 tail = LaneMask(k - p);
    __m512 av[R];
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) av[r] = _mm512_maskz_loadu_ps(tail, a + r * k + p);
#pragma GCC unroll 32
    for (int c = 0; c < NC; ++c) {
      const __m512 bv = _mm512_maskz_loadu_ps(tail, b + c * k + p);
#pragma GCC unroll 32
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(av[r], bv, acc[r][c]);
    }
  }
  const Epilogue epilogue(g);
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r) {
    __m512 lanes[16];
#pragma GCC unroll 32
    for (int c = 0; c < 16; ++c) lanes[c] = c < NC ? acc[r][c] : _mm512_setzero_ps();
    (void)Finish<false>(epilogue, i0 + r, c0, LaneMask(NC), SumLanes(lanes));
  }
}

using DotsTileFn = void (*)(const NarrowGemmArgs&, int64_t, int64_t);

template <int R, int... NC>
constexpr std::array<DotsTileFn, sizeof...(NC)> DotsTiles(std::integer_sequence<int, NC...>) {
  return {&DotsTile<R, NC + 1>...};
}
// Index columns - 1.
constexpr auto kDotsTiles1 = DotsTiles<1>(std::make_integer_sequence<int, kDotsMaxColumns>());
constexpr auto kDotsTiles2 = DotsTiles<kDotsTileRows>(std::make_integer_sequence<int, kDotsMaxColumns>());

AF_AVX512 void RunDots(const NarrowGemmArgs& g, int64_t r0, int64_t r1) {
  // n <= 16 columns in one or two groups of at most kDotsMaxColumns.
  const int64_t groups = (g.n + kDotsMaxColumns - 1) / kDotsMaxColumns;
  const int64_t group = (g.n + groups - 1) / groups;
  for (int64_t c = 0; c < g.n; c += group) {
    const int columns = static_cast<int>(std::min(group, g.n - c));
    int64_t i = r0;
    for (; i + kDotsTileRows <= r1; i += kDotsTileRows) kDotsTiles2[columns - 1](g, i, c);
    for (; i < r1; ++i) kDotsTiles1[columns - 1](g, i, c);
  }
}

}  // namespace

NarrowGemmLoop ChooseNarrowGemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return NarrowGemmLoop::kNone;
  const int64_t bytes_of_b = k * n * static_cast<int64_t>(sizeof(float));
  if (!transpose_b && (k <= kNarrowGemmMaxDimension || (m <= kNarrowGemmMaxDimension && bytes_of_b <= kNarrowGemmMaxCachedBytes)))
    return NarrowGemmLoop::kRows;
  if (!transpose_a && transpose_b && n <= kNarrowGemmMaxDimension && bytes_of_b <= kNarrowGemmMaxCachedBytes)
    return NarrowGemmLoop::kDots;
  return NarrowGemmLoop::kNone;
}

void NarrowGemmPart(const NarrowGemmArgs& args, NarrowGemmLoop loop, int64_t begin, int64_t end) {
  if (begin >= end) return;
  AF_CHECK(!args.column_sums || NarrowGemmSumsColumns(loop)) << "column sums need the rows loop (whole columns per part)";
  if (loop == NarrowGemmLoop::kRows) RunRows(args, begin, end);
  else if (loop == NarrowGemmLoop::kDots) RunDots(args, begin, end);
}

int64_t NarrowGemmExtent(const NarrowGemmArgs& args, NarrowGemmLoop loop) {
  return loop == NarrowGemmLoop::kRows ? args.n : args.m;
}

int64_t NarrowGemmStep(const NarrowGemmArgs& args, NarrowGemmLoop loop, int parts) {
  const int64_t extent = NarrowGemmExtent(args, loop);
  const int64_t per_part = (extent + std::max(1, parts) - 1) / std::max(1, parts);
  // Whole column tiles (rows), whole row tiles (dots).
  const int64_t unit = loop == NarrowGemmLoop::kRows ? 16 * RowsVectors(args.m) : kDotsTileRows;
  return std::max<int64_t>(1, std::min(extent, (per_part + unit - 1) / unit * unit));
}

}  // namespace actorflow

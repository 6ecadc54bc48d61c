#include "kernels/gemv.h"

#include <immintrin.h>

#include <algorithm>

// Compiled for AVX-512 whatever the build's -march; called only where the CPU has it.
#define AF_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace actorflow {
namespace {

// Columns per panel of the untransposed loop: 8 vectors of accumulators.
constexpr int kPanelVectors = 8;
// Rows of b (outputs) per block of the transposed loop: 8 accumulators hide the FMA latency.
constexpr int kDotRows = 8;

// acc[g] = sum over p of x[p] * rows[g * k + p], lane-wise (16 partial sums per row).
template <int R>
AF_AVX512 inline void DotRows(const float* x, const float* rows, int64_t k, __m512* acc) {
  for (int g = 0; g < R; ++g) acc[g] = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    const __m512 xv = _mm512_loadu_ps(x + p);
    for (int g = 0; g < R; ++g) acc[g] = _mm512_fmadd_ps(_mm512_loadu_ps(rows + g * k + p), xv, acc[g]);
  }
  if (p < k) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - p)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(mask, x + p);
    for (int g = 0; g < R; ++g) acc[g] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, rows + g * k + p), xv, acc[g]);
  }
}

// The horizontal sums of eight vectors as one 8-lane vector (lane g: the sum of v[g]).
AF_AVX512 inline __m256 SumEach(const __m512* v) {
  __m256 s[8];
  for (int g = 0; g < 8; ++g)
    s[g] = _mm256_add_ps(_mm512_castps512_ps256(v[g]),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v[g]), 1)));
  // hadd pairs neighbours within each 128-bit lane: after two rounds lane g of the low half
  // holds v[g]'s first four sums' total (g < 4 from q0, g >= 4 from q1), the high half the rest.
  const __m256 q0 = _mm256_hadd_ps(_mm256_hadd_ps(s[0], s[1]), _mm256_hadd_ps(s[2], s[3]));
  const __m256 q1 = _mm256_hadd_ps(_mm256_hadd_ps(s[4], s[5]), _mm256_hadd_ps(s[6], s[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(q0, q1, 0x20), _mm256_permute2f128_ps(q0, q1, 0x31));
}

// relu that keeps NaN and -0.0 (NanRelu): max returns its second operand when either is NaN
// or both are zero.
AF_AVX512 inline __m256 Relu8(__m256 v) { return _mm256_max_ps(_mm256_setzero_ps(), v); }
AF_AVX512 inline __m512 Relu16(__m512 v) { return _mm512_max_ps(_mm512_setzero_ps(), v); }
inline float Relu1(float v) { return v < 0.f ? 0.f : v; }

// b stored n x k: out[r][j] = a[r] · b[j].
AF_AVX512 void GemvTransposed(const GemvArgs& g, int64_t c0, int64_t c1) {
  __m512 acc[kDotRows];
  int64_t j = c0;
  for (; j + kDotRows <= c1; j += kDotRows)
    for (int64_t r = 0; r < g.m; ++r) {
      DotRows<kDotRows>(g.a + r * g.k, g.b + j * g.k, g.k, acc);
      __m256 s = SumEach(acc);
      if (g.bias) s = _mm256_add_ps(s, _mm256_loadu_ps(g.bias + j));
      if (g.relu) s = Relu8(s);
      _mm256_storeu_ps(g.out + r * g.n + j, s);
    }
  for (; j < c1; ++j)
    for (int64_t r = 0; r < g.m; ++r) {
      DotRows<1>(g.a + r * g.k, g.b + j * g.k, g.k, acc);
      float s = _mm512_reduce_add_ps(acc[0]);
      if (g.bias) s += g.bias[j];
      if (g.relu) s = Relu1(s);
      g.out[r * g.n + j] = s;
    }
}

// b stored k x n: out[r][j..] = sum over p of a[r][p] * b[p][j..], a panel of columns at a time.
AF_AVX512 void GemvPlain(const GemvArgs& g, int64_t c0, int64_t c1) {
  for (int64_t j = c0; j < c1; j += 16 * kPanelVectors) {
    __mmask16 mask[kPanelVectors];
    for (int v = 0; v < kPanelVectors; ++v) {
      const int64_t left = c1 - (j + 16 * v);
      mask[v] = left >= 16 ? static_cast<__mmask16>(0xffff) : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
    }
    for (int64_t r = 0; r < g.m; ++r) {
      __m512 acc[kPanelVectors];
      for (int v = 0; v < kPanelVectors; ++v) acc[v] = _mm512_setzero_ps();
      const float* x = g.a + r * g.k;
      for (int64_t p = 0; p < g.k; ++p) {
        const __m512 xv = _mm512_set1_ps(x[p]);
        const float* row = g.b + p * g.n + j;
        for (int v = 0; v < kPanelVectors; ++v)
          acc[v] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask[v], row + 16 * v), xv, acc[v]);
      }
      for (int v = 0; v < kPanelVectors; ++v) {
        __m512 s = acc[v];
        if (g.bias) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(mask[v], g.bias + j + 16 * v));
        if (g.relu) s = Relu16(s);
        _mm512_mask_storeu_ps(g.out + r * g.n + j + 16 * v, mask[v], s);
      }
    }
  }
}

}  // namespace

bool GemvAvailable() {
  static const bool available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
                                __builtin_cpu_supports("fma");
  return available;
}

void GemvColumns(const GemvArgs& args, int64_t col_begin, int64_t col_end) {
  if (col_begin >= col_end) return;
  if (args.transpose_b) GemvTransposed(args, col_begin, col_end);
  else GemvPlain(args, col_begin, col_end);
}

int64_t GemvColumnStep(int64_t n, int blocks) {
  const int64_t per_block = (n + std::max(1, blocks) - 1) / std::max(1, blocks);
  return std::min(n, (per_block + 15) / 16 * 16);
}

}  // namespace actorflow

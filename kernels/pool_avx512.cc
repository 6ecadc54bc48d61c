#include "kernels/pool_avx512.h"

#include <immintrin.h>

// Compiled for AVX-512 whatever the build's -march; called only where the CPU has it.
#define AF_AVX512 __attribute__((target("avx512f")))

namespace actorflow {
namespace {

// NanMax (kernel_util.h) lane-wise: a where a > b or a is NaN, else b.
AF_AVX512 inline __m512 NanMax16(__m512 a, __m512 b) {
  const __mmask16 take_a = _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  return _mm512_mask_blend_ps(take_a, b, a);
}

// NanBeats lane-wise: v > best, or v is the first NaN.
AF_AVX512 inline __mmask16 NanBeats16(__m512 v, __m512 best) {
  return _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
         (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
}

AF_AVX512 inline __m512i LaneOffsets(int64_t plane_stride) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(static_cast<int>(plane_stride)));
}

}  // namespace

bool CpuHasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

AF_AVX512 void Pool2x2Block16Forward(bool max, const float* x, int64_t width, int64_t rows, int64_t cols, int64_t out_cols,
                                     float* y_blocked, float* y_plain, int64_t plane_stride) {
  const __m512i lanes = LaneOffsets(plane_stride);
  const __m512 quarter = _mm512_set1_ps(0.25f);
  for (int64_t oh = 0; oh < rows; ++oh) {
    const float* r0 = x + 2 * oh * width * 16;
    const float* r1 = r0 + width * 16;
    for (int64_t ow = 0; ow < cols; ++ow) {
      const __m512 a = _mm512_loadu_ps(r0 + 32 * ow), b = _mm512_loadu_ps(r0 + 32 * ow + 16);
      const __m512 c = _mm512_loadu_ps(r1 + 32 * ow), d = _mm512_loadu_ps(r1 + 32 * ow + 16);
      const __m512 v = max ? NanMax16(NanMax16(a, b), NanMax16(c, d))
                           : _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), c), d), quarter);
      if (y_blocked != nullptr) _mm512_storeu_ps(y_blocked + (oh * out_cols + ow) * 16, v);
      else _mm512_i32scatter_ps(y_plain + oh * out_cols + ow, lanes, v, 4);
    }
  }
}

AF_AVX512 void Pool2x2Block16Backward(bool max, bool relu_mask, const float* x, int64_t rows, int64_t cols,
                                      const float* dy_blocked, const float* dy_plain, int64_t plane_stride, float* dx) {
  const __m512i lanes = LaneOffsets(plane_stride);
  const __m512 quarter = _mm512_set1_ps(0.25f), zero = _mm512_setzero_ps();
  const int64_t width = 2 * cols;
  for (int64_t oh = 0; oh < rows; ++oh)
    for (int64_t ow = 0; ow < cols; ++ow) {
      const __m512 d = dy_blocked != nullptr ? _mm512_loadu_ps(dy_blocked + (oh * cols + ow) * 16)
                                             : _mm512_i32gather_ps(lanes, dy_plain + oh * cols + ow, 4);
      const int64_t at = (2 * oh * width + 2 * ow) * 16, down = width * 16;
      float* d0 = dx + at;
      float* d1 = d0 + down;
      if (!max) {
        const __m512 share = _mm512_mul_ps(d, quarter);
        _mm512_storeu_ps(d0, share), _mm512_storeu_ps(d0 + 16, share);
        _mm512_storeu_ps(d1, share), _mm512_storeu_ps(d1 + 16, share);
        continue;
      }
      const float* r0 = x + at;
      const float* r1 = r0 + down;
      __m512 m = _mm512_loadu_ps(r0);
      const __m512 b = _mm512_loadu_ps(r0 + 16), c = _mm512_loadu_ps(r1), e = _mm512_loadu_ps(r1 + 16);
      const __mmask16 s1 = NanBeats16(b, m);
      m = _mm512_mask_blend_ps(s1, m, b);
      const __mmask16 s2 = NanBeats16(c, m);
      m = _mm512_mask_blend_ps(s2, m, c);
      const __mmask16 s3 = NanBeats16(e, m);
      m = _mm512_mask_blend_ps(s3, m, e);
      // The last window position that beat its predecessors holds the first maximum.
      const __mmask16 at3 = s3, at2 = s2 & ~s3, at1 = s1 & ~s2 & ~s3, at0 = ~(s1 | s2 | s3);
      const __m512 v = relu_mask ? _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, zero, _CMP_GT_OQ), d) : d;
      _mm512_storeu_ps(d0, _mm512_maskz_mov_ps(at0, v));
      _mm512_storeu_ps(d0 + 16, _mm512_maskz_mov_ps(at1, v));
      _mm512_storeu_ps(d1, _mm512_maskz_mov_ps(at2, v));
      _mm512_storeu_ps(d1 + 16, _mm512_maskz_mov_ps(at3, v));
    }
}

}  // namespace actorflow

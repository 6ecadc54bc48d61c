// The depthwise filter gradient's direct loops (conv_depthwise.h).
#include "kernels/conv_depthwise.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

namespace actorflow {
namespace {

// First and one-past-last output index o with 0 <= o * stride + offset < extent (an empty range
// when none), so the inner loop needs no bounds test.
std::pair<int64_t, int64_t> ValidOutputs(int64_t outputs, int64_t stride, int64_t offset, int64_t extent) {
  const int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t last = extent - 1 - offset < 0 ? -1 : (extent - 1 - offset) / stride;
  return {first, std::min(outputs, last + 1)};
}

}  // namespace

KernelFn MakeDepthwiseFilterGrad(const Window2d& s, int threads) {
  // Per tap: the output rows and columns whose input falls inside the plane (no bounds tests
  // in the loops), and the input offset of output (0, 0).
  struct Tap {
    int64_t oh_first, oh_end, ow_first, ow_end, offset;
  };
  std::vector<Tap> taps;
  for (int64_t kh = 0; kh < s.kh; ++kh)
    for (int64_t kw = 0; kw < s.kw; ++kw) {
      const auto [oh_first, oh_end] = ValidOutputs(s.oh, s.sh, kh * s.dh - s.top, s.h);
      const auto [ow_first, ow_end] = ValidOutputs(s.ow, s.sw, kw * s.dw - s.left, s.w);
      taps.push_back({oh_first, oh_end, ow_first, ow_end, (kh * s.dh - s.top) * s.w + kw * s.dw - s.left});
    }
  const int team = s.n * s.oh * s.ow * s.kh * s.kw * s.c >= (int64_t{1} << 18) ? std::max(1, threads) : 1;
  // Sums per (tap, channel), made once: the kernel's acts are serial.
  auto sums = std::make_shared<std::vector<float>>(taps.size() * s.c);
  return [s, taps, team, sums](KernelContext& c) {
    const float* dy = c.input(0).as<float>();
    const float* x = c.input(1).as<float>();
    float* dfilter = c.output(0).as<float>();
    const int64_t plane_in = s.h * s.w, plane_out = s.oh * s.ow, tap_count = static_cast<int64_t>(taps.size());
    float* acc = sums->data();
#pragma omp parallel num_threads(team)
    {
      const int thread = omp_get_thread_num(), threads_here = omp_get_num_threads();
      const int64_t first = s.c * thread / threads_here, end = s.c * (thread + 1) / threads_here;
      for (int64_t t = 0; t < tap_count; ++t) std::fill(acc + t * s.c + first, acc + t * s.c + end, 0.0f);
      for (int64_t n = 0; n < s.n; ++n) {
        const float* dy_sample = dy + n * s.c * plane_out;
        const float* x_sample = x + n * s.c * plane_in;
        for (int64_t t = 0; t < tap_count; ++t) {
          const Tap& tap = taps[t];
          float* __restrict a = acc + t * s.c;
          for (int64_t oh = tap.oh_first; oh < tap.oh_end; ++oh)
            for (int64_t ow = tap.ow_first; ow < tap.ow_end; ++ow) {
              const float* dy_at = dy_sample + oh * s.ow + ow;
              const float* x_at = x_sample + oh * s.sh * s.w + ow * s.sw + tap.offset;
              for (int64_t ch = first; ch < end; ++ch) a[ch] += dy_at[ch * plane_out] * x_at[ch * plane_in];
            }
        }
      }
      for (int64_t ch = first; ch < end; ++ch)
        for (int64_t t = 0; t < tap_count; ++t) dfilter[ch * tap_count + t] = acc[t * s.c + ch];
    }
    return Status::Ok();
  };
}

}  // namespace actorflow

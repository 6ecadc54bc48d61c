// CUDA kernels of the window family over (planes, H, W) images: max/avg pooling, adaptive average
// pooling, zero/reflection padding, and their gradients. Forward: one thread per output element.
// Gradients gather: one thread per input element visits the outputs whose windows hold it, in
// the CPU kernels' order (output row, then column), so each sum adds the same terms in the same
// order as the CPU's scatter, with no atomics (deterministic, and equal to the CPU's).
#include <cfloat>

#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/launch.h"

namespace actorflow::cuda {
namespace {

using namespace grid;  // kThreads, Blocks, First, Stride
__device__ inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ inline int64_t Max(int64_t a, int64_t b) { return a > b ? a : b; }

// The valid input range [begin, end) of output `o` along one axis (padding clipped away).
struct Span {
  int64_t begin, end;
};
__device__ inline Span WindowSpan(int64_t o, int64_t stride, int64_t pad, int64_t size, int64_t extent) {
  const int64_t start = o * stride - pad;
  return Span{Max(start, 0), Min(start + size, extent)};
}
// Outputs [begin, end) whose windows (not clipped) hold input index i along one axis.
__device__ inline Span CoveringOutputs(int64_t i, int64_t stride, int64_t pad, int64_t size, int64_t outputs) {
  const int64_t low = i + pad - size + 1;  // o * stride >= low
  const int64_t begin = low <= 0 ? 0 : (low + stride - 1) / stride;
  const int64_t end = Min((i + pad) / stride + 1, outputs);
  return Span{begin, end};
}

// The CPU's NaN rules (kernels/kernel_util.h): NaN wins a max; a gradient goes to the position
// equal to the maximum (both NaN counts as equal).
__device__ inline float NanMax(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ inline bool NanSame(float x, float y) { return x == y || (x != x && y != y); }

template <bool kMax>
__global__ void PoolKernel(const float* __restrict__ x, float* __restrict__ y, PoolWindow g) {
  const int64_t n = g.planes * g.oh * g.ow;
  for (int64_t i = First(); i < n; i += Stride()) {
    const int64_t ow = i % g.ow, oh = (i / g.ow) % g.oh, plane = i / (g.ow * g.oh);
    const Span rows = WindowSpan(oh, g.sh, g.top, g.kh, g.h), cols = WindowSpan(ow, g.sw, g.left, g.kw, g.w);
    const float* xp = x + plane * g.h * g.w;
    float acc = kMax ? -INFINITY : 0.0f;
    for (int64_t r = rows.begin; r < rows.end; ++r)
      for (int64_t c = cols.begin; c < cols.end; ++c) acc = kMax ? NanMax(xp[r * g.w + c], acc) : acc + xp[r * g.w + c];
    if (!kMax) acc = acc / static_cast<float>(Max((rows.end - rows.begin) * (cols.end - cols.begin), 1));
    y[i] = acc;
  }
}

__global__ void MaxPoolGradKernel(const float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ dy,
                                  float* __restrict__ dx, PoolWindow g) {
  const int64_t n = g.planes * g.h * g.w;
  for (int64_t i = First(); i < n; i += Stride()) {
    const int64_t iw = i % g.w, ih = (i / g.w) % g.h, plane = i / (g.w * g.h);
    const float* xp = x + plane * g.h * g.w;
    const float* yp = y + plane * g.oh * g.ow;
    const float* dyp = dy + plane * g.oh * g.ow;
    const Span out_rows = CoveringOutputs(ih, g.sh, g.top, g.kh, g.oh);
    const Span out_cols = CoveringOutputs(iw, g.sw, g.left, g.kw, g.ow);
    float sum = 0.0f;
    for (int64_t oh = out_rows.begin; oh < out_rows.end; ++oh)
      for (int64_t ow = out_cols.begin; ow < out_cols.end; ++ow) {
        // This output's gradient goes to the first position of its window equal to its max.
        const float best = yp[oh * g.ow + ow];
        const Span rows = WindowSpan(oh, g.sh, g.top, g.kh, g.h), cols = WindowSpan(ow, g.sw, g.left, g.kw, g.w);
        int64_t chosen = -1;
        for (int64_t r = rows.begin; r < rows.end && chosen < 0; ++r)
          for (int64_t c = cols.begin; c < cols.end; ++c)
            if (NanSame(xp[r * g.w + c], best)) {
              chosen = r * g.w + c;
              break;
            }
        if (chosen == ih * g.w + iw) sum += dyp[oh * g.ow + ow];
      }
    dx[i] = sum;
  }
}

__global__ void AvgPoolGradKernel(const float* __restrict__ dy, float* __restrict__ dx, PoolWindow g) {
  const int64_t n = g.planes * g.h * g.w;
  for (int64_t i = First(); i < n; i += Stride()) {
    const int64_t iw = i % g.w, ih = (i / g.w) % g.h, plane = i / (g.w * g.h);
    const float* dyp = dy + plane * g.oh * g.ow;
    const Span out_rows = CoveringOutputs(ih, g.sh, g.top, g.kh, g.oh);
    const Span out_cols = CoveringOutputs(iw, g.sw, g.left, g.kw, g.ow);
    float sum = 0.0f;
    for (int64_t oh = out_rows.begin; oh < out_rows.end; ++oh)
      for (int64_t ow = out_cols.begin; ow < out_cols.end; ++ow) {
        const Span rows = WindowSpan(oh, g.sh, g.top, g.kh, g.h), cols = WindowSpan(ow, g.sw, g.left, g.kw, g.w);
        const int64_t count = Max((rows.end - rows.begin) * (cols.end - cols.begin), 1);
        sum += dyp[oh * g.ow + ow] / static_cast<float>(count);
      }
    dx[i] = sum;
  }
}

// Adaptive windows: output o of `outputs` covers [o * in / outputs, ceil((o + 1) * in / outputs)).
__device__ inline int64_t AdaptiveStart(int64_t o, int64_t in, int64_t outputs) { return (o * in) / outputs; }
__device__ inline int64_t AdaptiveEnd(int64_t o, int64_t in, int64_t outputs) { return ((o + 1) * in + outputs - 1) / outputs; }

__global__ void AdaptiveAvgPoolKernel(const float* __restrict__ x, float* __restrict__ y, PoolWindow g) {
  const int64_t n = g.planes * g.oh * g.ow;
  for (int64_t i = First(); i < n; i += Stride()) {
    const int64_t ow = i % g.ow, oh = (i / g.ow) % g.oh, plane = i / (g.ow * g.oh);
    const int64_t h0 = AdaptiveStart(oh, g.h, g.oh), h1 = AdaptiveEnd(oh, g.h, g.oh);
    const int64_t w0 = AdaptiveStart(ow, g.w, g.ow), w1 = AdaptiveEnd(ow, g.w, g.ow);
    const float* xp = x + plane * g.h * g.w;
    float sum = 0.0f;
    for (int64_t r = h0; r < h1; ++r)
      for (int64_t c = w0; c < w1; ++c) sum += xp[r * g.w + c];
    y[i] = sum / static_cast<float>((h1 - h0) * (w1 - w0));
  }
}

// The first output whose adaptive window can hold input index i: o >= i * outputs / in - 1
// (an earlier window ends at or before i).
__device__ inline int64_t AdaptiveFirstCovering(int64_t i, int64_t in, int64_t outputs) {
  return Max((i * outputs) / in - 1, 0);
}

__global__ void AdaptiveAvgPoolGradKernel(const float* __restrict__ dy, float* __restrict__ dx, PoolWindow g) {
  const int64_t n = g.planes * g.h * g.w;
  for (int64_t i = First(); i < n; i += Stride()) {
    const int64_t iw = i % g.w, ih = (i / g.w) % g.h, plane = i / (g.w * g.h);
    const float* dyp = dy + plane * g.oh * g.ow;
    float sum = 0.0f;
    for (int64_t oh = AdaptiveFirstCovering(ih, g.h, g.oh); oh < g.oh; ++oh) {
      const int64_t h0 = AdaptiveStart(oh, g.h, g.oh), h1 = AdaptiveEnd(oh, g.h, g.oh);
      if (h0 > ih) break;
      if (h1 <= ih) continue;
      for (int64_t ow = AdaptiveFirstCovering(iw, g.w, g.ow); ow < g.ow; ++ow) {
        const int64_t w0 = AdaptiveStart(ow, g.w, g.ow), w1 = AdaptiveEnd(ow, g.w, g.ow);
        if (w0 > iw) break;
        if (w1 <= iw) continue;
        sum += dyp[oh * g.ow + ow] / static_cast<float>((h1 - h0) * (w1 - w0));
      }
    }
    dx[i] = sum;
  }
}

// Source index of padded position o along one axis, or -1 for zero padding (kernels/pad.cc).
__device__ inline int64_t PadSource(int64_t o, int64_t pad, int64_t size, bool reflect) {
  const int64_t i = o - pad;
  if (i >= 0 && i < size) return i;
  if (!reflect) return -1;
  if (i < 0) return -i;
  return 2 * (size - 1) - i;
}

__global__ void PadKernel(const float* __restrict__ x, float* __restrict__ y, PoolWindow g, bool reflect) {
  const int64_t n = g.planes * g.oh * g.ow;
  for (int64_t i = First(); i < n; i += Stride()) {
    const int64_t ow = i % g.ow, oh = (i / g.ow) % g.oh, plane = i / (g.ow * g.oh);
    const int64_t r = PadSource(oh, g.top, g.h, reflect), c = PadSource(ow, g.left, g.w, reflect);
    y[i] = (r < 0 || c < 0) ? 0.0f : x[(plane * g.h + r) * g.w + c];
  }
}

// The padded positions whose source is input index i along one axis, ascending: the mirror
// before (reflection, 1 <= i <= pad), the position itself, the mirror after (reflection).
struct Sources {
  int64_t at[3];
  int count;
};
__device__ inline Sources PaddedPositions(int64_t i, int64_t pad, int64_t size, int64_t outputs, bool reflect) {
  Sources s{{0, 0, 0}, 0};
  if (reflect && i >= 1 && i <= pad) s.at[s.count++] = pad - i;
  if (i + pad < outputs) s.at[s.count++] = i + pad;
  const int64_t after = pad + 2 * (size - 1) - i;
  if (reflect && after >= pad + size && after < outputs) s.at[s.count++] = after;
  return s;
}

__global__ void PadGradKernel(const float* __restrict__ dy, float* __restrict__ dx, PoolWindow g, bool reflect) {
  const int64_t n = g.planes * g.h * g.w;
  for (int64_t i = First(); i < n; i += Stride()) {
    const int64_t iw = i % g.w, ih = (i / g.w) % g.h, plane = i / (g.w * g.h);
    const Sources rows = PaddedPositions(ih, g.top, g.h, g.oh, reflect), cols = PaddedPositions(iw, g.left, g.w, g.ow, reflect);
    const float* dyp = dy + plane * g.oh * g.ow;
    float sum = 0.0f;
    for (int a = 0; a < rows.count; ++a)
      for (int b = 0; b < cols.count; ++b) sum += dyp[rows.at[a] * g.ow + cols.at[b]];
    dx[i] = sum;
  }
}

}  // namespace

cudaError_t LaunchPool(bool max, const float* x, float* y, const PoolWindow& window, cudaStream_t stream) {
  const int64_t n = window.planes * window.oh * window.ow;
  if (n == 0) return cudaSuccess;
  if (max) {
    PoolKernel<true><<<Blocks(n), kThreads, 0, stream>>>(x, y, window);
  } else {
    PoolKernel<false><<<Blocks(n), kThreads, 0, stream>>>(x, y, window);
  }
  return cudaGetLastError();
}

cudaError_t LaunchMaxPoolGrad(const float* x, const float* y, const float* dy, float* dx, const PoolWindow& window,
                              cudaStream_t stream) {
  const int64_t n = window.planes * window.h * window.w;
  if (n == 0) return cudaSuccess;
  MaxPoolGradKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, dy, dx, window);
  return cudaGetLastError();
}

cudaError_t LaunchAvgPoolGrad(const float* dy, float* dx, const PoolWindow& window, cudaStream_t stream) {
  const int64_t n = window.planes * window.h * window.w;
  if (n == 0) return cudaSuccess;
  AvgPoolGradKernel<<<Blocks(n), kThreads, 0, stream>>>(dy, dx, window);
  return cudaGetLastError();
}

cudaError_t LaunchAdaptiveAvgPool(const float* x, float* y, const PoolWindow& window, cudaStream_t stream) {
  const int64_t n = window.planes * window.oh * window.ow;
  if (n == 0) return cudaSuccess;
  AdaptiveAvgPoolKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, window);
  return cudaGetLastError();
}

cudaError_t LaunchAdaptiveAvgPoolGrad(const float* dy, float* dx, const PoolWindow& window, cudaStream_t stream) {
  const int64_t n = window.planes * window.h * window.w;
  if (n == 0) return cudaSuccess;
  AdaptiveAvgPoolGradKernel<<<Blocks(n), kThreads, 0, stream>>>(dy, dx, window);
  return cudaGetLastError();
}

cudaError_t LaunchPad(bool reflect, const float* x, float* y, const PoolWindow& window, cudaStream_t stream) {
  const int64_t n = window.planes * window.oh * window.ow;
  if (n == 0) return cudaSuccess;
  PadKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, window, reflect);
  return cudaGetLastError();
}

cudaError_t LaunchPadGrad(bool reflect, const float* dy, float* dx, const PoolWindow& window, cudaStream_t stream) {
  const int64_t n = window.planes * window.h * window.w;
  if (n == 0) return cudaSuccess;
  PadGradKernel<<<Blocks(n), kThreads, 0, stream>>>(dy, dx, window, reflect);
  return cudaGetLastError();
}

}  // namespace actorflow::cuda

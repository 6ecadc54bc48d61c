// CUDA kernels of the elementwise family: binary ops with broadcasting, broadcast copies and
// their reverse (reduce_sum_like), add_n's running sum, scalar affine, relu and its gradient, bias_add (+relu epilogue) and its gradient,
// fill, clamp and its gradient, dropout. Grid-stride loops; the launchers size grids from n and
// cap them (the loop covers the rest).
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/launch.h"

namespace actorflow::cuda {
namespace {

using namespace grid;  // kThreads, Blocks, First, Stride

__device__ inline float Apply(Binary op, float a, float b) {
  switch (op) {
    case Binary::kAdd: return a + b;
    case Binary::kSub: return a - b;
    case Binary::kMul: return a * b;
    default: return a / b;
  }
}

template <Binary op>
__global__ void SameShapeKernel(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int64_t n) {
  for (int64_t i = First(); i < n; i += Stride()) out[i] = Apply(op, x[i], y[i]);
}

template <Binary op>
__global__ void BroadcastKernel(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int64_t n,
                                BroadcastIndex index) {
  for (int64_t i = First(); i < n; i += Stride()) {
    int64_t rest = i, xo = 0, yo = 0;
    for (int axis = index.rank - 1; axis >= 0; --axis) {
      const int64_t coordinate = rest % index.out_dims[axis];
      rest /= index.out_dims[axis];
      xo += coordinate * index.x_strides[axis];
      yo += coordinate * index.y_strides[axis];
    }
    out[i] = Apply(op, x[xo], y[yo]);
  }
}

__global__ void BroadcastCopyKernel(const float* __restrict__ x, float* __restrict__ out, int64_t n, BroadcastIndex index) {
  for (int64_t i = First(); i < n; i += Stride()) {
    int64_t rest = i, xo = 0;
    for (int axis = index.rank - 1; axis >= 0; --axis) {
      xo += (rest % index.out_dims[axis]) * index.x_strides[axis];
      rest /= index.out_dims[axis];
    }
    out[i] = x[xo];
  }
}

__global__ void SumLikeKernel(const float* __restrict__ x, float* __restrict__ out, int64_t outputs, int64_t summed,
                              SumLikeIndex index) {
  for (int64_t o = First(); o < outputs; o += Stride()) {
    int64_t rest = o, base = 0;
    for (int axis = index.kept_rank - 1; axis >= 0; --axis) {
      base += (rest % index.kept_dims[axis]) * index.kept_strides[axis];
      rest /= index.kept_dims[axis];
    }
    double sum = 0;
    for (int64_t r = 0; r < summed; ++r) {
      int64_t left = r, offset = base;
      for (int axis = index.summed_rank - 1; axis >= 0; --axis) {
        offset += (left % index.summed_dims[axis]) * index.summed_strides[axis];
        left /= index.summed_dims[axis];
      }
      sum += x[offset];
    }
    out[o] = static_cast<float>(sum);
  }
}

__global__ void AccumulateKernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  for (int64_t i = First(); i < n; i += Stride()) out[i] += x[i];
}

__global__ void AffineKernel(const float* __restrict__ x, float* __restrict__ out, int64_t n, float scale, float shift) {
  for (int64_t i = First(); i < n; i += Stride()) out[i] = x[i] * scale + shift;
}

__global__ void ReluKernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
  for (int64_t i = First(); i < n; i += Stride()) out[i] = x[i] < 0.0f ? 0.0f : x[i];
}

__global__ void ReluGradKernel(const float* __restrict__ y, const float* __restrict__ dy, float* __restrict__ dx, int64_t n) {
  for (int64_t i = First(); i < n; i += Stride()) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void BiasAddKernel(const float* x, const float* __restrict__ bias, float* out, int64_t n,
                              int64_t channels, int64_t inner, bool relu) {
  for (int64_t i = First(); i < n; i += Stride()) {
    const float v = x[i] + bias[(i / inner) % channels];
    out[i] = relu && v < 0.0f ? 0.0f : v;
  }
}

// One block per channel: its threads sum the channel's outer * inner elements, then a shared
// memory tree reduces them (fixed order: the result does not depend on scheduling).
__global__ void BiasAddGradKernel(const float* __restrict__ dy, float* __restrict__ dbias, int64_t outer, int64_t channels,
                                  int64_t inner) {
  __shared__ float partial[kThreads];
  const int64_t channel = blockIdx.x;
  const int64_t count = outer * inner;
  float sum = 0.0f;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const int64_t o = k / inner, j = k % inner;
    sum += dy[(o * channels + channel) * inner + j];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) dbias[channel] = partial[0];
}

__global__ void FillKernel(float* __restrict__ out, int64_t n, float value) {
  for (int64_t i = First(); i < n; i += Stride()) out[i] = value;
}

__global__ void ClampKernel(const float* __restrict__ x, float* __restrict__ out, int64_t n, float low, float high) {
  for (int64_t i = First(); i < n; i += Stride()) {
    float v = x[i];
    v = v < low ? low : v;
    out[i] = v > high ? high : v;
  }
}

__global__ void ClampGradKernel(const float* __restrict__ x, const float* __restrict__ dy, float* __restrict__ dx, int64_t n,
                                float low, float high, bool inclusive) {
  for (int64_t i = First(); i < n; i += Stride()) {
    const float v = x[i];
    const bool inside = inclusive ? (v >= low && v <= high) : (v > low && v < high);
    dx[i] = inside ? dy[i] : 0.0f;
  }
}

// splitmix64 is a counter generator: the k-th number after `state` mixes state + k * golden, so
// each element computes its own draw (the CPU kernel's sequential loop, element by element).
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
__device__ inline uint64_t SplitMix64At(uint64_t state, uint64_t k) {
  uint64_t z = state + k * kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void DropoutKernel(const float* __restrict__ x, float* __restrict__ out, float* __restrict__ mask, int64_t n,
                              uint64_t state, uint64_t threshold, float scale) {
  for (int64_t i = First(); i < n; i += Stride()) {
    const float m = (SplitMix64At(state, static_cast<uint64_t>(i) + 1) >> 11) >= threshold ? scale : 0.0f;
    mask[i] = m;
    out[i] = x[i] * m;
  }
}

template <Binary op>
void LaunchBinaryOf(const float* x, const float* y, float* out, int64_t n, const BroadcastIndex& index, bool same_shape,
                    cudaStream_t stream) {
  if (same_shape) {
    SameShapeKernel<op><<<Blocks(n), kThreads, 0, stream>>>(x, y, out, n);
  } else {
    BroadcastKernel<op><<<Blocks(n), kThreads, 0, stream>>>(x, y, out, n, index);
  }
}

}  // namespace

cudaError_t LaunchBinary(Binary op, const float* x, const float* y, float* out, int64_t n, const BroadcastIndex& index,
                         bool same_shape, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (op) {
    case Binary::kAdd: LaunchBinaryOf<Binary::kAdd>(x, y, out, n, index, same_shape, stream); break;
    case Binary::kSub: LaunchBinaryOf<Binary::kSub>(x, y, out, n, index, same_shape, stream); break;
    case Binary::kMul: LaunchBinaryOf<Binary::kMul>(x, y, out, n, index, same_shape, stream); break;
    case Binary::kDiv: LaunchBinaryOf<Binary::kDiv>(x, y, out, n, index, same_shape, stream); break;
  }
  return cudaGetLastError();
}

cudaError_t LaunchBroadcast(const float* x, float* out, int64_t n, const BroadcastIndex& index, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  BroadcastCopyKernel<<<Blocks(n), kThreads, 0, stream>>>(x, out, n, index);
  return cudaGetLastError();
}

cudaError_t LaunchSumLike(const float* x, float* out, int64_t outputs, int64_t summed, const SumLikeIndex& index,
                          cudaStream_t stream) {
  if (outputs == 0) return cudaSuccess;
  SumLikeKernel<<<Blocks(outputs), kThreads, 0, stream>>>(x, out, outputs, summed, index);
  return cudaGetLastError();
}

cudaError_t LaunchAccumulate(const float* x, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AccumulateKernel<<<Blocks(n), kThreads, 0, stream>>>(x, out, n);
  return cudaGetLastError();
}

cudaError_t LaunchAffine(const float* x, float* out, int64_t n, float scale, float shift, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AffineKernel<<<Blocks(n), kThreads, 0, stream>>>(x, out, n, scale, shift);
  return cudaGetLastError();
}

cudaError_t LaunchRelu(const float* x, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluKernel<<<Blocks(n), kThreads, 0, stream>>>(x, out, n);
  return cudaGetLastError();
}

cudaError_t LaunchReluGrad(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluGradKernel<<<Blocks(n), kThreads, 0, stream>>>(y, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t LaunchBiasAdd(const float* x, const float* bias, float* out, int64_t outer, int64_t channels, int64_t inner,
                          bool relu, cudaStream_t stream) {
  const int64_t n = outer * channels * inner;
  if (n == 0) return cudaSuccess;
  BiasAddKernel<<<Blocks(n), kThreads, 0, stream>>>(x, bias, out, n, channels, inner, relu);
  return cudaGetLastError();
}

cudaError_t LaunchBiasAddGrad(const float* dy, float* dbias, int64_t outer, int64_t channels, int64_t inner,
                              cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  if (channels > 2147483647) return cudaErrorInvalidValue;
  BiasAddGradKernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(dy, dbias, outer, channels, inner);
  return cudaGetLastError();
}

cudaError_t LaunchFill(float* out, int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FillKernel<<<Blocks(n), kThreads, 0, stream>>>(out, n, value);
  return cudaGetLastError();
}

cudaError_t LaunchClamp(const float* x, float* out, int64_t n, float low, float high, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ClampKernel<<<Blocks(n), kThreads, 0, stream>>>(x, out, n, low, high);
  return cudaGetLastError();
}

cudaError_t LaunchClampGrad(const float* x, const float* dy, float* dx, int64_t n, float low, float high, bool inclusive,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ClampGradKernel<<<Blocks(n), kThreads, 0, stream>>>(x, dy, dx, n, low, high, inclusive);
  return cudaGetLastError();
}

cudaError_t LaunchDropout(const float* x, float* out, float* mask, int64_t n, uint64_t state, uint64_t threshold, float scale,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  DropoutKernel<<<Blocks(n), kThreads, 0, stream>>>(x, out, mask, n, state, threshold, scale);
  return cudaGetLastError();
}

}  // namespace actorflow::cuda

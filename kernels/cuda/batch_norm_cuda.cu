// CUDA kernels of batch normalization (kernels/batch_norm.cc's math): x viewed as (outer,
// channels, inner), one block per channel. Its threads stride over the channel's outer * inner
// elements and a shared-memory tree reduces their double partial sums in a fixed order, so results
// do not depend on scheduling; statistics are accumulated in double as on the CPU.
#include "kernels/cuda/launch.h"

namespace actorflow::cuda {
namespace {

constexpr int kThreads = 512;

// Sums `value` over the block; every thread gets the result.
__device__ double BlockSum(double value, double* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const double result = shared[0];
  __syncthreads();  // shared is reused by the next sum
  return result;
}

// A thread's walk over its channel's elements k = threadIdx.x, + blockDim.x, ... of the
// (outer, inner) plane, as (o, j) = (k / inner, k % inner) advanced without a 64-bit division per
// element (those would dominate the loop); k < outer * inner exactly when o < outer.
struct ChannelWalk {
  int64_t o, j, step_o, step_j;
  __device__ ChannelWalk(int64_t inner)
      : o(threadIdx.x / inner), j(threadIdx.x % inner), step_o(blockDim.x / inner), step_j(blockDim.x % inner) {}
  __device__ int64_t At(int64_t channel, int64_t channels, int64_t inner) const { return (o * channels + channel) * inner + j; }
  __device__ void Next(int64_t inner) {
    o += step_o;
    j += step_j;
    if (j >= inner) {
      j -= inner;
      ++o;
    }
  }
};

__global__ void BatchNormKernel(bool training, const float* __restrict__ x, const float* __restrict__ gamma,
                                const float* __restrict__ beta, float* __restrict__ moving_mean,
                                float* __restrict__ moving_variance, float* __restrict__ out, float* __restrict__ mean_out,
                                float* __restrict__ inv_std_out, int64_t outer, int64_t channels, int64_t inner, double epsilon,
                                double momentum) {
  __shared__ double shared[kThreads];
  const int64_t channel = blockIdx.x, count = outer * inner;
  if (inner == 0) outer = 0, inner = 1;  // no elements (the walk divides by inner)
  double mean, variance;
  if (training) {
    double sum = 0;
    for (ChannelWalk k(inner); k.o < outer; k.Next(inner)) sum += x[k.At(channel, channels, inner)];
    mean = BlockSum(sum, shared) / static_cast<double>(count);
    double squares = 0;
    for (ChannelWalk k(inner); k.o < outer; k.Next(inner)) {
      const double d = x[k.At(channel, channels, inner)] - mean;
      squares += d * d;
    }
    squares = BlockSum(squares, shared);
    variance = squares / static_cast<double>(count);
    if (threadIdx.x == 0) {
      const double unbiased = count > 1 ? squares / static_cast<double>(count - 1) : variance;
      moving_mean[channel] = static_cast<float>(momentum * moving_mean[channel] + (1 - momentum) * mean);
      moving_variance[channel] = static_cast<float>(momentum * moving_variance[channel] + (1 - momentum) * unbiased);
    }
  } else {
    mean = moving_mean[channel];
    variance = moving_variance[channel];
  }
  const float inv_std = static_cast<float>(1.0 / sqrt(variance + epsilon));
  const float scale = gamma[channel] * inv_std, shift = beta[channel] - static_cast<float>(mean) * scale;
  if (threadIdx.x == 0) {
    mean_out[channel] = static_cast<float>(mean);
    inv_std_out[channel] = inv_std;
  }
  for (ChannelWalk k(inner); k.o < outer; k.Next(inner)) {
    const int64_t i = k.At(channel, channels, inner);
    out[i] = x[i] * scale + shift;
  }
}

__global__ void BatchNormGradKernel(bool training, const float* __restrict__ x, const float* __restrict__ dy,
                                    const float* __restrict__ mean, const float* __restrict__ inv_std,
                                    const float* __restrict__ gamma, float* __restrict__ dx, float* __restrict__ dgamma,
                                    float* __restrict__ dbeta, int64_t outer, int64_t channels, int64_t inner) {
  __shared__ double shared[kThreads];
  const int64_t channel = blockIdx.x, count = outer * inner;
  if (inner == 0) outer = 0, inner = 1;  // no elements (the walk divides by inner)
  const float mu = mean[channel], s = inv_std[channel];
  double sum_dy = 0, sum_dy_xhat = 0;
  for (ChannelWalk k(inner); k.o < outer; k.Next(inner)) {
    const int64_t i = k.At(channel, channels, inner);
    sum_dy += dy[i];
    sum_dy_xhat += dy[i] * ((x[i] - mu) * s);
  }
  const float total_dy = static_cast<float>(BlockSum(sum_dy, shared));
  const float total_dy_xhat = static_cast<float>(BlockSum(sum_dy_xhat, shared));
  if (threadIdx.x == 0) {
    dgamma[channel] = total_dy_xhat;
    dbeta[channel] = total_dy;
  }
  const float k_scale = gamma[channel] * s, m = static_cast<float>(count);
  for (ChannelWalk k(inner); k.o < outer; k.Next(inner)) {
    const int64_t i = k.At(channel, channels, inner);
    if (training) {
      const float xhat = (x[i] - mu) * s;
      dx[i] = k_scale / m * (m * dy[i] - total_dy - xhat * total_dy_xhat);
    } else {
      dx[i] = k_scale * dy[i];
    }
  }
}

}  // namespace

cudaError_t LaunchBatchNorm(bool training, const float* x, const float* gamma, const float* beta, float* moving_mean,
                            float* moving_variance, float* out, float* mean, float* inv_std, int64_t outer, int64_t channels,
                            int64_t inner, double epsilon, double momentum, cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  if (channels > 2147483647) return cudaErrorInvalidValue;
  BatchNormKernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(
      training, x, gamma, beta, moving_mean, moving_variance, out, mean, inv_std, outer, channels, inner, epsilon, momentum);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormGrad(bool training, const float* x, const float* dy, const float* mean, const float* inv_std,
                                const float* gamma, float* dx, float* dgamma, float* dbeta, int64_t outer, int64_t channels,
                                int64_t inner, cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  if (channels > 2147483647) return cudaErrorInvalidValue;
  BatchNormGradKernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(training, x, dy, mean, inv_std, gamma, dx, dgamma,
                                                                               dbeta, outer, channels, inner);
  return cudaGetLastError();
}

}  // namespace actorflow::cuda

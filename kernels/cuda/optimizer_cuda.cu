// CUDA kernels of the optimizer updates: one fused elementwise pass per variable, in place, the
// same arithmetic as the CPU kernels (kernels/optimizer_ops.cc). lr is read from device memory
// (a (1,) feed), so a schedule costs no recompilation.
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/launch.h"

namespace actorflow::cuda {
namespace {

using namespace grid;  // kThreads, Blocks, First, Stride

__global__ void SgdKernel(float* __restrict__ w, const float* __restrict__ g, const float* __restrict__ lr, int64_t n,
                          UpdateHyper h) {
  const float rate = *lr;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    w[i] -= rate * (h.grad_scale * g[i] + h.weight_decay * w[i]);
}

__global__ void MomentumKernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
                               const float* __restrict__ lr, int64_t n, UpdateHyper h) {
  const float rate = *lr;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    m[i] = h.beta * m[i] - rate * (h.grad_scale * g[i] + h.weight_decay * w[i]);
    w[i] += m[i];
  }
}

__global__ void AdamKernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
                           const float* __restrict__ lr, int64_t n, UpdateHyper h) {
  const float rate = lr[0], c1 = h.corrected ? lr[1] : 1.0f, sqrt_c2 = h.corrected ? sqrtf(lr[2]) : 1.0f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = h.decoupled ? h.grad_scale * g[i] : h.grad_scale * g[i] + h.weight_decay * w[i];
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * gi;
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * gi * gi;
    float step = m[i] * c1 / (sqrtf(v[i]) * sqrt_c2 + h.epsilon);
    if (h.decoupled) step += h.weight_decay * w[i];
    w[i] -= rate * step;
  }
}

}  // namespace

cudaError_t LaunchSgd(float* w, const float* g, const float* lr, int64_t n, UpdateHyper h, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(w, g, lr, n, h);
  return cudaGetLastError();
}

cudaError_t LaunchMomentum(float* w, const float* g, float* m, const float* lr, int64_t n, UpdateHyper h, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  MomentumKernel<<<Blocks(n), kThreads, 0, stream>>>(w, g, m, lr, n, h);
  return cudaGetLastError();
}

cudaError_t LaunchAdam(float* w, const float* g, float* m, float* v, const float* lr, int64_t n, UpdateHyper h,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AdamKernel<<<Blocks(n), kThreads, 0, stream>>>(w, g, m, v, lr, n, h);
  return cudaGetLastError();
}

}  // namespace actorflow::cuda

// The CUDA elementwise add: float32, same shapes, one grid-stride loop on the caller's stream.
// Kept free of project headers so nvcc compiles only this (the registration is add_cuda.cc).
#include "kernels/cuda/add_cuda.h"

namespace actorflow {
namespace {

__global__ void AddFloat32Kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                                 int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = a[i] + b[i];
}

}  // namespace

cudaError_t LaunchAddFloat32(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  // Enough blocks to cover n, capped: the grid-stride loop covers the rest.
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 65535 ? wanted : 65535);
  AddFloat32Kernel<<<blocks, kThreads, 0, stream>>>(a, b, out, n);
  return cudaGetLastError();
}

}  // namespace actorflow

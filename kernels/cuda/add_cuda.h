// CUDA kernels of the elementwise family (device type "cuda"); built when CUDA is enabled.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace actorflow {

// out[i] = a[i] + b[i] for i < n, device pointers, enqueued on `stream` (asynchronous). Returns
// the launch's error (cudaSuccess when enqueued).
cudaError_t LaunchAddFloat32(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);

}  // namespace actorflow

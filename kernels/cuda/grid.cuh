// Grid sizing shared by the CUDA kernel files (nvcc only): kThreads threads per block and
// grid-stride loops, so a launcher sizes its grid from n and caps it (the loop covers the rest).
#pragma once

#include <cstdint>

namespace actorflow::cuda::grid {

inline constexpr int kThreads = 256;

// Blocks for n elements at kThreads per block: at least 1, at most 65535.
inline int Blocks(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<int>(wanted < 65535 ? (wanted > 0 ? wanted : 1) : 65535);
}

// The grid-stride loop of the calling thread: for (i = First(); i < n; i += Stride()).
__device__ inline int64_t First() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t Stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace actorflow::cuda::grid

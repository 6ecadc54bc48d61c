// CUDA kernels of the reduction and softmax families: sums over a contiguous range of axes,
// softmax over the last axis, sparse softmax cross-entropy and its gradient. Block reductions
// go through shared memory in a fixed tree order (deterministic results).
#include <cfloat>

#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/launch.h"

namespace actorflow::cuda {
namespace {

using namespace grid;  // kThreads, Blocks, First, Stride

// Reduces `value` over the block with `op`; every thread gets the result.
template <typename Op>
__device__ float BlockReduce(float value, Op op, float* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();  // shared is reused by the next reduction
  return result;
}
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// Few outputs: one block per output, its threads split the reduced axis.
__global__ void ReduceBlockPerOutput(const float* __restrict__ x, float* __restrict__ out, int64_t reduced, int64_t inner,
                                     float scale) {
  __shared__ float shared[kThreads];
  const int64_t output = blockIdx.x, o = output / inner, j = output % inner;
  float sum = 0.0f;
  for (int64_t r = threadIdx.x; r < reduced; r += blockDim.x) sum += x[(o * reduced + r) * inner + j];
  sum = BlockReduce(sum, Sum(), shared);
  if (threadIdx.x == 0) out[output] = sum * scale;
}

// Many outputs: one thread per output (neighbouring threads read neighbouring inner elements).
__global__ void ReduceThreadPerOutput(const float* __restrict__ x, float* __restrict__ out, int64_t outputs, int64_t reduced,
                                      int64_t inner, float scale) {
  for (int64_t output = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; output < outputs;
       output += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = output / inner, j = output % inner;
    float sum = 0.0f;
    for (int64_t r = 0; r < reduced; ++r) sum += x[(o * reduced + r) * inner + j];
    out[output] = sum * scale;
  }
}

// Softmax of one row by one block: result = exp(row - max) / sum. Returns the row's max and
// the sum of exponentials (every thread gets them), which the cross entropy's loss needs.
struct RowStats {
  float max, sum;
};
__device__ RowStats BlockSoftmaxRow(const float* __restrict__ row, float* __restrict__ result, int64_t classes,
                                    float* shared) {
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = BlockReduce(mx, Max(), shared);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
    const float e = expf(row[j] - mx);
    result[j] = e;
    sum += e;
  }
  sum = BlockReduce(sum, Sum(), shared);
  const float inverse = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) result[j] *= inverse;
  return {mx, sum};
}

__global__ void SoftmaxKernel(const float* __restrict__ x, float* __restrict__ out, int64_t classes) {
  __shared__ float shared[kThreads];
  BlockSoftmaxRow(x + blockIdx.x * classes, out + blockIdx.x * classes, classes, shared);
}

__device__ inline int64_t LabelAt(const void* labels, bool labels64, int64_t i) {
  return labels64 ? static_cast<const int64_t*>(labels)[i] : static_cast<const int32_t*>(labels)[i];
}

__global__ void SparseSoftmaxCrossEntropyKernel(const void* labels, bool labels64, const float* __restrict__ logits,
                                                float* __restrict__ loss, float* __restrict__ prob, int64_t classes,
                                                int64_t* bad_label) {
  __shared__ float shared[kThreads];
  const int64_t i = blockIdx.x;
  const float* row = logits + i * classes;
  const RowStats stats = BlockSoftmaxRow(row, prob + i * classes, classes, shared);
  const float mx = stats.max, sum = stats.sum;
  if (threadIdx.x == 0) {
    const int64_t label = LabelAt(labels, labels64, i);
    if (label < 0 || label >= classes) {
      loss[i] = __int_as_float(0x7fc00000);  // NaN; the host reports the row
      if (bad_label != nullptr) atomicCAS(reinterpret_cast<unsigned long long*>(bad_label),
                                          static_cast<unsigned long long>(-1), static_cast<unsigned long long>(i));
    } else {
      loss[i] = -(row[label] - mx - logf(sum));
    }
  }
}

__global__ void SparseSoftmaxCrossEntropyGradKernel(const void* labels, bool labels64, const float* __restrict__ prob,
                                                    const float* __restrict__ dloss, float* __restrict__ dlogits,
                                                    int64_t n, int64_t classes) {
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = k / classes, j = k % classes;
    const float s = dloss[i];
    dlogits[k] = prob[k] * s - (LabelAt(labels, labels64, i) == j ? s : 0.0f);
  }
}

}  // namespace

cudaError_t LaunchReduceSum(const float* x, float* out, int64_t outer, int64_t reduced, int64_t inner, float scale,
                            cudaStream_t stream) {
  const int64_t outputs = outer * inner;
  if (outputs == 0) return cudaSuccess;
  if (outputs <= 4096 && reduced >= 64) {
    ReduceBlockPerOutput<<<static_cast<unsigned>(outputs), kThreads, 0, stream>>>(x, out, reduced, inner, scale);
  } else {
    ReduceThreadPerOutput<<<Blocks(outputs), kThreads, 0, stream>>>(x, out, outputs, reduced, inner, scale);
  }
  return cudaGetLastError();
}

cudaError_t LaunchSoftmax(const float* x, float* out, int64_t rows, int64_t classes, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows > 2147483647) return cudaErrorInvalidValue;
  SoftmaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, out, classes);
  return cudaGetLastError();
}

cudaError_t LaunchSparseSoftmaxCrossEntropy(const void* labels, bool labels64, const float* logits, float* loss, float* prob,
                                            int64_t rows, int64_t classes, int64_t* bad_label, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows > 2147483647) return cudaErrorInvalidValue;
  SparseSoftmaxCrossEntropyKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(labels, labels64, logits, loss, prob,
                                                                                        classes, bad_label);
  return cudaGetLastError();
}

cudaError_t LaunchSparseSoftmaxCrossEntropyGrad(const void* labels, bool labels64, const float* prob, const float* dloss,
                                                float* dlogits, int64_t rows, int64_t classes, cudaStream_t stream) {
  const int64_t n = rows * classes;
  if (n == 0) return cudaSuccess;
  SparseSoftmaxCrossEntropyGradKernel<<<Blocks(n), kThreads, 0, stream>>>(labels, labels64, prob, dloss, dlogits, n, classes);
  return cudaGetLastError();
}

}  // namespace actorflow::cuda

// Host-side helpers of the CUDA kernel factories (kernels/cuda/*_cuda.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>

#include "actors/device.h"
#include "kernels/op_registry.h"

namespace actorflow::cuda {

// Internal error naming `what` and the CUDA error (name and text); OK for cudaSuccess.
Status CudaStatus(cudaError_t error, const std::string& what);

// The launch of one act: enqueue on `stream`, return the launch's error.
using CudaLaunch = std::function<cudaError_t(KernelContext& context, cudaStream_t stream)>;

// A "cuda" kernel of op `type`: init must name the device's stream (KernelInit::device_stream,
// its native handle in KernelInit::stream), else InvalidArgument naming the op. Each act sets
// the device, launches, and completes from the stream (StreamKernel): asynchronous in the
// runtime, waiting for the stream when called directly. `check_after` as StreamKernel's.
StatusOr<KernelFn> CudaKernel(const std::string& type, const KernelInit& init, CudaLaunch launch,
                              std::function<Status(int64_t iteration)> check_after = nullptr);

// As CudaKernel, for launches that report their own Status (library calls such as cuBLAS).
using CudaStatusLaunch = std::function<Status(KernelContext& context, cudaStream_t stream)>;
StatusOr<KernelFn> CudaKernelWithStatus(const std::string& type, const KernelInit& init, CudaStatusLaunch launch);

// Unimplemented naming the op unless every listed tensor is float32.
Status ExpectFloat32(const std::string& type, const std::vector<TensorDesc>& tensors, const std::string& what);

// Registration of each family's "cuda" factories (called by RegisterCudaKernels).
void RegisterElementwiseCudaKernels(OpRegistry& registry);
void RegisterSoftmaxCudaKernels(OpRegistry& registry);
void RegisterOptimizerCudaKernels(OpRegistry& registry);
void RegisterMatmulCudaKernels(OpRegistry& registry);
void RegisterPoolCudaKernels(OpRegistry& registry);
void RegisterBatchNormCudaKernels(OpRegistry& registry);
void RegisterConvCudaKernels(OpRegistry& registry);  // built when cuDNN is found

}  // namespace actorflow::cuda

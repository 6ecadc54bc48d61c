// Registers the CUDA kernels with the op registry (next to the ops' CPU kernels), and the
// helpers every CUDA factory shares.
#include <stdexcept>

#include "kernels/cuda/cuda_kernel_util.h"

namespace actorflow {
namespace cuda {

Status CudaStatus(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return Status::Ok();
  return Internal(what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
}

StatusOr<KernelFn> CudaKernel(const std::string& type, const KernelInit& init, CudaLaunch launch,
                              std::function<Status(int64_t iteration)> check_after) {
  if (init.device_stream == nullptr || init.stream == nullptr)
    return InvalidArgument(type + " on cuda:" + std::to_string(init.device_id) +
                           ": KernelInit::device_stream and stream must name the device's stream (the default stream "
                           "is never used)");
  cudaStream_t stream = static_cast<cudaStream_t>(init.stream);
  const int device = init.device_id;
  return StreamKernel(
      init.device_stream,
      [=](KernelContext& context) -> Status {
        AF_RETURN_IF_ERROR(
            CudaStatus(cudaSetDevice(device), type + " on cuda: cudaSetDevice(" + std::to_string(device) + ")"));
        return CudaStatus(launch(context, stream), type + " on cuda: launch");
      },
      std::move(check_after));
}

StatusOr<KernelFn> CudaKernelWithStatus(const std::string& type, const KernelInit& init, CudaStatusLaunch launch) {
  if (init.device_stream == nullptr || init.stream == nullptr)
    return InvalidArgument(type + " on cuda:" + std::to_string(init.device_id) +
                           ": KernelInit::device_stream and stream must name the device's stream (the default stream "
                           "is never used)");
  cudaStream_t stream = static_cast<cudaStream_t>(init.stream);
  const int device = init.device_id;
  return StreamKernel(init.device_stream, [=](KernelContext& context) -> Status {
    AF_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), type + " on cuda: cudaSetDevice(" + std::to_string(device) + ")"));
    return launch(context, stream).WithContext(type + " on cuda");
  });
}

Status ExpectFloat32(const std::string& type, const std::vector<TensorDesc>& tensors, const std::string& what) {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].dtype != DType::kFloat32)
      return Unimplemented(type + " on cuda: float32 only so far, " + what + " " + std::to_string(i) + " is " +
                           tensors[i].ToString());
  return Status::Ok();
}

}  // namespace cuda

void RegisterCudaKernels(OpRegistry& registry) {
  cuda::RegisterElementwiseCudaKernels(registry);
  cuda::RegisterSoftmaxCudaKernels(registry);
  cuda::RegisterOptimizerCudaKernels(registry);
  cuda::RegisterMatmulCudaKernels(registry);
  cuda::RegisterPoolCudaKernels(registry);
  cuda::RegisterBatchNormCudaKernels(registry);
#ifdef ACTORFLOW_WITH_CUDNN
  cuda::RegisterConvCudaKernels(registry);
#endif
}

}  // namespace actorflow

// Registers the CUDA kernels with the op registry (next to the ops' CPU kernels).
#include <cuda_runtime_api.h>

#include <stdexcept>

#include "kernels/cuda/add_cuda.h"
#include "kernels/op_registry.h"

namespace actorflow {
namespace {

Status CudaError(cudaError_t error, const std::string& what) {
  return Internal(what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
}

// add on "cuda": float32 operands of one shape (no broadcasting yet), device memory, launched on
// KernelInit::stream; the device is selected per call (actor threads may serve several devices).
StatusOr<KernelFn> MakeAddCudaKernel(const KernelInit& init) {
  if (init.inputs.size() != 2 || init.outputs.size() != 1)
    return InvalidArgument("add on cuda: expected 2 inputs and 1 output, got " + std::to_string(init.inputs.size()) +
                           " and " + std::to_string(init.outputs.size()));
  for (size_t i = 0; i < 2; ++i)
    if (init.inputs[i].dtype != DType::kFloat32 || init.inputs[i].shape != init.outputs[0].shape)
      return Unimplemented("add on cuda: only float32 operands of the output's shape " + init.outputs[0].ToString() +
                           ", input " + std::to_string(i) + " is " + init.inputs[i].ToString());
  if (init.stream == nullptr) return InvalidArgument("add on cuda: KernelInit::stream is null (the default stream is not used)");
  const int64_t n = init.outputs[0].num_elements();
  const int device = init.device_id;
  cudaStream_t stream = static_cast<cudaStream_t>(init.stream);
  return KernelFn([n, device, stream](KernelContext& c) -> Status {
    cudaError_t error = cudaSetDevice(device);
    if (error != cudaSuccess) return CudaError(error, "add on cuda: cudaSetDevice(" + std::to_string(device) + ")");
    error = LaunchAddFloat32(c.input(0).as<float>(), c.input(1).as<float>(), c.output(0).as<float>(), n, stream);
    if (error != cudaSuccess) return CudaError(error, "add on cuda: launch");
    return Status::Ok();
  });
}

}  // namespace

void RegisterCudaKernels(OpRegistry& registry) {
  Status added = registry.AddKernelFactory("add", kCudaDevice, MakeAddCudaKernel);
  if (!added.ok()) throw std::logic_error(added.message());
}

}  // namespace actorflow

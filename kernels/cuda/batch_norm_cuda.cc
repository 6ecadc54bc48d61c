// "cuda" factories of batch_normalization and batch_normalization_grad over the launchers of
// batch_norm_cuda.cu, with the CPU kernel's attrs and semantics (kernels/batch_norm.cc): axis
// (default 1), epsilon (1e-5), momentum (0.99, the weight of the old moving statistic), training;
// outputs out, mean, inv_std; in training the moving statistics (inputs 3, 4) are updated in place.
// Own kernels rather than cuDNN's: the channel axis may be any axis (cuDNN's is 1 of NCHW),
// inference also outputs mean and inv_std, and the statistics are accumulated in double as on
// the CPU, so the two devices agree closely.
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/kernel_util.h"

namespace actorflow::cuda {
namespace {

void Add(OpRegistry& registry, const std::string& type, KernelFactory factory) {
  Status added = registry.AddKernelFactory(type, kCudaDevice, std::move(factory));
  if (!added.ok()) throw std::logic_error(added.message());
}

StatusOr<AxisSplit> ChannelSplit(const std::string& type, const KernelInit& init) {
  AF_RETURN_IF_ERROR(ExpectFloat32(type, init.inputs, "input"));
  const Shape& x = init.inputs.at(0).shape;
  AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(init.attrs.GetIntOr("axis", 1), x.size(), "axis"));
  return SplitAt(x, axis);
}

}  // namespace

void RegisterBatchNormCudaKernels(OpRegistry& registry) {
  // (x, gamma, beta, moving_mean, moving_variance) -> (out, mean, inv_std).
  Add(registry, "batch_normalization", [](const KernelInit& init) -> StatusOr<KernelFn> {
    const std::string type = "batch_normalization";
    AF_ASSIGN_OR_RETURN(AxisSplit s, ChannelSplit(type, init));
    const bool training = init.attrs.GetBoolOr("training", false);
    const double epsilon = init.attrs.GetFloatOr("epsilon", 1e-5), momentum = init.attrs.GetFloatOr("momentum", 0.99);
    return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchBatchNorm(training, c.input(0).as<float>(), c.input(1).as<float>(), c.input(2).as<float>(),
                             c.input(3).as<float>(), c.input(4).as<float>(), c.output(0).as<float>(), c.output(1).as<float>(),
                             c.output(2).as<float>(), s.outer, s.channels, s.inner, epsilon, momentum, stream);
    });
  });
  // (x, dy, mean, inv_std, gamma) -> (dx, dgamma, dbeta).
  Add(registry, "batch_normalization_grad", [](const KernelInit& init) -> StatusOr<KernelFn> {
    const std::string type = "batch_normalization_grad";
    AF_ASSIGN_OR_RETURN(AxisSplit s, ChannelSplit(type, init));
    const bool training = init.attrs.GetBoolOr("training", false);
    return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchBatchNormGrad(training, c.input(0).as<float>(), c.input(1).as<float>(), c.input(2).as<float>(),
                                 c.input(3).as<float>(), c.input(4).as<float>(), c.output(0).as<float>(),
                                 c.output(1).as<float>(), c.output(2).as<float>(), s.outer, s.channels, s.inner, stream);
    });
  });
}

}  // namespace actorflow::cuda

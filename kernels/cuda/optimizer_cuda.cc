// "cuda" factories of the optimizer updates (sgd, momentum, adam) over optimizer_cuda.cu; the
// hyperparameters are read once, as the CPU kernels read them.
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/launch.h"

namespace actorflow::cuda {
namespace {

void Add(OpRegistry& registry, const std::string& type, KernelFactory factory) {
  Status added = registry.AddKernelFactory(type, kCudaDevice, std::move(factory));
  if (!added.ok()) throw std::logic_error(added.message());
}

UpdateHyper HyperOf(const Attrs& a) {
  UpdateHyper h;
  h.weight_decay = static_cast<float>(a.GetFloatOr("weight_decay", 0));
  h.grad_scale = static_cast<float>(a.GetFloatOr("grad_scale", 1.0));
  h.beta = static_cast<float>(a.GetFloatOr("beta", 0.9));
  h.beta1 = static_cast<float>(a.GetFloatOr("beta1", 0.9));
  h.beta2 = static_cast<float>(a.GetFloatOr("beta2", 0.999));
  h.epsilon = static_cast<float>(a.GetFloatOr("epsilon", 1e-8));
  h.decoupled = a.GetBoolOr("decoupled_weight_decay", false);
  return h;
}

}  // namespace

void RegisterOptimizerCudaKernels(OpRegistry& registry) {
  Add(registry, "sgd_update", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("sgd_update", init.inputs, "input"));
    const int64_t n = init.inputs[0].num_elements();
    const UpdateHyper h = HyperOf(init.attrs);
    return CudaKernel("sgd_update", init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchSgd(c.input(0).as<float>(), c.input(1).as<float>(), c.input(2).as<float>(), n, h, stream);
    });
  });
  Add(registry, "momentum_update", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("momentum_update", init.inputs, "input"));
    const int64_t n = init.inputs[0].num_elements();
    const UpdateHyper h = HyperOf(init.attrs);
    return CudaKernel("momentum_update", init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchMomentum(c.input(0).as<float>(), c.input(1).as<float>(), c.input(2).as<float>(), c.input(3).as<float>(), n,
                            h, stream);
    });
  });
  Add(registry, "adam_update", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("adam_update", init.inputs, "input"));
    const int64_t n = init.inputs[0].num_elements();
    UpdateHyper h = HyperOf(init.attrs);
    h.corrected = init.inputs[4].num_elements() == 3;
    return CudaKernel("adam_update", init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchAdam(c.input(0).as<float>(), c.input(1).as<float>(), c.input(2).as<float>(), c.input(3).as<float>(),
                        c.input(4).as<float>(), n, h, stream);
    });
  });
}

}  // namespace actorflow::cuda

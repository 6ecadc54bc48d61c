// The list of op families. Adding a family: one Register*Ops function here.
#include <mutex>

#include "kernels/op_registry.h"

namespace actorflow {

void RegisterMatmulOps(OpRegistry& registry);
void RegisterMatmulUpdateOps(OpRegistry& registry);
void RegisterElementwiseOps(OpRegistry& registry);
void RegisterActivationOps(OpRegistry& registry);
void RegisterMathOps(OpRegistry& registry);
void RegisterReduceOps(OpRegistry& registry);
void RegisterSoftmaxOps(OpRegistry& registry);
void RegisterShapeOps(OpRegistry& registry);
void RegisterIndexOps(OpRegistry& registry);
void RegisterMiscOps(OpRegistry& registry);
void RegisterPadOps(OpRegistry& registry);
void RegisterOptimizerOps(OpRegistry& registry);
void RegisterConvOps(OpRegistry& registry);
void RegisterPoolOps(OpRegistry& registry);
void RegisterBatchNormOps(OpRegistry& registry);
void RegisterDropoutOps(OpRegistry& registry);
void RegisterClampOps(OpRegistry& registry);
void RegisterAdaptivePoolOps(OpRegistry& registry);
void RegisterBoxingOps(OpRegistry& registry);
void RegisterDeviceCopyOps(OpRegistry& registry);
#ifdef ACTORFLOW_WITH_CUDA
void RegisterCudaKernels(OpRegistry& registry);  // kernels/cuda/: "cuda" factories of registered ops
#endif

void RegisterAllOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpRegistry& registry = OpRegistry::Global();
    RegisterMatmulOps(registry);
    RegisterMatmulUpdateOps(registry);
    RegisterElementwiseOps(registry);
    RegisterActivationOps(registry);
    RegisterMathOps(registry);
    RegisterReduceOps(registry);
    RegisterSoftmaxOps(registry);
    RegisterShapeOps(registry);
    RegisterIndexOps(registry);
    RegisterMiscOps(registry);
    RegisterPadOps(registry);
    RegisterOptimizerOps(registry);
    RegisterConvOps(registry);
    RegisterPoolOps(registry);
    RegisterBatchNormOps(registry);
    RegisterDropoutOps(registry);
    RegisterClampOps(registry);
    RegisterAdaptivePoolOps(registry);
    RegisterBoxingOps(registry);
    RegisterDeviceCopyOps(registry);
#ifdef ACTORFLOW_WITH_CUDA
    RegisterCudaKernels(registry);
#endif
  });
}

}  // namespace actorflow

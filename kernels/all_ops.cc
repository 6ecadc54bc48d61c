// The list of op families. Adding a family: one Register*Ops function here.
#include <mutex>

#include "kernels/op_registry.h"

namespace actorflow {

void RegisterMatmulOps(OpRegistry& registry);
void RegisterElementwiseOps(OpRegistry& registry);
void RegisterActivationOps(OpRegistry& registry);
void RegisterNnOps(OpRegistry& registry);
void RegisterOptimizerOps(OpRegistry& registry);
void RegisterPadOps(OpRegistry& registry);

void RegisterAllOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpRegistry& registry = OpRegistry::Global();
    RegisterMatmulOps(registry);
    RegisterElementwiseOps(registry);
    RegisterActivationOps(registry);
    RegisterNnOps(registry);
    RegisterOptimizerOps(registry);
    RegisterPadOps(registry);
  });
}

}  // namespace actorflow

// The passes that turn a kernel's choice off (disable_fusion of "gemm_chunks", "gemv",
// "narrow_gemm", "packed_weights"): each sets one attribute on the CPU ops of some types, read by
// their kernels, so a user can bisect a numerical difference or compare two paths on a host.
#include <set>

#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace {

class KernelChoicePass : public Pass {
 public:
  KernelChoicePass(std::string name, std::set<std::string> types, std::string attr, bool value)
      : name_(std::move(name)), types_(std::move(types)), attr_(std::move(attr)), value_(value) {}
  std::string name() const override { return name_; }
  Status Run(Graph& graph) override {
    for (Node& node : graph.mutable_nodes()) {
      if (node.kind != NodeKind::kOp || !types_.count(node.type)) continue;
      if (node.placement.device_type == "gpu" || node.placement.device_type == "cuda") continue;
      node.attrs.Set(attr_, value_);
    }
    return Status::Ok();
  }

 private:
  std::string name_;
  std::set<std::string> types_;
  std::string attr_;
  bool value_;
};

}  // namespace

// "gemm_chunks" off: CPU matmuls and their fused SGD updates run each GEMM as one oneDNN call
// with an OpenMP team instead of blocks claimed by the kernel helper threads (kernels/gemm.h),
// and convolutions (forward, both gradients) as one call instead of sample chunks (kernels/conv.cc).
std::unique_ptr<Pass> MakeOpenMpGemmPass() {
  return std::make_unique<KernelChoicePass>(
      "openmp gemm", std::set<std::string>{"matmul", "matmul_sgd_update", "conv2d", "conv2d_grad_data", "conv2d_grad_filter"},
      "omp_team", true);
}

// "gemv" off: CPU matmuls with a few rows of a (batch-1 inference) run as oneDNN GEMMs instead of
// the kernels' GEMV loop (kernels/gemv.h).
std::unique_ptr<Pass> MakeNoGemvPass() {
  return std::make_unique<KernelChoicePass>("no gemv", std::set<std::string>{"matmul"}, "gemv", false);
}

// "narrow_gemm" off: CPU matmuls and matmul_sgd_updates with one small dimension (a dense layer
// with few units and its gradients) run as oneDNN GEMMs instead of the kernels' register-tiled
// loops (kernels/matmul_narrow.h; the loops sum in k's order, oneDNN blocks the sum its own way).
std::unique_ptr<Pass> MakeNoNarrowGemmPass() {
  return std::make_unique<KernelChoicePass>("no narrow gemm", std::set<std::string>{"matmul", "matmul_sgd_update"},
                                            "narrow_gemm", false);
}

// "packed_weights" off: CPU matmuls and channels-last 1x1 conv2ds keep reading a right operand
// (filter) the job only reads (a predict job's weights) where it is, through dnnl_sgemm, instead
// of a copy in oneDNN's packed layout (kernels/matmul_packed.h).
std::unique_ptr<Pass> MakeNoPackedWeightsPass() {
  return std::make_unique<KernelChoicePass>("no packed weights", std::set<std::string>{"matmul", "conv2d"}, "packed_weights",
                                            false);
}

}  // namespace graph
}  // namespace actorflow

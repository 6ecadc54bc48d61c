// disable_fusion("narrow_gemm"): CPU matmuls and matmul_sgd_updates with one small dimension
// (a dense layer with few units and its gradients) run as oneDNN GEMMs instead of the kernels'
// register-tiled loops (kernels/matmul_narrow.h), to bisect a numerical difference (the loops
// sum in k's order; oneDNN blocks the sum its own way) or compare the two on a host.
#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace {

class NoNarrowGemmPass : public Pass {
 public:
  std::string name() const override { return "no narrow gemm"; }
  Status Run(Graph& graph) override {
    for (Node& node : graph.mutable_nodes()) {
      if (node.kind != NodeKind::kOp || (node.type != "matmul" && node.type != "matmul_sgd_update")) continue;
      if (node.placement.device_type == "gpu" || node.placement.device_type == "cuda") continue;
      node.attrs.Set("narrow_gemm", false);
    }
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Pass> MakeNoNarrowGemmPass() { return std::make_unique<NoNarrowGemmPass>(); }

}  // namespace graph
}  // namespace actorflow

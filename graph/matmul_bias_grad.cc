// "matmul_bias_grad": a dense layer's bias gradient summed by the matmul that produces its dy.
// bias_add_grad(dy) on dy's last axis, where dy is a CPU float32 matmul's output (the data
// gradient of the next layer, usually masked by the relu's gradient), becomes the matmul's
// second output "dbias" (attr fuse_bias_grad, kernels/matmul.cc): the kernel adds each stored
// element to its column's sum while it is still in registers (the narrow rows loop) or sums
// the columns right after the product, and the pass over dy by another actor disappears. When
// the bias gradient was already fused with its SGD update (bias_add_grad_sgd_update, from
// "bias_gradient_update"), that update becomes sgd_update(bias, dbias, lr): the same
// expression, now over the (C,) sums alone. Same floats as the unfused ops: the sums add the
// rows in bias_add_grad's order.
//
// Runs after the relu-gradient fusion (which makes the masked data-gradient matmul) and before
// ordering, on single-device jobs (on several devices the SBP pass has not yet chosen how dy
// is laid out). The matmul keeps its name and place: it precedes the bias op, whose readers
// it then precedes too. A bias op with control inputs is left alone (the matmul would have to
// move after them).
#include <map>
#include <set>

#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace {

bool OnCpu(const Node& n) { return n.placement.device_type != "gpu" && n.placement.device_type != "cuda"; }

class MatmulBiasGradFusionPass : public Pass {
 public:
  std::string name() const override { return "matmul bias_grad fusion"; }

  Status Run(Graph& graph) override {
    if (graph.total_device_num() > 1) return Status::Ok();
    std::map<std::string, std::string> renamed, absorbed;
    std::vector<bool> keep(graph.nodes().size(), true), fused_matmul(graph.nodes().size(), false);
    for (size_t b = 0; b < graph.nodes().size(); ++b) {
      const Node& bias = graph.nodes()[b];
      if (bias.kind != NodeKind::kOp || !OnCpu(bias) || !bias.control_inputs.empty()) continue;
      const bool with_update = bias.type == "bias_add_grad_sgd_update" && bias.inputs.size() == 3;
      if (!with_update && !(bias.type == "bias_add_grad" && bias.inputs.size() == 1 && bias.mutable_inputs.empty()))
        continue;
      const std::string& dy = bias.inputs[with_update ? 1 : 0];
      AF_ASSIGN_OR_RETURN(auto producer, graph.Resolve(dy));
      const Node* mm = producer.first;
      if (producer.second != 0 || mm->kind != NodeKind::kOp || mm->type != "matmul" || !OnCpu(*mm) ||
          mm->output_descs.size() != 1 || mm->attrs.GetBoolOr("fuse_bias_grad", false) || !mm->mutable_inputs.empty())
        continue;
      const TensorDesc& product = mm->output_descs[0];
      const int64_t rank = static_cast<int64_t>(product.shape.size());
      const int64_t axis = bias.attrs.GetIntOr("axis", 1);
      if (product.dtype != DType::kFloat32 || rank < 2 || (axis != rank - 1 && axis != -1)) continue;
      if (with_update && bias.inputs[0] == mm->inputs[0]) continue;  // never: a bias is not a matmul operand
      const size_t m = static_cast<size_t>(mm - graph.nodes().data());
      if (m >= b || !keep[m] || fused_matmul[m] || mm->placement.ToString() != bias.placement.ToString()) continue;

      Node& matmul = graph.mutable_nodes()[m];
      matmul.attrs.Set("fuse_bias_grad", true);
      matmul.output_names.push_back("dbias");
      matmul.output_descs.push_back(TensorDesc{{product.shape[rank - 1]}, DType::kFloat32});
      if (matmul.output_sbp_hints.size() == 1) matmul.output_sbp_hints.push_back(std::nullopt);
      fused_matmul[m] = true;
      if (with_update) {
        // The update keeps its name, place and attrs (grad_scale, weight_decay): sgd_update's
        // expression is bias_add_grad_sgd_update's after its sums.
        Node update = bias;
        update.type = "sgd_update";
        update.inputs = {bias.inputs[0], matmul.output_ref(1), bias.inputs[2]};
        update.attrs = Attrs{{"weight_decay", bias.attrs.GetFloatOr("weight_decay", 0.0)},
                             {"grad_scale", bias.attrs.GetFloatOr("grad_scale", 1.0)}};
        graph.mutable_nodes()[b] = std::move(update);
      } else {
        renamed[bias.output_ref(0)] = matmul.output_ref(1);
        absorbed[bias.name] = matmul.name;
        keep[b] = false;
      }
    }
    if (renamed.empty()) return Status::Ok();
    RedirectFusedReaders(graph, renamed, absorbed);
    RenameJobRefs(graph, renamed);
    graph.Retain(keep);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Pass> MakeMatmulBiasGradFusionPass() { return std::make_unique<MatmulBiasGradFusionPass>(); }

}  // namespace graph
}  // namespace actorflow

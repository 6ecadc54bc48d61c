// Gradient-update fusion: a plain SGD update whose gradient is one 2-D matmul read by nothing
// else becomes one matmul_sgd_update (kernels/matmul_update.cc): the GEMM accumulates straight
// into the variable, so the gradient is never stored and the update's pass over the weight is
// gone. Runs after the dense-layer fusion (the gradient matmuls carry no bias) and before the
// ordering pass, which then orders the fused writer after every reader of the variable as it
// did the update.
//
// Before placement, on single-device jobs. On several devices a gradient is mostly a partial
// sum that the boxing pass reduces before the update, which the fused GEMM would skip; so there
// the pass runs again after the SBP pass (`placed`, one machine) and fuses only where the SBP
// pass put the gradient matmul whole (every layout B) on its update's one device, reading the
// gathered operands: the sum over the devices' rows is then the GEMM's own. A gradient that is
// watched (watch_diff), clipped (the norm reads it too), an output or a loss keeps the unfused
// form.
#include <map>
#include <set>

#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace {

bool AllBroadcast(const std::vector<Sbp>& layouts) {
  for (const Sbp& sbp : layouts)
    if (sbp.kind != SbpKind::kBroadcast) return false;
  return true;
}

class GradientUpdateFusionPass : public Pass {
 public:
  explicit GradientUpdateFusionPass(bool placed) : placed_(placed) {}
  std::string name() const override { return placed_ ? "placed gradient update fusion" : "gradient update fusion"; }

  Status Run(Graph& graph) override {
    if (!graph.is_train()) return Status::Ok();
    if (placed_ ? graph.total_device_num() <= 1 || graph.machine_num() > 1 : graph.total_device_num() > 1)
      return Status::Ok();  // every machine's devices
    // The gradients the updates read: the only refs asked about below.
    std::unordered_map<std::string, int> readers = CountReadersOf(graph, [](const Node& n) -> const std::string* {
      return n.kind == NodeKind::kOp && n.type == "sgd_update" && n.inputs.size() == 3 ? &n.inputs[1] : nullptr;
    });
    std::set<std::string> pinned = PinnedRefs(graph);
    for (const Watch& w : graph.watches()) {  // a watch_diff's gradient
      auto it = w.diff ? graph.gradients().find(w.ref) : graph.gradients().end();
      if (it != graph.gradients().end()) pinned.insert(it->second);
    }

    std::vector<bool> keep(graph.nodes().size(), true);
    std::map<std::string, std::string> absorbed;  // gradient matmul name -> fused node name
    std::set<std::string> removed_refs;
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const Node& update = graph.nodes()[i];
      if (update.kind != NodeKind::kOp || update.type != "sgd_update" || update.inputs.size() != 3) continue;
      // matmul_sgd_update has no CUDA kernel yet: GPU updates stay unfused (docs/gpu.md).
      if (update.placement.device_type == "gpu" || update.placement.device_type == "cuda") continue;
      const std::string &var_ref = update.inputs[0], &grad_ref = update.inputs[1];
      if (readers[grad_ref] != 1 || pinned.count(grad_ref)) continue;
      AF_ASSIGN_OR_RETURN(auto producer, graph.Resolve(grad_ref));
      const Node* mm = producer.first;
      if (mm->kind != NodeKind::kOp || mm->type != "matmul" || mm->inputs.size() != 2 || !mm->mutable_inputs.empty() ||
          mm->attrs.GetBoolOr("fuse_bias", false) || mm->output_descs[0].shape.size() != 2 ||
          mm->output_descs[0].dtype != DType::kFloat32)
        continue;
      AF_ASSIGN_OR_RETURN(TensorDesc a, graph.Desc(mm->inputs[0]));
      AF_ASSIGN_OR_RETURN(TensorDesc b, graph.Desc(mm->inputs[1]));
      if (a.shape.size() != 2 || b.shape.size() != 2) continue;  // a batched operand sums over batches
      // The GEMM reads its operands while it writes the variable: neither may be the variable.
      if (mm->inputs[0] == var_ref || mm->inputs[1] == var_ref) continue;
      const size_t mm_index = static_cast<size_t>(mm - graph.nodes().data());
      if (!keep[mm_index]) continue;
      if (placed_ && (update.devices.size() != 1 || mm->devices != update.devices ||
                      update.input_sbp.size() != 3 || mm->input_sbp.size() != 2 || mm->output_sbp.size() != 1 ||
                      !AllBroadcast(update.input_sbp) || !AllBroadcast(mm->input_sbp) || !AllBroadcast(mm->output_sbp)))
        continue;

      Node fused = update;  // the update's name, place (after both operands) and placement
      fused.type = "matmul_sgd_update";
      fused.inputs = {var_ref, mm->inputs[0], mm->inputs[1], update.inputs[2]};
      fused.mutable_inputs = {0};
      fused.attrs.Set("transpose_a", mm->attrs.GetBoolOr("transpose_a", false));
      fused.attrs.Set("transpose_b", mm->attrs.GetBoolOr("transpose_b", false));
      fused.control_inputs.insert(fused.control_inputs.end(), mm->control_inputs.begin(), mm->control_inputs.end());
      if (placed_) fused.input_sbp = {update.input_sbp[0], mm->input_sbp[0], mm->input_sbp[1], update.input_sbp[2]};
      absorbed[mm->name] = fused.name;
      removed_refs.insert(grad_ref);
      keep[mm_index] = false;
      graph.mutable_nodes()[i] = std::move(fused);
    }
    if (absorbed.empty()) return Status::Ok();
    RedirectFusedReaders(graph, {}, absorbed);
    for (auto it = graph.gradients().begin(); it != graph.gradients().end();)
      it = removed_refs.count(it->second) ? graph.gradients().erase(it) : std::next(it);
    graph.Retain(keep);
    return Status::Ok();
  }

 private:
  bool placed_;
};

}  // namespace

std::unique_ptr<Pass> MakeGradientUpdateFusionPass(bool placed) {
  return std::make_unique<GradientUpdateFusionPass>(placed);
}

namespace {

// sgd_update(bias, bias_add_grad(dy), lr) with the bias gradient read by nothing else becomes
// bias_add_grad_sgd_update(bias, dy, lr) (kernels/matmul_update.cc): the column sums and the
// update in one actor. Single-device CPU train jobs (on several devices the gradient is a
// partial sum that boxing reduces before the update); a watched, clipped, returned gradient
// keeps the two ops, as in the weight-gradient fusion above.
class BiasGradientUpdateFusionPass : public Pass {
 public:
  std::string name() const override { return "bias gradient update fusion"; }

  Status Run(Graph& graph) override {
    if (!graph.is_train() || graph.total_device_num() > 1) return Status::Ok();
    // The gradients the updates read: the only refs asked about below.
    std::unordered_map<std::string, int> readers = CountReadersOf(graph, [](const Node& n) -> const std::string* {
      return n.kind == NodeKind::kOp && n.type == "sgd_update" && n.inputs.size() == 3 ? &n.inputs[1] : nullptr;
    });
    std::set<std::string> pinned = PinnedRefs(graph);
    for (const Watch& w : graph.watches()) {  // a watch_diff's gradient
      auto it = w.diff ? graph.gradients().find(w.ref) : graph.gradients().end();
      if (it != graph.gradients().end()) pinned.insert(it->second);
    }

    std::vector<bool> keep(graph.nodes().size(), true);
    std::map<std::string, std::string> absorbed;  // bias_add_grad name -> fused node name
    std::set<std::string> removed_refs;
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const Node& update = graph.nodes()[i];
      if (update.kind != NodeKind::kOp || update.type != "sgd_update" || update.inputs.size() != 3) continue;
      if (update.placement.device_type == "gpu" || update.placement.device_type == "cuda") continue;
      const std::string &var_ref = update.inputs[0], &grad_ref = update.inputs[1];
      if (readers[grad_ref] != 1 || pinned.count(grad_ref)) continue;
      AF_ASSIGN_OR_RETURN(auto producer, graph.Resolve(grad_ref));
      const Node* grad = producer.first;
      if (grad->kind != NodeKind::kOp || grad->type != "bias_add_grad" || grad->inputs.size() != 1 ||
          grad->output_descs[0].dtype != DType::kFloat32 || grad->output_descs[0].shape.size() != 1 ||
          grad->inputs[0] == var_ref)
        continue;
      const size_t grad_index = static_cast<size_t>(grad - graph.nodes().data());
      if (!keep[grad_index]) continue;
      Node fused = update;  // the update's name, place (after dy) and placement
      fused.type = "bias_add_grad_sgd_update";
      fused.inputs = {var_ref, grad->inputs[0], update.inputs[2]};
      fused.mutable_inputs = {0};
      fused.attrs.Set("axis", grad->attrs.GetIntOr("axis", 1));
      fused.control_inputs.insert(fused.control_inputs.end(), grad->control_inputs.begin(), grad->control_inputs.end());
      absorbed[grad->name] = fused.name;
      removed_refs.insert(grad_ref);
      keep[grad_index] = false;
      graph.mutable_nodes()[i] = std::move(fused);
    }
    if (absorbed.empty()) return Status::Ok();
    RedirectFusedReaders(graph, {}, absorbed);
    for (auto it = graph.gradients().begin(); it != graph.gradients().end();)
      it = removed_refs.count(it->second) ? graph.gradients().erase(it) : std::next(it);
    graph.Retain(keep);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Pass> MakeBiasGradientUpdateFusionPass() { return std::make_unique<BiasGradientUpdateFusionPass>(); }

const std::vector<std::string>& FusionNames() {
  static const std::vector<std::string> names = {"dense", "gradient_update", "conv_batch_norm", "conv_activation",
                                                 "channels_last", "gemm_chunks", "pool_relu_grad",
                                                 "matmul_relu_grad", "bias_gradient_update", "conv_bias_grad", "gemv",
                                                 "narrow_gemm", "packed_weights", "softmax_cross_entropy_grad", "blocked_layout",
                                                 "matmul_bias_grad"};
  return names;
}

}  // namespace graph
}  // namespace actorflow

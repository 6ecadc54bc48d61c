// Optimizer pass: learning-rate feed, clipping by global norm, one in-place update op per
// trained variable (op types and inputs from kernels/optimizer_ops.cc).
#include <cmath>

#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace {

// A variable of the session store holding optimizer state, created as zeros when missing.
std::string StateVariable(Graph& graph, const Node& var, const std::string& suffix) {
  std::string name = var.variable_name + "-" + suffix;
  if (const Node* existing = graph.FindVariable(name)) return existing->output_ref(0);
  Node node;
  node.name = graph.UniqueName(name);
  node.kind = NodeKind::kVariable;
  node.type = "variable";
  node.variable_name = name;
  node.trainable = false;
  node.zeros_if_missing = true;
  node.output_names = {"out"};
  node.output_descs = var.output_descs;
  node.location = var.location;
  node.placement = var.placement;
  // Laid out as the variable, so that a split variable's update runs on each device's shard
  // of the variable and of its state alike.
  node.output_sbp_hints = var.output_sbp_hints;
  return graph.Append(std::move(node)).output_ref(0);
}

// scale = clip_norm / max(global_norm, clip_norm), from primitive ops only:
// max(a, c) = (a + c + |a - c|) / 2 with |d| = sqrt(d^2).
StatusOr<std::string> ClipScale(Graph& graph, const std::vector<std::string>& grads, double clip_norm,
                                const std::string& location) {
  std::vector<std::string> sums;
  for (const auto& g : grads) {
    AF_ASSIGN_OR_RETURN(const Node* sq, graph.AddOp("square", "clip-square", {g}, {}, location));
    AF_ASSIGN_OR_RETURN(const Node* sum, graph.AddOp("reduce_sum", "clip-sum", {sq->output_ref(0)},
                                                     Attrs{{"axis", std::vector<int64_t>{}}, {"keepdims", false}}, location));
    AF_ASSIGN_OR_RETURN(const Node* r, graph.AddOp("reshape", "clip-sum", {sum->output_ref(0)},
                                                   Attrs{{"shape", std::vector<int64_t>{1}}}, location));
    sums.push_back(r->output_ref(0));
  }
  auto add = [&](const std::string& type, const std::vector<std::string>& in, const Attrs& attrs) -> StatusOr<std::string> {
    AF_ASSIGN_OR_RETURN(const Node* n, graph.AddOp(type, "clip-" + type, in, attrs, location));
    return n->output_ref(0);
  };
  AF_ASSIGN_OR_RETURN(std::string total, sums.size() == 1 ? StatusOr<std::string>(sums[0]) : add("add_n", sums, {}));
  AF_ASSIGN_OR_RETURN(std::string norm, add("sqrt", {total}, {}));
  AF_ASSIGN_OR_RETURN(std::string diff, add("scalar_add", {norm}, Attrs{{"scalar", -clip_norm}}));
  AF_ASSIGN_OR_RETURN(std::string sq, add("square", {diff}, {}));
  AF_ASSIGN_OR_RETURN(std::string abs, add("sqrt", {sq}, {}));
  AF_ASSIGN_OR_RETURN(std::string sum, add("add", {norm, abs}, {}));
  AF_ASSIGN_OR_RETURN(std::string twice_max, add("scalar_add", {sum}, Attrs{{"scalar", clip_norm}}));
  AF_ASSIGN_OR_RETURN(std::string numerator, add("constant", {}, Attrs{{"shape", std::vector<int64_t>{1}},
                                                                      {"value", 2.0 * clip_norm},
                                                                      {"dtype", std::string("float32")}}));
  return add("div", {numerator, twice_max}, {});
}

class OptimizerPass : public Pass {
 public:
  std::string name() const override { return "optimizer"; }

  Status Run(Graph& graph) override {
    if (!graph.is_train()) return Status::Ok();
    // The learning rate is fed per call (schedulers cost no recompilation); always the last feed.
    Node lr;
    lr.name = graph.UniqueName("learning_rate");
    lr.kind = NodeKind::kInput;
    lr.type = "input";
    lr.output_names = {"out"};
    // LAMB's bias corrections cannot be folded into the rate (its trust ratio normalises the
    // step): its feed is (3,) = [lr, 1 / (1 - beta1^t), 1 / (1 - beta2^t)].
    const OptimizerSpec* spec = graph.optimizer().get();
    const bool lamb = spec != nullptr && spec->type == "lamb";
    // So is Adam's when its spec asks for PyTorch's exact bias corrections.
    const bool exact_adam =
        spec != nullptr && (spec->type == "adam" || spec->type == "adamw") && spec->exact_bias_correction;
    lr.output_descs = {TensorDesc{{lamb || exact_adam ? 3 : 1}, DType::kFloat32}};
    std::string lr_ref = lr.output_ref(0);
    graph.feeds().push_back(lr.name);
    graph.Append(std::move(lr));
    if (!spec) return Status::Ok();

    std::vector<std::pair<std::string, std::string>> updates;  // (variable ref, gradient ref)
    for (const auto& [ref, grad] : graph.gradients()) {
      auto resolved = graph.Resolve(ref);
      if (resolved.ok() && resolved->first->kind == NodeKind::kVariable && !grad.empty()) updates.emplace_back(ref, grad);
    }
    if (updates.empty())
      return InvalidArgument("train job '" + graph.job_name() + "': no trainable variable receives a gradient from the loss");
    std::string location = graph.Resolve(graph.losses()[0]).value().first->location;
    // Gradients arrive summed over the loss's elements (its gradient starts as ones); the
    // update divides by their number, so a per-sample loss trains like its mean.
    AF_ASSIGN_OR_RETURN(TensorDesc loss_desc, graph.Desc(graph.losses()[0]));
    const double loss_elements = static_cast<double>(std::max<int64_t>(loss_desc.num_elements(), 1));

    if (spec->clip_norm > 0) {
      std::vector<std::string> grads;
      for (const auto& u : updates) grads.push_back(u.second);
      // The norm is of the summed gradients: clip at clip_norm times the element count.
      AF_ASSIGN_OR_RETURN(std::string scale, ClipScale(graph, grads, spec->clip_norm * loss_elements, location));
      for (auto& u : updates) {
        AF_ASSIGN_OR_RETURN(const Node* clipped, graph.AddOp("mul", "clip-scaled", {u.second, scale}, {}, location));
        u.second = clipped->output_ref(0);
      }
    }

    for (const auto& [var_ref, grad] : updates) {
      // The variable by position, read again after each node the loop appends (appending may
      // move the nodes): no copy of the whole node per update.
      const size_t at = static_cast<size_t>(graph.Resolve(var_ref).value().first - graph.nodes().data());
      auto state = [&](const std::string& suffix) { return StateVariable(graph, graph.nodes()[at], suffix); };
      std::string type;
      std::vector<std::string> inputs = {var_ref, grad};
      Attrs attrs{{"weight_decay", spec->weight_decay}, {"grad_scale", 1.0 / loss_elements}};
      if (spec->type == "sgd") {
        type = "sgd_update";
      } else if (spec->type == "momentum") {
        type = "momentum_update";
        inputs.push_back(state("momentum"));
        attrs.Set("beta", spec->momentum);
      } else if (spec->type == "adam" || spec->type == "adamw") {
        type = "adam_update";
        inputs.push_back(state("m"));
        inputs.push_back(state("v"));
        attrs.Set("beta1", spec->beta1);
        attrs.Set("beta2", spec->beta2);
        attrs.Set("epsilon", spec->epsilon);
        attrs.Set("decoupled_weight_decay", spec->type == "adamw");
      } else if (spec->type == "rmsprop") {
        type = "rmsprop_update";
        inputs.push_back(state("mean_square"));
        attrs.Set("decay_rate", spec->decay_rate);
        attrs.Set("epsilon", spec->epsilon);
      } else if (spec->type == "lamb") {
        type = "lamb_update";
        inputs.push_back(state("m"));
        inputs.push_back(state("v"));
        attrs.Set("beta1", spec->beta1);
        attrs.Set("beta2", spec->beta2);
        attrs.Set("epsilon", spec->epsilon);
      } else {
        return InvalidArgument("optimizer type '" + spec->type + "' is unknown");
      }
      inputs.push_back(lr_ref);
      const Node& var = graph.nodes()[at];  // AddOp copies its location and placement before appending
      AF_RETURN_IF_ERROR(graph.AddOp(type, var.name + "-update", inputs, attrs, var.location, var.placement).status());
    }
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Pass> MakeOptimizerPass() { return std::make_unique<OptimizerPass>(); }

}  // namespace graph
}  // namespace actorflow

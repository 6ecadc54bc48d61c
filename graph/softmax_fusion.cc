// "softmax_cross_entropy_grad": sparse_softmax_cross_entropy(labels, logits) whose prob output is
// read only by its gradient sparse_softmax_cross_entropy_grad(labels, prob, dloss) becomes one
// sparse_softmax_cross_entropy_with_grad(labels, logits, dloss) -> (loss, dlogits): one pass
// over the logits, prob never written out, one actor less on the train step's critical path
// (between the logits and the data gradient). Same floats as the two ops.
//
// The fused node keeps the forward op's name (its loss ref is unchanged) and takes the
// gradient's place, after dloss's producer; so nothing before that place may read the loss or
// be ordered after the forward op (a loss reduced before its seed, say), else the pair stays.
// CPU placements only (the CUDA kernels have no fused form); skipped where prob or dlogits is
// pinned (outputs, watches, losses, gradients).
#include <map>
#include <set>

#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace {

class SoftmaxCrossEntropyGradFusionPass : public Pass {
 public:
  std::string name() const override { return "softmax cross entropy grad fusion"; }

  Status Run(Graph& graph) override {
    // Counted at the first candidate (before anything is rewritten): most jobs have none.
    std::map<std::string, int> readers;
    std::set<std::string> pinned;
    bool counted = false;

    std::map<std::string, std::string> renamed, absorbed;
    std::vector<bool> keep(graph.nodes().size(), true);
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const Node& grad = graph.nodes()[i];
      if (grad.kind != NodeKind::kOp || grad.type != "sparse_softmax_cross_entropy_grad" || grad.inputs.size() != 3)
        continue;
      if (grad.placement.device_type == "gpu" || grad.placement.device_type == "cuda") continue;
      if (!counted) {
        readers = CountReaders(graph);
        pinned = PinnedRefs(graph);
        for (const auto& [variable, ref] : graph.gradients()) pinned.insert(ref);
        counted = true;
      }
      if (pinned.count(grad.output_ref(0))) continue;
      AF_ASSIGN_OR_RETURN(auto producer, graph.Resolve(grad.inputs[1]));
      const Node* forward = producer.first;
      if (forward->kind != NodeKind::kOp || forward->type != "sparse_softmax_cross_entropy" || producer.second != 1 ||
          forward->inputs.size() != 2 || forward->inputs[0] != grad.inputs[0] || readers[grad.inputs[1]] != 1 ||
          pinned.count(grad.inputs[1]) || forward->placement.ToString() != grad.placement.ToString())
        continue;
      const size_t forward_index = static_cast<size_t>(forward - graph.nodes().data());
      if (!keep[forward_index] || !ReadersAfter(graph, *forward, forward_index, i)) continue;
      Node fused = *forward;
      fused.type = "sparse_softmax_cross_entropy_with_grad";
      fused.inputs.push_back(grad.inputs[2]);
      fused.output_names = {forward->output_names[0], "dlogits"};
      fused.output_descs = {forward->output_descs[0], grad.output_descs[0]};
      if (!forward->output_sbp_hints.empty())
        fused.output_sbp_hints = {forward->output_sbp_hints[0],
                                  grad.output_sbp_hints.empty() ? std::nullopt : grad.output_sbp_hints[0]};
      fused.control_inputs.insert(fused.control_inputs.end(), grad.control_inputs.begin(), grad.control_inputs.end());
      renamed[grad.output_ref(0)] = fused.output_ref(1);
      absorbed[grad.name] = fused.name;
      keep[forward_index] = false;
      graph.mutable_nodes()[i] = std::move(fused);
    }
    if (renamed.empty()) return Status::Ok();
    RedirectFusedReaders(graph, renamed, absorbed);
    RenameJobRefs(graph, renamed);
    graph.Retain(keep);
    return Status::Ok();
  }

 private:
  // Whether every node that reads `forward`'s outputs or is ordered after it comes after
  // `place` (the gradient's index), where the fused node will stand.
  static bool ReadersAfter(const Graph& graph, const Node& forward, size_t forward_index, size_t place) {
    for (size_t j = forward_index + 1; j < place; ++j) {
      const Node& node = graph.nodes()[j];
      for (const std::string& ref : node.inputs)
        for (size_t o = 0; o < forward.output_names.size(); ++o)
          if (ref == forward.output_ref(o)) return false;
      for (const std::string& control : node.control_inputs)
        if (control == forward.name) return false;
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> MakeSoftmaxCrossEntropyGradFusionPass() {
  return std::make_unique<SoftmaxCrossEntropyGradFusionPass>();
}

}  // namespace graph
}  // namespace actorflow

// Fusion: a matmul whose only reader is a bias_add on its last axis (a dense layer) becomes one
// matmul with a bias epilogue (and the bias_add's fused relu): one actor and one pass over the
// output less per layer. Runs after autodiff, so gradient rules only ever see unfused ops.
#include <map>
#include <set>

#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace {

class FusionPass : public Pass {
 public:
  std::string name() const override { return "fusion"; }

  Status Run(Graph& graph) override {
    // Who reads each ref, and which refs must stay (job outputs, watches, losses).
    std::map<std::string, int> readers;
    for (const Node& n : graph.nodes())
      for (const std::string& ref : n.inputs) ++readers[ref];
    std::set<std::string> pinned(graph.outputs().begin(), graph.outputs().end());
    for (const Watch& w : graph.watches())
      if (!w.diff) pinned.insert(w.ref);
    pinned.insert(graph.losses().begin(), graph.losses().end());

    std::map<std::string, std::string> renamed;  // bias_add output ref -> fused matmul output ref
    std::map<std::string, std::string> absorbed;  // bias_add name -> fused matmul name
    std::vector<bool> keep(graph.nodes().size(), true);
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const Node& add = graph.nodes()[i];
      if (add.kind != NodeKind::kOp || add.type != "bias_add" || add.inputs.size() != 2) continue;
      const TensorDesc& out = add.output_descs[0];
      if (out.shape.size() != 2 || out.dtype != DType::kFloat32) continue;
      const int64_t axis = add.attrs.GetIntOr("axis", 1);
      if (axis != 1 && axis != -1) continue;
      AF_ASSIGN_OR_RETURN(auto producer, graph.Resolve(add.inputs[0]));
      const Node* mm = producer.first;
      if (mm->kind != NodeKind::kOp || mm->type != "matmul" || mm->inputs.size() != 2 ||
          mm->output_descs[0].shape.size() != 2 || readers[add.inputs[0]] != 1 || pinned.count(add.inputs[0]) ||
          !mm->mutable_inputs.empty() || mm->placement.ToString() != add.placement.ToString())
        continue;
      // The fused node takes the bias_add's place: after the bias (which may be created after
      // the matmul) and before every reader, so node order stays topological.
      const size_t mm_index = static_cast<size_t>(mm - graph.nodes().data());
      if (!keep[mm_index]) continue;
      Node fused = *mm;
      fused.inputs.push_back(add.inputs[1]);
      fused.attrs.Set("fuse_bias", true);
      if (add.attrs.GetBoolOr("fuse_relu", false)) fused.attrs.Set("fuse_relu", true);
      fused.control_inputs.insert(fused.control_inputs.end(), add.control_inputs.begin(), add.control_inputs.end());
      // Whatever was ordered after the matmul is now ordered after matmul + bias: stronger.
      renamed[add.output_ref(0)] = fused.output_ref(0);
      absorbed[add.name] = fused.name;
      graph.mutable_nodes()[i] = std::move(fused);
      keep[mm_index] = false;
    }
    if (renamed.empty()) return Status::Ok();
    auto rename = [&](std::string& ref) {
      auto it = renamed.find(ref);
      if (it != renamed.end()) ref = it->second;
    };
    for (Node& n : graph.mutable_nodes()) {
      for (std::string& ref : n.inputs) rename(ref);
      for (std::string& c : n.control_inputs) {
        auto it = absorbed.find(c);
        if (it != absorbed.end()) c = it->second;
      }
    }
    for (std::string& ref : graph.outputs()) rename(ref);
    for (Watch& w : graph.watches())
      if (!w.diff) rename(w.ref);  // a diff watch names a forward ref only to find its gradient
    for (std::string& ref : graph.losses()) rename(ref);
    for (auto& [variable, ref] : graph.gradients()) rename(ref);
    graph.Retain(keep);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFusionPass() { return std::make_unique<FusionPass>(); }

}  // namespace graph
}  // namespace actorflow

// Fusion: a matmul whose only reader is a bias_add on its last axis (a dense layer) becomes one
// matmul with a bias epilogue (and the bias_add's fused relu): one actor and one pass over the
// output less per layer. Runs after autodiff, so gradient rules only ever see unfused ops.
//
// One exception keeps the relu apart: on several devices, a matmul operand the user hinted split
// on its contraction axis (a dense weight stored (units, in) with model_distribute=split(1))
// makes the matmul compute partial sums, and relu of a partial sum is not the relu of the sum.
// matmul + bias is linear, so it still fuses (the bias becomes a partial sum too); the relu
// stays its own op, under the bias_add's name, so its output ref and the backward's readers of
// it are unchanged, and the SBP pass reduces the partial sums before it. Fusing the relu there
// would force the SBP pass to gather the hinted weight instead.
#include <functional>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>

#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace {

// Whether `matmul`'s operands carry a user hint that splits the contraction axis (on more than
// one device every such hint makes the product a partial sum).
StatusOr<bool> HintSplitsContraction(const Graph& graph, const Node& matmul) {
  if (graph.total_device_num() <= 1) return false;
  auto devices = ResolvePlacement(matmul.placement, graph.device_num(), graph.gpu_device_num(), graph.machine_num());
  if (devices.ok() && devices->size() <= 1) return false;  // a bad placement is the placement pass's error
  const bool transpose[2] = {matmul.attrs.GetBoolOr("transpose_a", false), matmul.attrs.GetBoolOr("transpose_b", false)};
  for (int operand = 0; operand < 2; ++operand) {
    AF_ASSIGN_OR_RETURN(auto producer, graph.Resolve(matmul.inputs[operand]));
    const Node& node = *producer.first;
    const size_t output = static_cast<size_t>(producer.second);
    if (output >= node.output_sbp_hints.size() || !node.output_sbp_hints[output]) continue;
    const Sbp& hint = *node.output_sbp_hints[output];
    if (hint.kind == SbpKind::kPartialSum) return true;
    if (hint.kind != SbpKind::kSplit) continue;
    const int64_t rank = static_cast<int64_t>(node.output_descs[output].shape.size());
    // op(a) is (M, K): K is a's last axis, or the one before when transposed; op(b) is (K, N).
    const int64_t contraction = operand == 0 ? (transpose[0] ? rank - 2 : rank - 1) : (transpose[1] ? rank - 1 : rank - 2);
    if ((hint.axis < 0 ? hint.axis + rank : hint.axis) == contraction) return true;
  }
  return false;
}

class FusionPass : public Pass {
 public:
  std::string name() const override { return "fusion"; }

  Status Run(Graph& graph) override {
    // Who reads each matmul product a bias_add adds to, and which refs must stay (job
    // outputs, watches, losses).
    std::unordered_map<std::string, int> readers = CountReadersOf(graph, [](const Node& n) -> const std::string* {
      return n.kind == NodeKind::kOp && n.type == "bias_add" && n.inputs.size() == 2 ? &n.inputs[0] : nullptr;
    });
    std::set<std::string> pinned(graph.outputs().begin(), graph.outputs().end());
    for (const Watch& w : graph.watches())
      if (!w.diff) pinned.insert(w.ref);
    pinned.insert(graph.losses().begin(), graph.losses().end());

    std::map<std::string, std::string> renamed;  // bias_add output ref -> fused matmul output ref
    std::map<std::string, std::string> absorbed;  // bias_add name -> fused matmul name
    std::vector<bool> keep(graph.nodes().size(), true);
    std::map<size_t, Node> relu_after;  // node index -> the relu that follows the fused node there
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
      fused.control_inputs.insert(fused.control_inputs.end(), add.control_inputs.begin(), add.control_inputs.end());
      if (add.attrs.GetBoolOr("fuse_relu", false)) {
        AF_ASSIGN_OR_RETURN(bool partial, HintSplitsContraction(graph, *mm));
        if (partial) {
          Node relu;
          relu.name = add.name;  // its output is the bias_add's output ref: nothing to rename
          relu.type = "relu";
          relu.inputs = {fused.output_ref(0)};
          relu.output_names = add.output_names;
          relu.output_descs = add.output_descs;
          relu.location = add.location;
          relu.placement = add.placement;
          relu.output_sbp_hints = add.output_sbp_hints;
          relu_after[i] = std::move(relu);
          graph.mutable_nodes()[i] = std::move(fused);
          keep[mm_index] = false;
          continue;
        }
        fused.attrs.Set("fuse_relu", true);
      }
      // Whatever was ordered after the matmul is now ordered after matmul + bias: stronger.
      renamed[add.output_ref(0)] = fused.output_ref(0);
      absorbed[add.name] = fused.name;
      graph.mutable_nodes()[i] = std::move(fused);
      keep[mm_index] = false;
    }
    if (!relu_after.empty()) {
      std::vector<Node> nodes;
      std::vector<bool> kept;
      for (size_t i = 0; i < graph.nodes().size(); ++i) {
        nodes.push_back(std::move(graph.mutable_nodes()[i]));
        kept.push_back(keep[i]);
        auto relu = relu_after.find(i);
        if (relu == relu_after.end()) continue;
        nodes.push_back(std::move(relu->second));
        kept.push_back(true);
      }
      graph.mutable_nodes() = std::move(nodes);
      keep = std::move(kept);
    }
    if (renamed.empty()) {
      if (!relu_after.empty()) graph.Retain(keep);
      return Status::Ok();
    }
    RedirectFusedReaders(graph, renamed, absorbed);
    RenameJobRefs(graph, renamed);
    graph.Retain(keep);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Pass> MakeFusionPass() { return std::make_unique<FusionPass>(); }

void RedirectFusedReaders(Graph& graph, const std::map<std::string, std::string>& renamed,
                          const std::map<std::string, std::string>& absorbed) {
  // Every input of every node is looked up: flat tables of the two maps, not tree searches.
  struct Hashed {
    NameIndex index;
    std::vector<const std::string*> to;
    explicit Hashed(const std::map<std::string, std::string>& map) {
      index.Reserve(map.size());
      for (const auto& [from, target] : map)
        if (index.Insert(from, to.size())) to.push_back(&target);
    }
    const std::string* Find(std::string_view from) const {
      const size_t at = index.Find(from);
      return at == NameIndex::kNone ? nullptr : to[at];
    }
  };
  const Hashed renamed_to(renamed), absorbed_into(absorbed);
  for (Node& n : graph.mutable_nodes()) {
    if (!renamed.empty())
      for (std::string& ref : n.inputs)
        if (const std::string* to = renamed_to.Find(ref)) ref = *to;
    if (!absorbed.empty())
      for (std::string& c : n.control_inputs)
        if (const std::string* into = absorbed_into.Find(c); into != nullptr && *into != n.name) c = *into;
  }
}

std::map<std::string, int> CountReaders(const Graph& graph) {
  std::map<std::string, int> readers;
  for (const Node& n : graph.nodes())
    for (const std::string& ref : n.inputs) ++readers[ref];
  return readers;
}

std::unordered_map<std::string, int> CountReadersOf(const Graph& graph,
                                                    const std::function<const std::string*(const Node&)>& asked) {
  // Counted through a flat table (every input of every node is looked up), handed out hashed.
  NameIndex index;
  std::vector<int> counts;
  for (const Node& n : graph.nodes())
    if (const std::string* ref = asked(n))
      if (index.Insert(*ref, counts.size())) counts.push_back(0);
  std::unordered_map<std::string, int> readers;
  if (counts.empty()) return readers;
  for (const Node& n : graph.nodes())
    for (const std::string& ref : n.inputs)
      if (const size_t at = index.Find(ref); at != NameIndex::kNone) ++counts[at];
  readers.reserve(counts.size());
  index.RetainIf([&](std::string_view ref, size_t& at) {
    readers.emplace(std::string(ref), counts[at]);
    return true;
  });
  return readers;
}

std::unordered_map<std::string, int> CountReadersHashed(const Graph& graph) {
  std::unordered_map<std::string, int> readers;
  readers.reserve(graph.nodes().size() * 2);
  for (const Node& n : graph.nodes())
    for (const std::string& ref : n.inputs) ++readers[ref];
  return readers;
}

std::set<std::string> PinnedRefs(const Graph& graph) {
  std::set<std::string> pinned(graph.outputs().begin(), graph.outputs().end());
  pinned.insert(graph.losses().begin(), graph.losses().end());
  for (const Watch& w : graph.watches()) pinned.insert(w.ref);
  return pinned;
}

void RenameJobRefs(Graph& graph, const std::map<std::string, std::string>& renamed) {
  auto rename = [&](std::string& ref) {
    auto it = renamed.find(ref);
    if (it != renamed.end()) ref = it->second;
  };
  for (std::string& ref : graph.outputs()) rename(ref);
  for (Watch& w : graph.watches())
    if (!w.diff) rename(w.ref);
  for (std::string& ref : graph.losses()) rename(ref);
  for (auto& [variable, ref] : graph.gradients()) rename(ref);
}


namespace {

// relu_grad(y, max_pool2d_grad(x = y, ...)): the pooling's input is the relu's output (relu then
// max pooling, or a convolution with a fused relu then pooling), so the relu's backward masks
// the pooling's routed gradient. The pooling gradient does it as it routes (attr relu_mask):
// one pass over the largest tensor of the layer and one actor less. The fused node keeps the
// pooling gradient's name and output and takes the relu_grad's place; the relu_grad's readers
// read it instead. Skipped where the pooling gradient has another reader or is pinned.
class PoolReluGradFusionPass : public Pass {
 public:
  std::string name() const override { return "pool relu_grad fusion"; }

  Status Run(Graph& graph) override {
    // Counted at the first pooling gradient met (before anything is rewritten): most jobs have none.
    std::unordered_map<std::string, int> readers;
    std::set<std::string> pinned;
    bool counted = false;

    std::map<std::string, std::string> renamed, absorbed;
    std::vector<bool> keep(graph.nodes().size(), true);
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const Node& relu_grad = graph.nodes()[i];
      if (relu_grad.kind != NodeKind::kOp || relu_grad.type != "relu_grad" || relu_grad.inputs.size() != 2) continue;
      AF_ASSIGN_OR_RETURN(auto producer, graph.Resolve(relu_grad.inputs[1]));
      const Node* pool = producer.first;
      if (pool->kind != NodeKind::kOp || pool->type != "max_pool2d_grad") continue;
      if (!counted) {
        readers = CountReadersOf(graph, [](const Node& n) -> const std::string* {
          return n.kind == NodeKind::kOp && n.type == "relu_grad" && n.inputs.size() == 2 ? &n.inputs[1] : nullptr;
        });
        pinned = PinnedRefs(graph);
        for (const auto& [variable, ref] : graph.gradients()) pinned.insert(ref);
        counted = true;
      }
      if (pinned.count(relu_grad.output_ref(0))) continue;
      if (pool->inputs.size() != 3 ||
          pool->inputs[0] != relu_grad.inputs[0] || pool->attrs.GetBoolOr("relu_mask", false) ||
          readers[relu_grad.inputs[1]] != 1 || pinned.count(relu_grad.inputs[1]) ||
          pool->placement.ToString() != relu_grad.placement.ToString())
        continue;
      const size_t pool_index = static_cast<size_t>(pool - graph.nodes().data());
      if (!keep[pool_index]) continue;
      Node fused = *pool;
      fused.attrs.Set("relu_mask", true);
      fused.control_inputs.insert(fused.control_inputs.end(), relu_grad.control_inputs.begin(),
                                  relu_grad.control_inputs.end());
      renamed[relu_grad.output_ref(0)] = fused.output_ref(0);
      absorbed[relu_grad.name] = fused.name;
      keep[pool_index] = false;
      graph.mutable_nodes()[i] = std::move(fused);
    }
    if (renamed.empty()) return Status::Ok();
    RedirectFusedReaders(graph, renamed, absorbed);
    graph.Retain(keep);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Pass> MakePoolReluGradFusionPass() { return std::make_unique<PoolReluGradFusionPass>(); }

}  // namespace graph
}  // namespace actorflow

namespace actorflow {
namespace graph {
namespace {

// relu_grad(y, matmul(...)) with the matmul read by nothing else: the gradient flowing into a
// relu through a dense layer's data gradient (dY · Wᵀ). The matmul masks each block of its
// product while it is in cache (attr fuse_relu_grad, third input y): one pass over the layer's
// largest gradient and one actor less. The fused node keeps the matmul's name and output and
// takes the relu_grad's place (after y's producer); the relu_grad's readers read it instead.
// CPU placements only (the CUDA matmul has no such epilogue); skipped where the product or the
// relu_grad's output is pinned (outputs, watches, losses, gradients of watch_diff).
class MatmulReluGradFusionPass : public Pass {
 public:
  std::string name() const override { return "matmul relu_grad fusion"; }

  Status Run(Graph& graph) override {
    std::unordered_map<std::string, int> readers = CountReadersOf(graph, [](const Node& n) -> const std::string* {
      return n.kind == NodeKind::kOp && n.type == "relu_grad" && n.inputs.size() == 2 ? &n.inputs[1] : nullptr;
    });
    std::set<std::string> pinned = PinnedRefs(graph);
    for (const auto& [variable, ref] : graph.gradients()) pinned.insert(ref);

    std::map<std::string, std::string> renamed, absorbed;
    std::vector<bool> keep(graph.nodes().size(), true);
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const Node& relu_grad = graph.nodes()[i];
      if (relu_grad.kind != NodeKind::kOp || relu_grad.type != "relu_grad" || relu_grad.inputs.size() != 2) continue;
      if (pinned.count(relu_grad.output_ref(0))) continue;
      if (relu_grad.placement.device_type == "gpu" || relu_grad.placement.device_type == "cuda") continue;
      AF_ASSIGN_OR_RETURN(auto producer, graph.Resolve(relu_grad.inputs[1]));
      const Node* mm = producer.first;
      if (mm->kind != NodeKind::kOp || mm->type != "matmul" || mm->inputs.size() != 2 || !mm->mutable_inputs.empty() ||
          mm->attrs.GetBoolOr("fuse_bias", false) || mm->attrs.GetBoolOr("fuse_relu_grad", false) ||
          readers[relu_grad.inputs[1]] != 1 || pinned.count(relu_grad.inputs[1]) ||
          mm->output_descs[0].dtype != DType::kFloat32 || relu_grad.output_descs[0] != mm->output_descs[0] ||
          mm->placement.ToString() != relu_grad.placement.ToString())
        continue;
      const size_t mm_index = static_cast<size_t>(mm - graph.nodes().data());
      if (!keep[mm_index]) continue;
      Node fused = *mm;
      fused.inputs.push_back(relu_grad.inputs[0]);
      fused.attrs.Set("fuse_relu_grad", true);
      fused.control_inputs.insert(fused.control_inputs.end(), relu_grad.control_inputs.begin(),
                                  relu_grad.control_inputs.end());
      renamed[relu_grad.output_ref(0)] = fused.output_ref(0);
      absorbed[relu_grad.name] = fused.name;
      keep[mm_index] = false;
      graph.mutable_nodes()[i] = std::move(fused);
    }
    if (renamed.empty()) return Status::Ok();
    RedirectFusedReaders(graph, renamed, absorbed);
    graph.Retain(keep);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Pass> MakeMatmulReluGradFusionPass() { return std::make_unique<MatmulReluGradFusionPass>(); }

}  // namespace graph
}  // namespace actorflow

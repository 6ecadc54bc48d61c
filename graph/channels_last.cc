// Channels-last layout: a region of convolutions (and the per-element and per-channel ops between
// them) runs on (N,H,W,C) tensors instead of (N,C,H,W). oneDNN's NCHW convolutions compute in
// a blocked layout and reorder every input and output in and out of it, two extra passes over
// each activation per convolution; its channels-last kernels read and write the plain NHWC
// registers directly. The region converts once where it starts and once where it ends
// (transpose ops, or a reshape where the permutation only moves axes of size 1).
//
// Members of a region: float32 4-D conv2d on the CPU (data_format NCHW -> NHWC), and ops whose
// 4-D input producers are all members: elementwise unary ops and clamp (layout-free), add/sub/
// mul/div of same-shape 4-D operands, bias_add and inference batch_normalization on the channel
// axis (axis 1 -> 3), reduce_sum/reduce_mean with keepdims (axes renumbered). A connected region
// converts only when its conversions (distinct tensors crossing its border, a view counted as
// none) are fewer than its convolutions: a lone conv between pools stays NCHW, where its own
// reorders cost what the conversions would (LeNet's first conv, whose 1-channel input is
// already NHWC, took ~7% more CPU converted). Predict jobs on one device only: backward ops and
// SBP signatures are written for NCHW.
#include <map>
#include <numeric>
#include <set>

#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace {

const std::vector<int64_t> kToLast = {0, 2, 3, 1}, kToFirst = {0, 3, 1, 2};
// NCHW axis -> its NHWC position.
int64_t LastAxis(int64_t axis) { return axis == 0 ? 0 : axis == 1 ? 3 : axis - 1; }

bool IsLayoutFreeUnary(const std::string& type) {
  static const std::set<std::string> types = {"relu", "sigmoid", "tanh", "gelu", "exp", "log", "sqrt", "square", "negative",
                                              "clamp", "identity"};
  return types.count(type) > 0;
}
bool IsSameShapeBinary(const std::string& type) { return type == "add" || type == "sub" || type == "mul" || type == "div"; }

// Whether permuting `shape` by `perm` keeps the bytes in place: the axes longer than 1 keep
// their relative order.
bool PermutationIsView(const Shape& shape, const std::vector<int64_t>& perm) {
  int64_t last = -1;
  for (int64_t axis : perm) {
    if (shape[axis] == 1) continue;
    if (axis < last) return false;
    last = axis;
  }
  return true;
}

Shape Permuted(const Shape& shape, const std::vector<int64_t>& perm) {
  Shape out(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) out[d] = shape[perm[d]];
  return out;
}

class ChannelsLastPass : public Pass {
 public:
  std::string name() const override { return "channels last"; }

  Status Run(Graph& graph) override {
    if (graph.is_train() || graph.total_device_num() > 1) return Status::Ok();
    const std::vector<Node>& nodes = graph.nodes();
    const size_t count = nodes.size();
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < count; ++i) index[nodes[i].name] = i;
    auto producer_of = [&](const std::string& ref) -> int64_t {
      auto split = SplitRef(ref);
      if (!split.ok()) return -1;
      auto it = index.find(split->first);
      return it == index.end() ? -1 : static_cast<int64_t>(it->second);
    };

    // 1. Candidates, in topological order: output 0 of each candidate is channels-last.
    std::vector<bool> member(count, false);
    for (size_t i = 0; i < count; ++i) member[i] = Candidate(nodes[i], [&](const std::string& ref) {
      const int64_t p = producer_of(ref);
      return p >= 0 && member[p] && SplitRef(ref)->second == nodes[p].output_names[0];
    });

    // 2. Connected regions (union-find over member -> member edges) and their cost.
    std::vector<size_t> root(count);
    std::iota(root.begin(), root.end(), 0);
    std::function<size_t(size_t)> find = [&](size_t i) { return root[i] == i ? i : root[i] = find(root[i]); };
    for (size_t i = 0; i < count; ++i)
      if (member[i])
        for (size_t k : ActivationInputs(nodes[i])) {
          const int64_t p = producer_of(nodes[i].inputs[k]);
          if (p >= 0 && member[p]) root[find(i)] = find(static_cast<size_t>(p));
        }
    std::set<std::string> pinned(graph.outputs().begin(), graph.outputs().end());
    for (const Watch& w : graph.watches()) pinned.insert(w.ref);
    std::map<size_t, int64_t> convs, conversions;
    std::set<std::string> entries, exits;  // refs converted into / out of a region
    for (size_t i = 0; i < count; ++i) {
      if (member[i] && nodes[i].type == "conv2d") ++convs[find(i)];
      for (size_t k = 0; k < nodes[i].inputs.size(); ++k) {
        const std::string& ref = nodes[i].inputs[k];
        const int64_t p = producer_of(ref);
        const bool activation = member[i] && IsActivationInput(nodes[i], k);
        const bool from_member = p >= 0 && member[p] && SplitRef(ref)->second == nodes[p].output_names[0];
        if (activation && !from_member && entries.insert(ref).second) {
          AF_ASSIGN_OR_RETURN(TensorDesc desc, graph.Desc(ref));
          conversions[find(i)] += PermutationIsView(desc.shape, kToLast) ? 0 : 1;
        }
        if (!activation && from_member && exits.insert(ref).second)
          conversions[find(static_cast<size_t>(p))] += ExitCost(nodes[p]);
      }
    }
    for (const std::string& ref : pinned) {
      const int64_t p = producer_of(ref);
      if (p >= 0 && member[p] && SplitRef(ref)->second == nodes[p].output_names[0] && exits.insert(ref).second)
        conversions[find(static_cast<size_t>(p))] += ExitCost(nodes[p]);
    }
    bool any = false;
    for (size_t i = 0; i < count; ++i) {
      if (!member[i]) continue;
      const size_t r = find(i);
      member[i] = convs[r] > 0 && conversions[r] < convs[r];
      any |= member[i];
    }
    if (!any) return Status::Ok();
    return Rewrite(graph, member, pinned);
  }

 private:
  // Input slots that carry the 4-D activation (the rest: filters, biases, statistics).
  static std::vector<size_t> ActivationInputs(const Node& node) {
    if (IsSameShapeBinary(node.type)) return {0, 1};
    return {0};
  }
  static bool IsActivationInput(const Node& node, size_t k) {
    for (size_t a : ActivationInputs(node))
      if (a == k) return true;
    return false;
  }
  static int64_t ExitCost(const Node& producer) {
    return PermutationIsView(Permuted(producer.output_descs[0].shape, kToLast), kToFirst) ? 0 : 1;
  }

  template <typename IsMemberRef>
  static bool Candidate(const Node& node, IsMemberRef is_member_ref) {
    if (node.kind != NodeKind::kOp || node.output_descs.empty() || !node.mutable_inputs.empty()) return false;
    if (node.placement.device_type != "cpu" && !node.placement.device_type.empty()) return false;
    const TensorDesc& out = node.output_descs[0];
    if (out.shape.size() != 4 || out.dtype != DType::kFloat32) return false;
    if (node.type == "conv2d") {
      const std::string format = node.attrs.GetStringOr("data_format", "NCHW");
      return format == "NCHW" || format == "channels_first";
    }
    if (node.inputs.empty() || !is_member_ref(node.inputs[0])) return false;
    if (IsLayoutFreeUnary(node.type)) return node.inputs.size() == 1;
    if (IsSameShapeBinary(node.type)) return node.inputs.size() == 2 && is_member_ref(node.inputs[1]);
    const int64_t axis = node.attrs.GetIntOr("axis", 1);
    if (node.type == "bias_add") return axis == 1 || axis == -3;
    if (node.type == "batch_normalization") return (axis == 1 || axis == -3) && !node.attrs.GetBoolOr("training", false);
    if (node.type == "reduce_sum" || node.type == "reduce_mean") {
      if (!node.attrs.GetBoolOr("keepdims", false)) return false;
      auto axes = node.attrs.GetInts("axis");
      return axes.ok() && !axes->empty();
    }
    return false;
  }

  // Converts the members: NHWC shapes and attributes, a conversion into the region before the
  // first member reading each outside tensor, and one out of it after each member whose output
  // is read outside (or returned, or watched).
  static Status Rewrite(Graph& graph, const std::vector<bool>& member, const std::set<std::string>& pinned) {
    // What the loop below needs of every node, taken before the nodes move.
    std::map<std::string, size_t> index;
    std::map<std::string, TensorDesc> descs;  // every output ref
    std::vector<std::string> first_output(graph.nodes().size());
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const Node& n = graph.nodes()[i];
      index[n.name] = i;
      for (size_t k = 0; k < n.output_names.size(); ++k) descs[n.output_ref(k)] = n.output_descs[k];
      if (!n.output_names.empty()) first_output[i] = n.output_ref(0);
    }
    auto is_member_ref = [&](const std::string& ref) {
      auto split = SplitRef(ref);
      auto it = split.ok() ? index.find(split->first) : index.end();
      return it != index.end() && member[it->second] && ref == first_output[it->second];
    };
    // Member outputs read in NCHW: by other ops, in a member's non-activation slot, or returned.
    std::set<std::string> exits;
    for (const Node& n : graph.nodes()) {
      const bool is_member = member[index[n.name]];
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (is_member_ref(n.inputs[k]) && !(is_member && IsActivationInput(n, k))) exits.insert(n.inputs[k]);
    }
    for (const std::string& ref : pinned)
      if (is_member_ref(ref)) exits.insert(ref);

    std::set<std::string> taken;
    for (const Node& n : graph.nodes()) taken.insert(n.name);
    auto unique = [&](const std::string& base) {
      std::string name = base;
      for (int k = 1; taken.count(name); ++k) name = base + "_" + std::to_string(k);
      taken.insert(name);
      return name;
    };
    auto conversion = [&](const std::string& ref, const TensorDesc& from, const std::vector<int64_t>& perm, const Node& near) {
      Node node;
      node.name = unique(SplitRef(ref)->first + (perm == kToLast ? "-to-nhwc" : "-to-nchw"));
      node.output_names = {"out"};
      node.output_descs = {TensorDesc{Permuted(from.shape, perm), from.dtype}};
      if (PermutationIsView(from.shape, perm)) {
        node.type = "reshape";
        node.attrs.Set("shape", std::vector<int64_t>(node.output_descs[0].shape.begin(), node.output_descs[0].shape.end()));
      } else {
        node.type = "transpose";
        node.attrs.Set("perm", perm);
      }
      node.inputs = {ref};
      node.location = near.location;
      node.placement = near.placement;
      return node;
    };

    std::vector<Node> nodes = std::move(graph.mutable_nodes());
    std::map<std::string, std::string> to_last, to_first;  // ref -> its converted ref
    std::vector<Node> out;
    out.reserve(nodes.size() + exits.size() + 4);
    for (size_t i = 0; i < nodes.size(); ++i) {
      Node node = std::move(nodes[i]);
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        std::string& ref = node.inputs[k];
        if (member[i] && IsActivationInput(node, k)) {
          if (is_member_ref(ref)) continue;
          auto it = to_last.find(ref);
          if (it == to_last.end()) {
            auto desc = descs.find(ref);
            if (desc == descs.end()) return Internal("channels last: no description of " + ref);
            Node converted = conversion(ref, desc->second, kToLast, node);
            it = to_last.emplace(ref, converted.output_ref(0)).first;
            out.push_back(std::move(converted));
          }
          ref = it->second;
        } else {
          auto it = to_first.find(ref);
          if (it != to_first.end()) ref = it->second;
        }
      }
      if (member[i]) AF_RETURN_IF_ERROR(ToChannelsLast(node));
      out.push_back(std::move(node));
      if (!member[i] || !exits.count(out.back().output_ref(0))) continue;
      Node back = conversion(out.back().output_ref(0), out.back().output_descs[0], kToFirst, out.back());
      to_first[out[out.size() - 1].output_ref(0)] = back.output_ref(0);
      out.push_back(std::move(back));
    }
    graph.mutable_nodes() = std::move(out);
    graph.Retain(std::vector<bool>(graph.nodes().size(), true));  // rebuilds the name index
    auto rename = [&](std::string& ref) {
      auto it = to_first.find(ref);
      if (it != to_first.end()) ref = it->second;
    };
    for (std::string& ref : graph.outputs()) rename(ref);
    for (Watch& w : graph.watches()) rename(w.ref);
    return Status::Ok();
  }

  static Status ToChannelsLast(Node& node) {
    TensorDesc& out = node.output_descs[0];
    out.shape = Permuted(out.shape, kToLast);
    if (node.type == "conv2d") node.attrs.Set("data_format", std::string("NHWC"));
    if (node.type == "bias_add" || node.type == "batch_normalization") node.attrs.Set("axis", int64_t{3});
    if (node.type == "reduce_sum" || node.type == "reduce_mean") {
      AF_ASSIGN_OR_RETURN(std::vector<int64_t> axes, node.attrs.GetInts("axis"));
      for (int64_t& axis : axes) axis = LastAxis(axis < 0 ? axis + 4 : axis);
      node.attrs.Set("axis", axes);
    }
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Pass> MakeChannelsLastPass() { return std::make_unique<ChannelsLastPass>(); }

}  // namespace graph
}  // namespace actorflow

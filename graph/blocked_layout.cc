// Blocked layout ("blocked_layout", CPU jobs of one machine): oneDNN's convolutions compute in
// the blocked channel layout nChw{B}c (kernels/blocked_layout.h) and, between plain NCHW
// registers, reorder every activation in and out of it: in a LeNet train step that is about ten
// passes over tensors of up to 10 MB. This pass stores a tensor blocked where the op writing it
// and every op reading it work on that layout natively, so a chain of convolutions, pools and
// relus (forward and backward) keeps its tensors blocked and only its edges see plain ones (a
// pool writing its plain output from a blocked input converts for free). No conversion op is
// ever added: a tensor some reader needs plain stays plain, so no plan is slower for it.
//
// What each op can do (slots: inputs 0.., outputs 100..; "a -> b": a blocked needs b blocked):
//   conv2d x, out; conv2d_grad_data dy, dx (like: unread); conv2d_grad_filter dy, x (like:
//   unread); max_pool2d / avg_pool2d x, out (out -> x); max_pool2d_grad x, y, dy, dx
//   (x <-> dx, y -> x, dy -> dx); avg_pool2d_grad dy, dx (dy -> dx; x: unread);
//   layout-free elementwise ops (relu, relu_grad, add of same-shape operands, ...): all their
//   tensors or none.
// A tensor is blocked when it is float32 (N,C,H,W) with C a multiple of this CPU's block, is not
// returned, watched, a loss or a gradient the job hands out, its writer's slot and every reader's
// slot allow it, and every implication holds (removed until none breaks: a fixed point). The
// ops reading or writing a blocked tensor get attributes channel_block, blocked_inputs and
// blocked_outputs (elementwise ops need none).
//
// On several devices of one machine the pass runs after the SBP pass (`placed`), before the
// boxing pass, so each device's region of the chain is blocked. In nChw{B}c the batch axis stays
// outermost: sample n's (C,H,W) values are one contiguous run of C*H*W elements in either layout,
// only ordered differently inside it. So a tensor written and read as S(0), B or P (on any
// devices) may be blocked: its per-device registers are (N_d,C,H,W) pieces, and every boxing
// between those layouts (S(0)->B gathers, in place or by copying whole samples; B->S(0) slices;
// P->B / P->S(0) sums, also through a reduce-scatter on another axis whose pieces only the
// gather reads) moves whole samples or adds element by element, the same bytes whatever the
// order inside a sample. A tensor some op reads or writes split on another axis stays plain.
// Still no conversion op is added.
#include <map>
#include <optional>
#include <set>

#include "graph/passes.h"
#include "kernels/blocked_layout.h"

namespace actorflow {
namespace graph {
namespace {

constexpr int kOut = 100;  // slot of output 0

struct LayoutRule {
  std::vector<int> slots;                  // may be blocked
  std::vector<int> unread;                 // inputs the kernel reads no data of: any layout
  std::vector<std::pair<int, int>> needs;  // (a, b): a blocked needs b blocked
  bool layout_free = false;                // elementwise: the kernel never sees the layout
};

bool IsLayoutFreeElementwise(const std::string& type) {
  static const std::set<std::string> types = {"relu",      "sigmoid",      "tanh",      "gelu",     "exp",    "log",
                                              "sqrt",      "square",       "negative",  "identity", "clamp",  "scalar_add",
                                              "scalar_mul", "relu_grad",   "sigmoid_grad", "tanh_grad", "gelu_grad",
                                              "clamp_grad", "add",         "sub",       "mul",      "div"};
  return types.count(type) > 0;
}

std::optional<LayoutRule> RuleOf(const Node& node) {
  if (node.kind != NodeKind::kOp || !node.mutable_inputs.empty() || node.output_descs.empty()) return std::nullopt;
  if (node.placement.device_type != "cpu" && !node.placement.device_type.empty()) return std::nullopt;
  const std::string& t = node.type;
  if (t == "conv2d" || t == "conv2d_grad_data" || t == "conv2d_grad_filter") {
    const std::string format = node.attrs.GetStringOr("data_format", "NCHW");
    if (format != "NCHW" && format != "channels_first") return std::nullopt;
    if (t == "conv2d") return LayoutRule{{0, kOut}, {}, {}};
    if (t == "conv2d_grad_data") return LayoutRule{{0, kOut}, {2}, {}};
    return LayoutRule{{0, 1}, {2}, {}};
  }
  if (t == "max_pool2d" || t == "avg_pool2d") {
    const std::string format = node.attrs.GetStringOr("data_format", "NCHW");
    if (format != "NCHW" && format != "channels_first") return std::nullopt;
    return LayoutRule{{0, kOut}, {}, {{kOut, 0}}};
  }
  if (t == "max_pool2d_grad") return LayoutRule{{0, 1, 2, kOut}, {}, {{0, kOut}, {kOut, 0}, {1, 0}, {2, kOut}}};
  if (t == "avg_pool2d_grad") return LayoutRule{{0, kOut}, {1}, {{0, kOut}}};
  if (IsLayoutFreeElementwise(t) && node.output_descs.size() == 1) {
    LayoutRule rule;
    rule.layout_free = true;
    rule.slots.push_back(kOut);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int slot = static_cast<int>(i);
      rule.slots.push_back(slot);
      rule.needs.push_back({slot, kOut});
      rule.needs.push_back({kOut, slot});
    }
    return rule;
  }
  return std::nullopt;
}

bool Contains(const std::vector<int>& list, int value) { return std::find(list.begin(), list.end(), value) != list.end(); }

// Layouts whose boxings never look inside a sample (see the file comment).
bool KeepsSamplesWhole(const Sbp& sbp) {
  return sbp.kind == SbpKind::kBroadcast || sbp.kind == SbpKind::kPartialSum || (sbp.kind == SbpKind::kSplit && sbp.axis == 0);
}

// Placed jobs: whether output 0 of `writer` is written and read (input `slot` of each reader)
// only in layouts that keep samples whole.
bool SamplesStayWhole(const Node& writer, const std::vector<std::pair<const Node*, size_t>>& readers) {
  if (writer.output_sbp.empty() || !KeepsSamplesWhole(writer.output_sbp[0])) return false;
  for (const auto& [reader, slot] : readers)
    if (slot >= reader->input_sbp.size() || !KeepsSamplesWhole(reader->input_sbp[slot])) return false;
  return true;
}

class BlockedLayoutPass : public Pass {
 public:
  BlockedLayoutPass(int64_t block, bool placed) : block_(block), placed_(placed) {}
  std::string name() const override { return placed_ ? "placed blocked layout" : "blocked layout"; }

  Status Run(Graph& graph) override {
    // Unplaced on single-device jobs, placed on multi-device single-machine ones (across
    // machines the data plane and its collectives would see the blocked tensors too).
    const bool runs = placed_ ? graph.total_device_num() > 1 && graph.machine_num() == 1 : graph.total_device_num() <= 1;
    if (block_ == 0 || !runs) return Status::Ok();
    std::vector<Node>& nodes = graph.mutable_nodes();
    std::vector<std::optional<LayoutRule>> rules(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) rules[i] = RuleOf(nodes[i]);
    // Only single-output ops write a blocked tensor (output 0).
    std::set<std::string> pinned = PinnedRefs(graph);
    for (const auto& [forward, gradient] : graph.gradients())
      if (!gradient.empty()) pinned.insert(gradient);

    // 1. Candidates: writer and shape allow it, not pinned.
    std::map<std::string, bool> blocked;  // output-0 ref -> stored blocked
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node& node = nodes[i];
      if (!rules[i] || !Contains(rules[i]->slots, kOut) || node.output_descs.size() != 1) continue;
      const TensorDesc& d = node.output_descs[0];
      if (d.shape.size() != 4 || d.dtype != DType::kFloat32 || d.shape[1] % block_ != 0) continue;
      if (rules[i]->layout_free)  // elementwise: every operand of the output's shape
        if (!std::all_of(node.inputs.begin(), node.inputs.end(), [&](const std::string& ref) {
              auto desc = graph.Desc(ref);
              return desc.ok() && desc->shape == d.shape && desc->dtype == d.dtype;
            }))
          continue;
      if (!pinned.count(node.output_ref(0))) blocked[node.output_ref(0)] = true;
    }
    if (placed_) {
      std::map<std::string, std::vector<std::pair<const Node*, size_t>>> readers;
      for (const Node& node : nodes)
        for (size_t k = 0; k < node.inputs.size(); ++k)
          if (blocked.count(node.inputs[k])) readers[node.inputs[k]].push_back({&node, k});
      for (auto& [ref, is] : blocked) {
        auto writer = graph.Resolve(ref);
        if (!writer.ok() || !SamplesStayWhole(*writer->first, readers[ref])) is = false;
      }
    }
    auto is_blocked = [&](const std::string& ref) {
      auto it = blocked.find(ref);
      return it != blocked.end() && it->second;
    };
    // 2. Every reader's slot must allow it (or not read its data).
    for (size_t i = 0; i < nodes.size(); ++i)
      for (size_t k = 0; k < nodes[i].inputs.size(); ++k) {
        const int slot = static_cast<int>(k);
        const bool allowed = rules[i] && (Contains(rules[i]->slots, slot) || Contains(rules[i]->unread, slot));
        if (!allowed && is_blocked(nodes[i].inputs[k])) blocked[nodes[i].inputs[k]] = false;
      }
    // 3. Implications, to a fixed point (each round only unblocks: at most one per tensor).
    auto ref_at = [&](const Node& node, int slot) { return slot >= kOut ? node.output_ref(slot - kOut) : node.inputs[slot]; };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (!rules[i]) continue;
        for (const auto& [a, b] : rules[i]->needs) {
          const std::string from = ref_at(nodes[i], a);
          if (is_blocked(from) && !is_blocked(ref_at(nodes[i], b))) blocked[from] = false, changed = true;
        }
      }
    }
    // 4. Attributes.
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!rules[i] || rules[i]->layout_free) continue;
      Node& node = nodes[i];
      std::vector<int64_t> inputs, outputs;
      for (int slot : rules[i]->slots) {
        if (!is_blocked(ref_at(node, slot))) continue;
        (slot >= kOut ? outputs : inputs).push_back(slot >= kOut ? slot - kOut : slot);
      }
      if (inputs.empty() && outputs.empty()) continue;
      std::sort(inputs.begin(), inputs.end());
      node.attrs.Set("channel_block", block_);
      if (!inputs.empty()) node.attrs.Set("blocked_inputs", inputs);
      if (!outputs.empty()) node.attrs.Set("blocked_outputs", outputs);
    }
    return Status::Ok();
  }

 private:
  int64_t block_;
  bool placed_;
};

}  // namespace

std::unique_ptr<Pass> MakeBlockedLayoutPass(int64_t channel_block, bool placed) {
  return std::make_unique<BlockedLayoutPass>(channel_block < 0 ? NativeChannelBlock() : channel_block, placed);
}

}  // namespace graph
}  // namespace actorflow

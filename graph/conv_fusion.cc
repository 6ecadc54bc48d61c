// Convolution epilogue fusion: the per-channel ops that follow a conv2d in inference networks
// run inside the convolution (kernels/conv.cc epilogues) instead of as their own ops, each of
// which would read and write the whole activation once more:
//   "conv_batch_norm": conv2d -> bias_add (channel axis) and conv2d -> batch_normalization
//     (training=false: the moving statistics, a per-channel affine map) become the conv's
//     fuse_bias / fuse_batch_norm epilogue. The statistics stay variables read at each act, so
//     a weight or statistic changed between calls (load_state_dict, eager training of the same
//     module) is seen as by the unfused ops: nothing is folded at compile time.
//   "conv_activation": conv2d -> relu or clamp (relu6, hardtanh) becomes its activation epilogue.
// A link fuses only when the conv's output is read by that one op alone and is not a job output,
// watch or loss, and (batch norm) the op's statistics outputs are unread: fusion never changes
// what a job returns. Runs after autodiff (a fused conv2d has no gradient rule), on single-device
// CPU jobs (the fused op has no SBP signatures of its own nor a CUDA kernel). Each link is one
// round: conv -> bias -> batch norm -> relu6 fuses in three.
//
// "conv_bias_grad" (train jobs, MakeConvBiasGradFusionPass): the bias gradient of a conv layer,
// bias_add_grad(dy) on the channel axis, and the filter gradient conv2d_grad_filter(dy, x) read
// the same dy; the filter gradient computes both (attr fuse_bias_grad, second output "dbias"):
// oneDNN's filter-gradient kernel sums dy per channel as it reads it, where the bias_add_grad
// was one more pass over dy on one thread (LeNet's first layer: 10 MB). Single-device CPU float32.
//
// On several devices of one machine both passes run again after the SBP pass (`placed`): the
// fused op has no SBP signatures of its own, so a link fuses only where each device's part of
// the fused op computes what the two ops computed there: the same devices, the conv's output
// read in the layout it is made in, batch-split (S(0)) or whole (B), never partial or split on
// the channels, and the epilogue's parameters whole on every device; for the bias gradient, dy
// read alike by both, batch-split with both gradients partial sums or whole with both whole.
// A data-parallel LeNet step on 2 devices so loses no pass over its activations to being
// parallel.
#include <cfloat>
#include <map>
#include <optional>
#include <set>

#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace {

bool OnCpu(const Node& node) { return node.placement.device_type == "cpu" || node.placement.device_type.empty(); }

// Whether the pass runs: unplaced on single-device jobs, placed on multi-device single-machine ones.
bool RunsOn(const Graph& graph, bool placed) {
  return placed ? graph.total_device_num() > 1 && graph.machine_num() == 1 : graph.total_device_num() <= 1;
}

bool IsBroadcast(const Sbp& sbp) { return sbp.kind == SbpKind::kBroadcast; }
bool IsBatchSplit(const Sbp& sbp) { return sbp.kind == SbpKind::kSplit && sbp.axis == 0; }

// Placed graphs: each device's conv2d -> consumer pair computes on its own part what the fused
// conv would (see the file comment).
bool PlacedEpilogueFits(const Node& conv, const Node& consumer) {
  if (conv.devices != consumer.devices || conv.output_sbp.size() != 1 || conv.input_sbp.size() != conv.inputs.size() ||
      consumer.input_sbp.size() != consumer.inputs.size() || consumer.output_sbp.empty())
    return false;
  const Sbp& layout = conv.output_sbp[0];
  if (!(IsBroadcast(layout) || IsBatchSplit(layout)) || !(consumer.input_sbp[0] == layout) ||
      !(consumer.output_sbp[0] == layout))
    return false;
  for (size_t k = 1; k < consumer.input_sbp.size(); ++k)
    if (!IsBroadcast(consumer.input_sbp[k])) return false;
  return true;
}

class ConvFusionPass : public Pass {
 public:
  ConvFusionPass(bool batch_norm, bool activation, bool placed)
      : batch_norm_(batch_norm), activation_(activation), placed_(placed) {}
  std::string name() const override { return placed_ ? "placed conv fusion" : "conv fusion"; }

  Status Run(Graph& graph) override {
    if (!RunsOn(graph, placed_)) return Status::Ok();
    for (;;) {
      AF_ASSIGN_OR_RETURN(bool changed, Round(graph));
      if (!changed) return Status::Ok();
    }
  }

 private:
  // What `consumer` adds to the conv2d `conv`, or false when it cannot fuse there.
  bool Absorb(const Node& consumer, const Node& conv, Node& fused) const {
    const bool has_bias = conv.attrs.GetBoolOr("fuse_bias", false), has_bn = conv.attrs.GetBoolOr("fuse_batch_norm", false);
    const bool has_activation = conv.attrs.Has("activation");
    if (consumer.type == "bias_add" && batch_norm_) {
      if (has_bias || has_bn || has_activation || consumer.inputs.size() != 2) return false;
      const int64_t axis = consumer.attrs.GetIntOr("axis", 1);
      if (axis != 1 && axis != -3) return false;
      if (consumer.attrs.GetBoolOr("fuse_relu", false)) {
        if (!activation_) return false;
        fused.attrs.Set("activation", std::string("relu"));
      }
      fused.inputs.push_back(consumer.inputs[1]);
      fused.attrs.Set("fuse_bias", true);
      return true;
    }
    if (consumer.type == "batch_normalization" && batch_norm_) {
      if (has_bn || has_activation || consumer.inputs.size() != 5 || consumer.attrs.GetBoolOr("training", false)) return false;
      const int64_t axis = consumer.attrs.GetIntOr("axis", 1);
      if (axis != 1 && axis != -3) return false;
      for (size_t i = 1; i < 5; ++i) fused.inputs.push_back(consumer.inputs[i]);
      fused.attrs.Set("fuse_batch_norm", true);
      fused.attrs.Set("batch_norm_epsilon", consumer.attrs.GetFloatOr("epsilon", 1e-5));
      return true;
    }
    if ((consumer.type == "relu" || consumer.type == "clamp") && activation_) {
      if (has_activation) return false;
      if (consumer.type == "relu") {
        fused.attrs.Set("activation", std::string("relu"));
      } else {
        fused.attrs.Set("activation", std::string("clip"));
        fused.attrs.Set("activation_min", consumer.attrs.Has("min") ? consumer.attrs.GetFloatOr("min", 0) : -FLT_MAX);
        fused.attrs.Set("activation_max", consumer.attrs.Has("max") ? consumer.attrs.GetFloatOr("max", 0) : FLT_MAX);
      }
      return true;
    }
    return false;
  }

  StatusOr<bool> Round(Graph& graph) {
    // Counted at the first conv2d found (before anything here changes the graph): a job
    // without convolutions pays nothing.
    std::optional<std::unordered_map<std::string, int>> counted;
    auto readers = [&]() -> std::unordered_map<std::string, int>& {
      if (!counted) counted = CountReadersHashed(graph);
      return *counted;
    };
    std::set<std::string> pinned = PinnedRefs(graph);

    std::map<std::string, std::string> renamed;   // consumer output ref -> fused conv output ref
    std::map<std::string, std::string> absorbed;  // consumer name -> fused conv name
    std::vector<bool> keep(graph.nodes().size(), true), touched(graph.nodes().size(), false);
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const Node& consumer = graph.nodes()[i];
      if (consumer.kind != NodeKind::kOp || consumer.inputs.empty() || touched[i]) continue;
      if (consumer.type != "bias_add" && consumer.type != "batch_normalization" && consumer.type != "relu" &&
          consumer.type != "clamp")
        continue;
      // A producer fused this round sits under another name until the renames below.
      AF_ASSIGN_OR_RETURN(auto producer_name, SplitRef(consumer.inputs[0]));
      if (absorbed.count(producer_name.first)) continue;
      AF_ASSIGN_OR_RETURN(auto producer, graph.Resolve(consumer.inputs[0]));
      const Node* conv = producer.first;
      const size_t conv_index = static_cast<size_t>(conv - graph.nodes().data());
      if (conv->kind != NodeKind::kOp || conv->type != "conv2d" || touched[conv_index] || !conv->mutable_inputs.empty() ||
          conv->output_descs[0].dtype != DType::kFloat32 || conv->output_descs[0].shape.size() != 4 || !OnCpu(*conv) ||
          conv->placement.ToString() != consumer.placement.ToString() || readers()[consumer.inputs[0]] != 1 ||
          pinned.count(consumer.inputs[0]) || consumer.output_descs[0] != conv->output_descs[0])
        continue;
      bool side_outputs_read = false;  // batch norm's mean and inv_std
      for (size_t k = 1; k < consumer.output_names.size(); ++k)
        side_outputs_read |= readers().count(consumer.output_ref(k)) > 0 || pinned.count(consumer.output_ref(k)) > 0;
      if (side_outputs_read) continue;
      // The fused node takes the consumer's place: after the epilogue's parameters (variables
      // may be created after the conv) and before every reader, so the order stays topological.
      if (placed_ && !PlacedEpilogueFits(*conv, consumer)) continue;
      Node fused = *conv;
      if (!Absorb(consumer, *conv, fused)) continue;
      // The epilogue's parameters are read as the consumer read them (whole: checked above).
      if (placed_)
        fused.input_sbp.insert(fused.input_sbp.end(), consumer.input_sbp.begin() + 1, consumer.input_sbp.end());
      fused.control_inputs.insert(fused.control_inputs.end(), consumer.control_inputs.begin(), consumer.control_inputs.end());
      renamed[consumer.output_ref(0)] = fused.output_ref(0);
      absorbed[consumer.name] = fused.name;
      keep[conv_index] = false;
      touched[conv_index] = touched[i] = true;
      graph.mutable_nodes()[i] = std::move(fused);
    }
    if (renamed.empty()) return false;
    RedirectFusedReaders(graph, renamed, absorbed);
    auto rename = [&](std::string& ref) {
      auto it = renamed.find(ref);
      if (it != renamed.end()) ref = it->second;
    };
    for (std::string& ref : graph.outputs()) rename(ref);
    for (Watch& w : graph.watches()) rename(w.ref);
    for (std::string& ref : graph.losses()) rename(ref);
    graph.Retain(keep);
    return true;
  }

  bool batch_norm_, activation_, placed_;
};

class ConvBiasGradFusionPass : public Pass {
 public:
  explicit ConvBiasGradFusionPass(bool placed) : placed_(placed) {}
  std::string name() const override { return placed_ ? "placed conv bias_grad fusion" : "conv bias_grad fusion"; }

  Status Run(Graph& graph) override {
    if (!RunsOn(graph, placed_)) return Status::Ok();
    std::map<std::string, std::vector<size_t>> filter_gradients;  // dy ref -> conv2d_grad_filter nodes reading it
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const Node& n = graph.nodes()[i];
      if (n.kind == NodeKind::kOp && n.type == "conv2d_grad_filter" && n.inputs.size() == 3 && n.output_descs.size() == 1 &&
          n.output_descs[0].dtype == DType::kFloat32 && OnCpu(n) && !n.attrs.GetBoolOr("fuse_bias_grad", false))
        filter_gradients[n.inputs[0]].push_back(i);
    }
    std::map<std::string, std::string> renamed, absorbed;
    std::vector<bool> keep(graph.nodes().size(), true), used(graph.nodes().size(), false);
    for (size_t b = 0; b < graph.nodes().size(); ++b) {
      const Node& bias = graph.nodes()[b];
      if (bias.kind != NodeKind::kOp || bias.type != "bias_add_grad" || bias.inputs.size() != 1 || !OnCpu(bias)) continue;
      auto candidates = filter_gradients.find(bias.inputs[0]);
      if (candidates == filter_gradients.end()) continue;
      for (size_t f : candidates->second) {
        const Node& filter = graph.nodes()[f];
        if (used[f] || !Fits(graph, bias, b, filter, f) || (placed_ && !PlacedFits(bias, filter))) continue;
        // The fused node keeps the filter gradient's name and sits at the later of the two
        // places: after every input of both, before every reader (Fits checked the earlier's).
        Node fused = filter;
        fused.attrs.Set("fuse_bias_grad", true);
        fused.output_names.push_back("dbias");
        fused.output_descs.push_back(bias.output_descs[0]);
        if (placed_) fused.output_sbp.push_back(bias.output_sbp[0]);
        fused.control_inputs.insert(fused.control_inputs.end(), bias.control_inputs.begin(), bias.control_inputs.end());
        renamed[bias.output_ref(0)] = fused.output_ref(1);
        absorbed[bias.name] = fused.name;
        used[f] = used[b] = true;
        keep[std::min(b, f)] = false;
        graph.mutable_nodes()[std::max(b, f)] = std::move(fused);
        break;
      }
    }
    if (renamed.empty()) return Status::Ok();
    RedirectFusedReaders(graph, renamed, absorbed);
    RenameJobRefs(graph, renamed);
    graph.Retain(keep);
    return Status::Ok();
  }

 private:
  // Placed graphs: the fused kernel sums each device's dy per channel as the bias_add_grad did
  // there, so both must read dy alike and make the same kind of result (file comment).
  static bool PlacedFits(const Node& bias, const Node& filter) {
    if (bias.devices != filter.devices || bias.input_sbp.size() != 1 || bias.output_sbp.size() != 1 ||
        filter.input_sbp.size() != filter.inputs.size() || filter.output_sbp.size() != 1 ||
        !(bias.input_sbp[0] == filter.input_sbp[0]))
      return false;
    const Sbp& dy = bias.input_sbp[0];
    const Sbp &filter_gradient = filter.output_sbp[0], &bias_gradient = bias.output_sbp[0];
    if (IsBatchSplit(dy))
      return filter_gradient.kind == SbpKind::kPartialSum && bias_gradient.kind == SbpKind::kPartialSum;
    return IsBroadcast(dy) && IsBroadcast(filter_gradient) && IsBroadcast(bias_gradient);
  }

  // Whether bias_add_grad `bias` (node b) folds into conv2d_grad_filter `filter` (node f): the
  // conv's channel axis, one bias element per filter, the same placement, and no reader of
  // the earlier node's output (nor control edge on it) before the later node.
  static bool Fits(const Graph& graph, const Node& bias, size_t b, const Node& filter, size_t f) {
    const std::string format = filter.attrs.GetStringOr("data_format", "NCHW");
    const bool channels_last = format == "NHWC" || format == "channels_last";
    const int64_t axis = bias.attrs.GetIntOr("axis", 1);
    const int64_t channel_axis = channels_last ? 3 : 1;
    if (axis != channel_axis && axis != channel_axis - 4) return false;
    const TensorDesc& filter_desc = filter.output_descs[0];
    if (bias.output_descs.size() != 1 || bias.output_descs[0] != TensorDesc{{filter_desc.shape[0]}, DType::kFloat32})
      return false;
    if (bias.placement.ToString() != filter.placement.ToString() || !bias.mutable_inputs.empty()) return false;
    const Node& earlier = b < f ? bias : filter;
    for (size_t i = std::min(b, f) + 1; i < std::max(b, f); ++i) {
      const Node& n = graph.nodes()[i];
      for (const std::string& ref : n.inputs)
        if (SplitRef(ref).ok() && SplitRef(ref)->first == earlier.name) return false;
      for (const std::string& control : n.control_inputs)
        if (control == earlier.name) return false;
    }
    return true;
  }

  bool placed_;
};

}  // namespace

std::unique_ptr<Pass> MakeConvFusionPass(bool batch_norm, bool activation, bool placed) {
  return std::make_unique<ConvFusionPass>(batch_norm, activation, placed);
}

std::unique_ptr<Pass> MakeConvBiasGradFusionPass(bool placed) { return std::make_unique<ConvBiasGradFusionPass>(placed); }

}  // namespace graph
}  // namespace actorflow

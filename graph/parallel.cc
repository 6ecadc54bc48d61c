// Placement, SBP and boxing passes: how a logical graph spreads over the devices of one process.
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "graph/passes.h"
#include "kernels/boxing.h"

namespace actorflow {
namespace graph {
namespace {

// Below this a partial sum read on other devices is summed by one task there: a reduce-scatter
// costs a task and a message hop per device (~10 us each), more than summing 64 KiB takes.
constexpr size_t kParallelSumBytes = 64 << 10;

// In one process, a reduction whose partial sums one task would sum for readers fixed whole on
// one device (a bias's or a small weight's gradient, read by its update) is computed there
// whole instead, from inputs that cost no copy to gather, when they total at most this: the
// per-device partial tasks and the summing task (three hops on two devices) cost more than the
// serial work (~20 us of a 2-core host's memory bandwidth).
constexpr size_t kSmallReductionInputBytes = 512 << 10;

// Added to the cost of a candidate that boxes a user-hinted blob into another layout.
constexpr double kHintedLayoutPenalty = 1e18;

std::string Where(const Node& n) {
  return "op '" + n.name + "' (" + n.type + ") at " + (n.location.empty() ? "<unknown>" : n.location);
}

// On one device every layout is the whole tensor.
Sbp Normalized(const Sbp& sbp, size_t parts) { return parts <= 1 ? Sbp::Broadcast() : sbp; }

// Inputs and variables are held whole in one register, whatever their readers are steered to,
// except variables stored as shards (ShardedVariable, several machines) and a placeholder fed
// per machine, held in one register per machine, S(0) (FedPerMachine).
Sbp PhysicalOutputSbp(const Graph& graph, const Node& n, size_t k) {
  if (n.kind == NodeKind::kVariable && ShardedVariable(graph, n)) return StoredLayout(graph, n);
  if (n.kind == NodeKind::kInput && n.attrs.Has(kFedPerMachineAttr) && k < n.output_sbp.size())
    return Normalized(n.output_sbp[k], n.devices.size());
  if (n.kind != NodeKind::kOp || k >= n.output_sbp.size()) return Sbp::Broadcast();
  return Normalized(n.output_sbp[k], n.devices.size());
}

// Whether a reader of a blob laid out as `from` needs a boxing to read it as `to`. In one
// process every register is host memory: a broadcast blob is read in place from any device.
bool NeedsBoxing(const std::vector<int>& from_devices, const Sbp& from, const std::vector<int>& to_devices,
                 const Sbp& to) {
  const Sbp a = Normalized(from, from_devices.size()), b = Normalized(to, to_devices.size());
  if (a.kind == SbpKind::kBroadcast && b.kind == SbpKind::kBroadcast) return false;
  return !(from_devices == to_devices && a == b);
}

// Bytes a boxing from (devices, layout) to (devices, layout) moves between devices: slicing a
// broadcast blob moves nothing, an all-reduce moves the blob twice, anything else once.
double CopyCost(const std::vector<int>& from_devices, const Sbp& from, const std::vector<int>& to_devices,
                const Sbp& to, double bytes) {
  const Sbp a = Normalized(from, from_devices.size()), b = Normalized(to, to_devices.size());
  if (!NeedsBoxing(from_devices, a, to_devices, b) || a.kind == SbpKind::kBroadcast) return 0;
  if (a.kind == SbpKind::kPartialSum && b.kind == SbpKind::kBroadcast) return 2 * bytes;
  return bytes;
}

// "" if `sbp` can lay out `desc` over `parts` devices, else why not.
std::string SplitProblem(const TensorDesc& desc, const Sbp& sbp, size_t parts) {
  if (sbp.kind != SbpKind::kSplit || parts <= 1) return "";
  const int64_t rank = static_cast<int64_t>(desc.shape.size());
  if (sbp.axis < 0 || sbp.axis >= rank)
    return "axis " + std::to_string(sbp.axis) + " is outside the rank of " + desc.ToString();
  if (desc.shape[sbp.axis] < static_cast<int64_t>(parts))
    return "axis " + std::to_string(sbp.axis) + " of " + desc.ToString() + " has length " +
           std::to_string(desc.shape[sbp.axis]) + " < " + std::to_string(parts) + " devices";
  return "";
}

// The layout each mutable input of in-place writer `n` must be written with: its variable's
// stored layout (a boxing in front of a mutable input would make the writer update a copy).
StatusOr<std::vector<std::pair<int, Sbp>>> WrittenLayouts(const Graph& graph, const Node& n) {
  std::vector<std::pair<int, Sbp>> layouts;
  for (int m : n.mutable_inputs) {
    AF_ASSIGN_OR_RETURN(auto target, graph.Resolve(n.inputs.at(m)));
    layouts.emplace_back(m, StoredLayout(graph, *target.first));
  }
  return layouts;
}

class PlacementPass : public Pass {
 public:
  std::string name() const override { return "placement"; }
  Status Run(Graph& graph) override {
    // Runs of nodes share a placement (most jobs have one): each run's is resolved once.
    const Node* last = nullptr;
    for (Node& n : graph.mutable_nodes()) {
      if (last != nullptr && n.placement.device_type == last->placement.device_type &&
          n.placement.machine_device_ids == last->placement.machine_device_ids) {
        n.devices = last->devices;
        last = &n;
        continue;
      }
      auto devices = ResolvePlacement(n.placement, graph.device_num(), graph.gpu_device_num(), graph.machine_num());
      if (!devices.ok()) return devices.status().WithContext(Where(n));
      n.devices = std::move(devices).value();
      last = &n;
    }
    return Status::Ok();
  }
};

class SbpPass : public Pass {
 public:
  std::string name() const override { return "sbp"; }
  Status Run(Graph& graph) override {
    bool spread = false;  // some op runs on several devices
    for (Node& n : graph.mutable_nodes()) {
      if (n.devices.empty()) n.devices = {0};  // the placement pass did not run: one device
      spread |= n.devices.size() > 1;
    }
    // The readers' layouts weigh only the choice among signatures, which only ops on several
    // devices make (a job on one device skips the table of every ref and the refinement).
    if (spread) {
      FindFixedReaders(graph);
    } else {
      fixed_readers_.clear();
    }
    boxed_.clear();
    for (Node& n : graph.mutable_nodes()) {
      n.input_sbp.assign(n.inputs.size(), Sbp::Broadcast());
      n.output_sbp.assign(n.output_names.size(), Sbp::Broadcast());
      if (n.kind != NodeKind::kOp) {
        AF_RETURN_IF_ERROR(ChooseSourceLayout(graph, n));
        continue;
      }
      // An in-place writer (an optimizer update, moving statistics) writes the one buffer of
      // the variable: once, on the variable's first device, unless every variable it writes is
      // stored split over the same devices, where each device writes its shard.
      AF_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(n.type));
      if (!n.mutable_inputs.empty()) {
        AF_ASSIGN_OR_RETURN(auto layouts, WrittenLayouts(graph, n));
        const Node& first = *graph.Resolve(n.inputs.at(n.mutable_inputs.front())).value().first;
        bool split = def->sbp != nullptr;
        for (const auto& [m, layout] : layouts)
          split &= layout.kind == SbpKind::kSplit &&
                   graph.Resolve(n.inputs.at(m)).value().first->devices == first.devices;
        if (split) {
          n.devices = first.devices;
          AF_ASSIGN_OR_RETURN(bool chosen, ChooseSignature(graph, n, *def, layouts));
          if (chosen) continue;
        }
        n.devices = {first.devices.empty() ? 0 : first.devices.front()};
        n.input_sbp.assign(n.inputs.size(), Sbp::Broadcast());
        n.output_sbp.assign(n.output_names.size(), Sbp::Broadcast());
      }
      // No SBP function: the op runs whole on one device rather than repeated on every one.
      if (n.devices.size() > 1 && !def->sbp) n.devices = {n.devices.front()};
      if (n.devices.size() <= 1) {
        AF_RETURN_IF_ERROR(CheckHints(n, n.output_sbp));
        continue;
      }
      AF_RETURN_IF_ERROR(ChooseSignature(graph, n, *def).status());
    }
    return spread ? RefineSourcelessOps(graph) : Status::Ok();
  }

 private:
  // An op without inputs (a constant, the loss's gradient seed) costs the same under every
  // signature when it is chosen; once its readers have chosen, it takes the layout they all
  // read it with, if it has one, so that no boxing reshapes its output.
  Status RefineSourcelessOps(Graph& graph) {
    std::map<std::string, std::vector<Sbp>> wanted;  // ref -> layouts its readers want
    for (const Node& reader : graph.nodes())
      for (size_t i = 0; i < reader.inputs.size(); ++i) {
        auto resolved = graph.Resolve(reader.inputs[i]);
        if (!resolved.ok() || resolved.value().first->devices != reader.devices) continue;
        wanted[reader.inputs[i]].push_back(reader.input_sbp.at(i));
      }
    for (Node& n : graph.mutable_nodes()) {
      if (n.kind != NodeKind::kOp || !n.inputs.empty() || n.devices.size() <= 1 || n.output_names.size() != 1) continue;
      if (!n.output_sbp_hints.empty() && n.output_sbp_hints[0]) continue;
      auto it = wanted.find(n.output_ref(0));
      if (it == wanted.end() || it->second.empty() || graph.outputs().end() != std::find(graph.outputs().begin(), graph.outputs().end(), n.output_ref(0)))
        continue;
      const Sbp want = it->second.front();
      if (want == n.output_sbp[0] ||
          !std::all_of(it->second.begin(), it->second.end(), [&](const Sbp& s) { return s == want; }))
        continue;
      AF_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(n.type));
      SbpContext context;
      context.attrs = n.attrs;
      context.outputs = n.output_descs;
      context.parts = static_cast<int64_t>(n.devices.size());
      AF_ASSIGN_OR_RETURN(std::vector<SbpSignature> candidates, CandidateSbpSignatures(*def, context));
      for (const SbpSignature& candidate : candidates)
        if (candidate.outputs[0] == want && SplitProblem(n.output_descs[0], want, n.devices.size()).empty()) {
          n.output_sbp = candidate.outputs;
          break;
        }
    }
    // Still whole: made once, read in place by every device.
    for (Node& n : graph.mutable_nodes())
      if (n.kind == NodeKind::kOp && n.inputs.empty() && n.devices.size() > 1 && n.output_sbp_hints.empty() &&
          std::all_of(n.output_sbp.begin(), n.output_sbp.end(), [](const Sbp& s) { return s.kind == SbpKind::kBroadcast; }))
        n.devices = {n.devices.front()};
    return Status::Ok();
  }

  Status CheckHints(const Node& n, const std::vector<Sbp>& outputs) {
    for (size_t k = 0; k < n.output_sbp_hints.size() && k < outputs.size(); ++k)
      if (n.output_sbp_hints[k] && !(Normalized(*n.output_sbp_hints[k], n.devices.size()) == outputs[k]))
        return InvalidArgument(Where(n) + ": output '" + n.output_names[k] + "' is hinted " +
                               n.output_sbp_hints[k]->ToString() + ", but on " +
                               PlacementOf(n.devices, n.placement.device_type).ToString() + " it can only be " +
                               outputs[k].ToString());
    return Status::Ok();
  }

  // Feeds default to S(0) in the consistent view (B when the batch axis cannot be split),
  // variables to B; a hint overrides both and must fit.
  Status ChooseSourceLayout(const Graph& graph, Node& n) {
    const size_t parts = n.devices.size();
    if (parts <= 1) return CheckHints(n, n.output_sbp);
    const TensorDesc& desc = n.output_descs[0];
    Sbp chosen = Sbp::Broadcast();
    if (n.kind == NodeKind::kInput && SplitProblem(desc, Sbp::Split(0), parts).empty() && !desc.shape.empty())
      chosen = Sbp::Split(0);
    if (!n.output_sbp_hints.empty() && n.output_sbp_hints[0]) {
      chosen = *n.output_sbp_hints[0];
      if (chosen.kind == SbpKind::kPartialSum)
        return InvalidArgument(Where(n) + ": '" + n.output_ref(0) + "' is hinted P; an input or variable can be S or B");
      const std::string problem = SplitProblem(desc, chosen, parts);
      if (!problem.empty())
        return InvalidArgument(Where(n) + ": cannot split blob '" + n.output_ref(0) + "' as hinted " +
                               chosen.ToString() + " over " + PlacementOf(n.devices).ToString() + ": " + problem);
    }
    (void)graph;
    n.output_sbp = {chosen};
    return Status::Ok();
  }

  // Picks n's signature. With `required` (input index, layout) pairs, only candidates reading
  // those inputs so are eligible, and none being so is `false`, not an error.
  StatusOr<bool> ChooseSignature(const Graph& graph, Node& n, const OpDef& def,
                                 const std::vector<std::pair<int, Sbp>>& required = {}) {
    const size_t parts = n.devices.size();
    SbpContext context;
    context.attrs = n.attrs;
    context.outputs = n.output_descs;
    context.parts = static_cast<int64_t>(parts);
    std::vector<const Node*> producers;
    std::vector<int> producer_outputs;
    for (const std::string& ref : n.inputs) {
      AF_ASSIGN_OR_RETURN(auto resolved, graph.Resolve(ref));
      producers.push_back(resolved.first);
      producer_outputs.push_back(resolved.second);
      context.inputs.push_back(resolved.first->output_descs[resolved.second]);
    }
    // A hinted split the blob cannot take is that, whatever the op's signatures.
    for (size_t k = 0; k < n.output_sbp_hints.size() && k < n.output_descs.size(); ++k) {
      if (!n.output_sbp_hints[k]) continue;
      const std::string problem = SplitProblem(n.output_descs[k], *n.output_sbp_hints[k], parts);
      if (!problem.empty())
        return InvalidArgument(Where(n) + ": cannot split blob '" + n.output_ref(k) + "' as hinted " +
                               n.output_sbp_hints[k]->ToString() + " over " + PlacementOf(n.devices).ToString() +
                               ": " + problem);
    }
    auto candidates = CandidateSbpSignatures(def, context);
    if (!candidates.ok()) return candidates.status().WithContext(Where(n));
    std::string split_problem, hint_problem;
    double best_cost = std::numeric_limits<double>::infinity();
    const SbpSignature* best = nullptr, *gathered_whole = nullptr;
    std::vector<Sbp> best_inputs, gathered_whole_inputs;
    for (const SbpSignature& candidate : candidates.value()) {
      std::vector<Sbp> inputs = candidate.inputs;
      if (candidate.repeat_last_input && !inputs.empty()) inputs.resize(n.inputs.size(), inputs.back());
      if (inputs.size() != n.inputs.size() || candidate.outputs.size() != n.output_names.size())
        return Internal(Where(n) + ": signature " + candidate.ToString() + " does not fit the op's arity");
      if (!std::all_of(required.begin(), required.end(),
                       [&](const std::pair<int, Sbp>& r) { return inputs.at(r.first) == r.second; }))
        continue;
      std::string problem;
      for (size_t i = 0; i < inputs.size() && problem.empty(); ++i) {
        std::string p = SplitProblem(context.inputs[i], inputs[i], parts);
        if (!p.empty()) problem = "cannot split blob '" + n.inputs[i] + "' (input " + std::to_string(i) + "): " + p;
      }
      for (size_t k = 0; k < candidate.outputs.size() && problem.empty(); ++k) {
        std::string p = SplitProblem(n.output_descs[k], candidate.outputs[k], parts);
        if (!p.empty()) problem = "cannot split blob '" + n.output_ref(k) + "': " + p;
      }
      if (!problem.empty()) {
        if (split_problem.empty()) split_problem = problem;
        continue;
      }
      bool hinted = true;
      for (size_t k = 0; k < n.output_sbp_hints.size() && k < candidate.outputs.size(); ++k)
        hinted &= !n.output_sbp_hints[k] || *n.output_sbp_hints[k] == candidate.outputs[k];
      if (!hinted) {
        hint_problem = "no signature of the op on " + PlacementOf(n.devices).ToString() + " gives the hinted layout";
        continue;
      }
      double cost = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        const Node& p = *producers[i];
        const Sbp from = p.output_sbp.empty() ? Sbp::Broadcast() : p.output_sbp[producer_outputs[i]];
        const double bytes = static_cast<double>(context.inputs[i].byte_size());
        // A boxing an earlier reader already needs is made once (the boxing pass shares it).
        const double copy = boxed_.count(BoxingKey(n.inputs[i], n.devices, inputs[i]))
                                ? 0
                                : CopyCost(p.devices, from, n.devices, inputs[i], bytes);
        // A layout the user asked for (model_distribute, distribute=, parallel_cast) is what
        // its readers compute with wherever one of their signatures can: boxing it away costs
        // more than any copy, so a candidate that keeps it always wins.
        const int k = producer_outputs[i];
        const bool hinted = k < static_cast<int>(p.output_sbp_hints.size()) && p.output_sbp_hints[k].has_value();
        cost += copy > 0 && hinted ? copy + kHintedLayoutPenalty : copy;
      }
      // Outputs whose readers' layouts are known already (updates and sinks: whole on one
      // device) count too: a weight gradient reduced from partial sums can cost more than
      // gathering the activations it is made from.
      for (size_t k = 0; k < candidate.outputs.size(); ++k)
        for (const auto& [devices, sbp] : fixed_readers_[n.output_ref(k)])
          cost += CopyCost(n.devices, candidate.outputs[k], devices, sbp,
                           static_cast<double>(n.output_descs[k].byte_size()));
      // Of candidates moving as many bytes, one splitting the work beats one computing it whole
      // on one device (half a byte: less than any difference in bytes).
      if (IsAllBroadcast(candidate)) cost += 0.5;
      if (gathered_whole == nullptr && hinted && IsAllBroadcast(candidate)) {
        gathered_whole = &candidate;
        gathered_whole_inputs = inputs;
      }
      if (cost < best_cost) {  // ties keep the op's order (its best first)
        best_cost = cost;
        best = &candidate;
        best_inputs = std::move(inputs);
      }
    }
    if (best != nullptr && gathered_whole != nullptr && required.empty() &&
        SmallReductionGathered(graph, n, *best, producers, producer_outputs, context.inputs)) {
      best = gathered_whole;
      best_inputs = std::move(gathered_whole_inputs);
    }
    if (best == nullptr && !required.empty()) return false;
    if (best == nullptr) {
      if (!hint_problem.empty()) {
        std::string hints;
        for (size_t k = 0; k < n.output_sbp_hints.size(); ++k)
          if (n.output_sbp_hints[k]) hints += (hints.empty() ? "" : ", ") + n.output_ref(k) + " " + n.output_sbp_hints[k]->ToString();
        return InvalidArgument(Where(n) + ": layout hint " + hints + " is impossible: " + hint_problem +
                               (split_problem.empty() ? "" : " (" + split_problem + ")"));
      }
      return InvalidArgument(Where(n) + ": " + (split_problem.empty() ? "no SBP signature" : split_problem));
    }
    n.input_sbp = std::move(best_inputs);
    n.output_sbp = best->outputs;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Sbp from = producers[i]->output_sbp.empty() ? Sbp::Broadcast() : producers[i]->output_sbp[producer_outputs[i]];
      if (NeedsBoxing(producers[i]->devices, from, n.devices, n.input_sbp[i]))
        boxed_.insert(BoxingKey(n.inputs[i], n.devices, n.input_sbp[i]));
    }
    // All broadcast: every device would compute the same; in one process one copy serves the
    // readers of every device, so it runs once (unless the user asked for the layout).
    // (An op without inputs decides in RefineSourcelessOps, once its readers have chosen.)
    bool all_broadcast = n.output_sbp_hints.empty() && !n.inputs.empty();
    for (const Sbp& sbp : n.input_sbp) all_broadcast &= sbp.kind == SbpKind::kBroadcast;
    for (const Sbp& sbp : n.output_sbp) all_broadcast &= sbp.kind == SbpKind::kBroadcast;
    if (all_broadcast) n.devices = {n.devices.front()};
    return true;
  }

  static bool IsAllBroadcast(const SbpSignature& signature) {
    for (const Sbp& sbp : signature.inputs)
      if (sbp.kind != SbpKind::kBroadcast) return false;
    for (const Sbp& sbp : signature.outputs)
      if (sbp.kind != SbpKind::kBroadcast) return false;
    return true;
  }

  // Whether `chosen` makes a small reduction better computed whole on one device (see
  // kSmallReductionInputBytes): one machine; each output of `chosen` a partial sum under
  // kParallelSumBytes (summed by one task) that only readers fixed whole on one device read;
  // every input whole already or split into byte ranges of the whole by an op on the same
  // devices or stored so (gathered in place by lowering: no copy), at most
  // kSmallReductionInputBytes in all.
  bool SmallReductionGathered(const Graph& graph, const Node& n, const SbpSignature& chosen,
                              const std::vector<const Node*>& producers, const std::vector<int>& producer_outputs,
                              const std::vector<TensorDesc>& inputs) const {
    if (graph.machine_num() > 1 || chosen.outputs.empty()) return false;
    for (size_t k = 0; k < chosen.outputs.size(); ++k) {
      if (chosen.outputs[k].kind != SbpKind::kPartialSum || n.output_descs[k].byte_size() >= kParallelSumBytes)
        return false;
      auto readers = fixed_readers_.find(n.output_ref(k));
      if (readers == fixed_readers_.end() || readers->second.empty()) return false;
      for (const auto& [devices, sbp] : readers->second)
        if (devices.size() != 1 || sbp.kind != SbpKind::kBroadcast) return false;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < producers.size(); ++i) {
      const Node& p = *producers[i];
      bytes += inputs[i].byte_size();
      const Sbp from = PhysicalOutputSbp(graph, p, static_cast<size_t>(producer_outputs[i]));
      if (from.kind == SbpKind::kBroadcast) continue;
      if (from.kind != SbpKind::kSplit || p.devices != n.devices) return false;
      for (int64_t axis = 0; axis < from.axis; ++axis)
        if (inputs[i].shape[axis] != 1) return false;  // strided shards: a gather would copy
    }
    return bytes <= kSmallReductionInputBytes;
  }

  // Readers whose layout is known before the SBP pass reaches them: in-place writers (whole,
  // on their variable's first device) and the call's outputs and watches (whole, on one device).
  // Refs with any other reader are left out (their readers choose later).
  void FindFixedReaders(const Graph& graph) {
    fixed_readers_.clear();
    std::set<std::string> open;  // refs with a reader whose layout is not known yet
    for (const Node& reader : graph.nodes()) {
      if (reader.kind != NodeKind::kOp) continue;
      int device = -1;
      const Node* variable = nullptr;
      for (int m : reader.mutable_inputs) {
        auto target = graph.Resolve(reader.inputs.at(m));
        if (target.ok() && !target.value().first->devices.empty()) {
          variable = target.value().first;
          device = variable->devices.front();
        }
      }
      // A writer of a variable stored split most likely writes each shard on its device
      // (the op may still fall back to one device; this is an estimate), reading the tensors
      // shaped like the variable (its gradient, its state) split alike.
      const Sbp stored = variable != nullptr ? StoredLayout(graph, *variable) : Sbp::Broadcast();
      for (const std::string& ref : reader.inputs) {
        if (device < 0) {
          open.insert(ref);
        } else if (stored.kind == SbpKind::kSplit) {
          auto desc = graph.Desc(ref);
          const bool shaped_alike = desc.ok() && desc.value().shape == variable->output_descs[0].shape;
          fixed_readers_[ref].push_back({variable->devices, shaped_alike ? stored : Sbp::Broadcast()});
        } else {
          fixed_readers_[ref].push_back({{device}, Sbp::Broadcast()});
        }
      }
    }
    for (const std::string& ref : open) fixed_readers_.erase(ref);
    for (const std::string& ref : open) fixed_readers_[ref];  // present and empty: no estimate
  }

  static std::string BoxingKey(const std::string& ref, const std::vector<int>& devices, const Sbp& sbp) {
    return ref + "|" + PlacementOf(devices).ToString() + "|" + Normalized(sbp, devices.size()).ToString();
  }

  std::map<std::string, std::vector<std::pair<std::vector<int>, Sbp>>> fixed_readers_;
  std::set<std::string> boxed_;  // BoxingKey of every boxing the signatures chosen so far need
};

class BoxingPass : public Pass {
 public:
  std::string name() const override { return "boxing"; }
  Status Run(Graph& graph) override {
    // The op nodes by position. A boxing node goes right after its producer, before the reader
    // being boxed for (never visited, as the ops here are the ones there were): the reader's
    // position is found again after each.
    for (size_t at = 0; at < graph.nodes().size(); ++at) {
      if (graph.nodes()[at].kind != NodeKind::kOp) continue;
      const size_t inputs = graph.nodes()[at].inputs.size();
      for (size_t i = 0; i < inputs; ++i) {
        const Node* n = &graph.nodes()[at];
        AF_ASSIGN_OR_RETURN(bool unboxed, ReadAsItIs(graph, n->inputs[i], n->devices, n->input_sbp.at(i)));
        if (unboxed) continue;  // most inputs: no copies of the node's fields, nothing added
        const std::string name = n->name;
        const std::string ref = n->inputs[i];
        const std::vector<int> devices = n->devices;
        const Sbp want = n->input_sbp.at(i);
        const std::string location = n->location;  // a copy: Boxed adds nodes
        AF_ASSIGN_OR_RETURN(std::string boxed, Boxed(graph, ref, devices, want, location));
        n = graph.FindNode(name);  // Boxed may have added nodes (the node list may have moved)
        at = static_cast<size_t>(n - graph.nodes().data());
        if (boxed != ref && std::find(n->mutable_inputs.begin(), n->mutable_inputs.end(), static_cast<int>(i)) !=
                                n->mutable_inputs.end())
          return Internal(Where(*n) + " writes '" + ref + "' in place but reads it through a boxing as " +
                          want.ToString());
        graph.mutable_nodes()[at].inputs[i] = boxed;
      }
    }
    // The call's outputs and the watches read the whole tensor on one device.
    auto whole = [&](std::string& ref, const std::string& location) -> Status {
      AF_ASSIGN_OR_RETURN(auto resolved, graph.Resolve(ref));
      const std::vector<int> first = {resolved.first->devices.empty() ? 0 : resolved.first->devices.front()};
      AF_ASSIGN_OR_RETURN(ref, Boxed(graph, ref, first, Sbp::Broadcast(), location));
      return Status::Ok();
    };
    // Outputs fetched per machine stay split over every device of every machine (OutputPerMachine).
    std::vector<int> every_device(static_cast<size_t>(graph.machine_num() * graph.device_num()));
    for (size_t d = 0; d < every_device.size(); ++d) every_device[d] = static_cast<int>(d);
    for (std::string& ref : graph.outputs()) {
      if (!OutputPerMachine(graph, ref)) {
        AF_RETURN_IF_ERROR(whole(ref, ""));
        continue;
      }
      // Its identity is hinted S(0) over every device (the SBP pass honoured it or failed).
      AF_ASSIGN_OR_RETURN(std::string boxed, Boxed(graph, ref, every_device, Sbp::Split(0), ""));
      if (boxed != ref)
        return InvalidArgument("output '" + ref + "' is fetched per machine but is not laid out S(0) over every "
                               "device of every machine");
    }
    for (Watch& w : graph.watches()) {
      if (!w.diff) {
        AF_RETURN_IF_ERROR(whole(w.ref, w.location));
        continue;
      }
      auto it = graph.gradients().find(w.ref);
      if (it != graph.gradients().end() && !it->second.empty()) AF_RETURN_IF_ERROR(whole(it->second, w.location));
    }
    return Status::Ok();
  }

 private:
  // `ref` as a reader on `devices` laid out `want` reads it: itself, or a boxing node's output
  // (made once per ref and destination). P->B is summed by reduce-scatter tasks writing their
  // slices of one block that lowering gathers in place (no copy), where the shards of S(k) are
  // byte ranges of the whole (or, over the same devices, on the first axis long enough), each
  // task summing at least kParallelSumBytes of the blob: a task and its message hop cost more
  // than summing less. So a blob under that is summed by one task (on the first device of the
  // destination), and a blob of a few chunks by as many tasks, on the first devices of the
  // source (several machines: every device of the source, or one task under the threshold,
  // the pairs the cross-machine pass turns into one all-reduce per machine).
  // Whether a reader on `devices` laid out `want` reads `ref` as it is (Boxed returns `ref`).
  static StatusOr<bool> ReadAsItIs(const Graph& graph, const std::string& ref, const std::vector<int>& devices,
                                   const Sbp& want) {
    static const std::vector<int> kFirstDevice{0};
    AF_ASSIGN_OR_RETURN(auto resolved, graph.Resolve(ref));
    const Node& producer = *resolved.first;
    const std::vector<int>& from_devices = producer.devices.empty() ? kFirstDevice : producer.devices;
    const Sbp from = PhysicalOutputSbp(graph, producer, resolved.second);
    const Sbp to = Normalized(want, devices.size());
    if (!NeedsBoxing(from_devices, from, devices, to)) return true;
    // A variable or placeholder stored split: each device reads its shard of the one buffer
    // in place.
    return from_devices == devices && to.kind == SbpKind::kSplit && StoredLayout(graph, producer) == to;
  }

  StatusOr<std::string> Boxed(Graph& graph, const std::string& ref, const std::vector<int>& devices, const Sbp& want,
                              const std::string& location) {
    AF_ASSIGN_OR_RETURN(bool unboxed, ReadAsItIs(graph, ref, devices, want));
    if (unboxed) return ref;
    AF_ASSIGN_OR_RETURN(auto resolved, graph.Resolve(ref));
    const Node& producer = *resolved.first;
    const std::vector<int> from_devices = producer.devices.empty() ? std::vector<int>{0} : producer.devices;
    const Sbp from = PhysicalOutputSbp(graph, producer, resolved.second);
    const Sbp to = Normalized(want, devices.size());
    const std::string key = ref + "|" + PlacementOf(devices).ToString() + "|" + to.ToString();
    if (auto it = made_.find(key); it != made_.end()) return it->second;
    const TensorDesc& desc = producer.output_descs[resolved.second];
    const bool elsewhere = from_devices != devices;
    const size_t chunks =
        graph.machine_num() > 1
            ? (desc.byte_size() >= kParallelSumBytes || !elsewhere ? from_devices.size() : 1)
            : std::min(from_devices.size(), std::max<size_t>(1, desc.byte_size() / kParallelSumBytes));
    if (from.kind == SbpKind::kPartialSum && to.kind == SbpKind::kBroadcast && chunks > 1) {
      const std::vector<int> summing(from_devices.begin(), from_devices.begin() + static_cast<std::ptrdiff_t>(chunks));
      for (size_t axis = 0; axis < desc.shape.size(); ++axis) {
        if (desc.shape[axis] < static_cast<int64_t>(chunks)) {
          if ((elsewhere || summing != from_devices) && desc.shape[axis] != 1) break;  // later axes' shards would be strided
          continue;
        }
        AF_ASSIGN_OR_RETURN(std::string scattered, Insert(graph, ref, from, summing, Sbp::Split(axis), location));
        AF_ASSIGN_OR_RETURN(std::string gathered, Insert(graph, scattered, Sbp::Split(axis), devices, to, location));
        made_[key] = gathered;
        return gathered;
      }
    }
    AF_ASSIGN_OR_RETURN(std::string boxed, Insert(graph, ref, from, devices, to, location));
    made_[key] = boxed;
    return boxed;
  }

  StatusOr<std::string> Insert(Graph& graph, const std::string& ref, const Sbp& from, const std::vector<int>& devices,
                               const Sbp& to, const std::string& location) {
    AF_ASSIGN_OR_RETURN(auto producer_ref, SplitRef(ref));
    const std::string producer = producer_ref.first;
    Attrs attrs{{"in_sbp", from.ToString()}, {"out_sbp", to.ToString()}};
    AF_ASSIGN_OR_RETURN(const Node* made, graph.AddOp("boxing", producer + "-boxing", {ref}, attrs, location,
                                                      PlacementOf(devices, graph.FindNode(producer)->placement.device_type)));
    const std::string name = made->name, out = made->output_ref(0);
    Node* node = graph.FindMutableNode(name);
    node->devices = devices;
    node->input_sbp = {from};
    node->output_sbp = {to};
    graph.MoveAfter(name, producer);
    return out;
  }

  std::map<std::string, std::string> made_;
};

}  // namespace

bool FedPerMachine(const Graph& graph, const Node& n) {
  return n.kind == NodeKind::kInput && graph.machine_num() > 1 && n.attrs.Has(kFedPerMachineAttr);
}

bool OutputPerMachine(const Graph& graph, const std::string& ref) {
  if (graph.machine_num() <= 1) return false;
  auto resolved = graph.Resolve(ref);
  return resolved.ok() && resolved.value().first->kind == NodeKind::kOp &&
         resolved.value().first->attrs.Has(kOutputPerMachineAttr);
}

Sbp StoredLayout(const Graph& graph, const Node& source) {
  if ((source.kind != NodeKind::kVariable && source.kind != NodeKind::kInput) || source.devices.size() <= 1 ||
      (graph.machine_num() > 1 && source.kind != NodeKind::kVariable && !FedPerMachine(graph, source)) ||
      source.output_descs.empty())
    return Sbp::Broadcast();
  // A variable's layout is its hint (known before the SBP pass reaches it: in-place writers
  // are placed by it); a placeholder's is what the SBP pass chose (S(0) by default).
  std::optional<Sbp> layout;
  if (source.kind == NodeKind::kVariable && !source.output_sbp_hints.empty()) layout = source.output_sbp_hints[0];
  if (source.kind == NodeKind::kInput && !source.output_sbp.empty()) layout = source.output_sbp[0];
  if (!layout || layout->kind != SbpKind::kSplit) return Sbp::Broadcast();
  const TensorDesc& desc = source.output_descs[0];
  if (!SplitProblem(desc, *layout, source.devices.size()).empty()) return Sbp::Broadcast();
  if (graph.machine_num() > 1) return *layout;  // one buffer per shard: strided splits too
  for (int64_t axis = 0; axis < layout->axis; ++axis)
    if (desc.shape[axis] != 1) return Sbp::Broadcast();  // strided shards
  return *layout;
}

bool ShardedVariable(const Graph& graph, const Node& source) {
  return source.kind == NodeKind::kVariable && graph.machine_num() > 1 &&
         StoredLayout(graph, source).kind == SbpKind::kSplit;
}

std::unique_ptr<Pass> MakePlacementPass() { return std::make_unique<PlacementPass>(); }
std::unique_ptr<Pass> MakeSbpPass() { return std::make_unique<SbpPass>(); }
std::unique_ptr<Pass> MakeBoxingPass() { return std::make_unique<BoxingPass>(); }

std::string SbpSummary(const Graph& graph) {
  std::ostringstream out;
  for (const Node& n : graph.nodes()) {
    if (n.devices.empty()) continue;
    out << n.name << " (" << n.type << ") on " << PlacementOf(n.devices, n.placement.device_type).ToString() << ": ";
    for (size_t i = 0; i < n.input_sbp.size(); ++i) out << (i ? "," : "") << n.input_sbp[i].ToString();
    out << "->";
    for (size_t i = 0; i < n.output_sbp.size(); ++i) out << (i ? "," : "") << n.output_sbp[i].ToString();
    if (!n.location.empty()) out << "  @ " << n.location;
    // An op type declaring no signatures is computed whole (B) by one task: say so, since the
    // layout was not chosen but fallen back to.
    if (n.kind == NodeKind::kOp) {
      auto def = OpRegistry::Global().Find(n.type);
      if (def.ok() && !def.value()->sbp) out << "  (no SBP declaration: whole on one device)";
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace graph
}  // namespace actorflow

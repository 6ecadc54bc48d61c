#include "graph/graph.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace actorflow {
namespace graph {

std::string Placement::ToString() const {
  std::string s = device_type;
  if (machine_device_ids.empty()) return s + " (all devices)";
  for (size_t i = 0; i < machine_device_ids.size(); ++i) s += (i ? "," : " ") + machine_device_ids[i];
  return s;
}

namespace {
// A non-negative decimal number, or -1.
int ParseIndex(const std::string& text) {
  if (text.empty() || text.size() > 6) return -1;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}
}  // namespace

StatusOr<std::vector<int>> ResolvePlacement(const Placement& placement, int device_num, int gpu_device_num,
                                            int machine_num) {
  auto fail = [&](const std::string& why) {
    return InvalidArgument("placement '" + placement.ToString() + "': " + why);
  };
  const bool gpu = placement.device_type == "gpu" || placement.device_type == "cuda";
  if (gpu && gpu_device_num <= 0)
    return fail("no GPU device is usable by placements (flow.config.gpu_device_num is 0, or no GPU was found); use "
                "device type 'cpu' (flow.config.cpu_device_num(n) gives n CPU devices)");
  if (!gpu && placement.device_type != "cpu")
    return fail("device type must be 'cpu' or 'gpu', got '" + placement.device_type + "'");
  const std::string count_name = gpu ? "gpu_device_num" : "cpu_device_num";
  if (gpu) device_num = gpu_device_num;
  std::vector<int> devices;
  if (placement.machine_device_ids.empty()) {
    if (gpu && device_num > 1)
      return fail("every GPU of the config is " + std::to_string(device_num) + " GPUs; an op runs on one GPU so far "
                  "(boxing between GPUs needs the device collectives, which are not built yet): place ops with "
                  "flow.scope.placement(\"gpu\", \"0:0\")");
    for (int d = 0; d < device_num * machine_num; ++d) devices.push_back(d);
    return devices;
  }
  const std::string form = "' is not of the form 'machine:device' or 'machine:first-last' (e.g. '0:0-1', '0-1:0')";
  // "a" or "a-b" as [first, last]; {-1, -1} when malformed.
  auto range_of = [](const std::string& text) {
    const size_t dash = text.find('-');
    const int first = ParseIndex(text.substr(0, dash));
    const int last = dash == std::string::npos ? first : ParseIndex(text.substr(dash + 1));
    return first < 0 || last < 0 ? std::make_pair(-1, -1) : std::make_pair(first, last);
  };
  for (const std::string& ids : placement.machine_device_ids) {
    const size_t colon = ids.find(':');
    if (colon == std::string::npos) return fail("'" + ids + form);
    const auto [first_machine, last_machine] = range_of(ids.substr(0, colon));
    const auto [first, last] = range_of(ids.substr(colon + 1));
    if (first_machine < 0 || first < 0) return fail("'" + ids + form);
    if (last < first || last_machine < first_machine) return fail("'" + ids + "': the range ends before it starts");
    for (int machine = first_machine; machine <= last_machine; ++machine) {
      if (machine >= machine_num)
        return fail("machine " + std::to_string(machine) + " does not exist: " +
                    (machine_num == 1 ? std::string("one process is machine 0")
                                      : "machine_num is " + std::to_string(machine_num) + " (machines 0-" +
                                            std::to_string(machine_num - 1) + ")"));
      for (int d = first; d <= last; ++d) {
        if (d >= device_num)
          return fail("device " + std::to_string(d) + " does not exist: " + count_name + " is " + std::to_string(device_num) +
                      " (devices 0-" + std::to_string(device_num - 1) + ")");
        const int global = machine * device_num + d;
        if (std::find(devices.begin(), devices.end(), global) != devices.end())
          return fail("device " + (machine_num == 1 ? "" : std::to_string(machine) + ":") + std::to_string(d) +
                      " is listed twice");
        devices.push_back(global);
      }
    }
  }
  if (gpu && devices.size() > 1)
    return fail("names " + std::to_string(devices.size()) + " GPUs; an op runs on one GPU so far (boxing between "
                "GPUs needs the device collectives, which are not built yet): name one, e.g. '0:0'");
  return devices;
}

Placement PlacementOf(const std::vector<int>& devices, const std::string& device_type) {
  Placement p;
  p.device_type = device_type;
  for (int d : devices) p.machine_device_ids.push_back("0:" + std::to_string(d));
  return p;
}

StatusOr<std::pair<std::string, std::string>> SplitRef(const std::string& ref) {
  size_t slash = ref.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == ref.size())
    return InvalidArgument("tensor reference '" + ref + "' is not of the form 'op_name/output_name'");
  return std::make_pair(ref.substr(0, slash), ref.substr(slash + 1));
}

Graph& Graph::operator=(const Graph& other) {
  if (this == &other) return *this;
  job_name_ = other.job_name_;
  job_type_ = other.job_type_;
  device_num_ = other.device_num_;
  machine_num_ = other.machine_num_;
  gpu_device_num_ = other.gpu_device_num_;
  nodes_ = other.nodes_;
  index_ = other.index_;
  variable_index_ = other.variable_index_;
  next_suffix_.clear();
  feeds_ = other.feeds_;
  outputs_ = other.outputs_;
  watches_ = other.watches_;
  losses_ = other.losses_;
  optimizer_ = other.optimizer_ ? std::make_unique<OptimizerSpec>(*other.optimizer_) : nullptr;
  gradients_ = other.gradients_;
  return *this;
}

const Node* Graph::FindNode(std::string_view name) const {
  const size_t at = index_.Find(name);
  return at == NameIndex::kNone ? nullptr : &nodes_[at];
}

Node* Graph::FindMutableNode(std::string_view name) {
  const size_t at = index_.Find(name);
  return at == NameIndex::kNone ? nullptr : &nodes_[at];
}

StatusOr<std::pair<const Node*, int>> Graph::Resolve(const std::string& ref) const {
  // SplitRef's parts as views (no strings built: every pass resolves each input it looks at).
  const size_t slash = ref.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == ref.size()) return SplitRef(ref).status();
  const std::string_view node_name = std::string_view(ref).substr(0, slash);
  const std::string_view output = std::string_view(ref).substr(slash + 1);
  const Node* node = FindNode(node_name);
  if (!node)
    return NotFound("tensor '" + ref + "': no op named '" + std::string(node_name) + "' in job '" + job_name_ + "'");
  for (size_t i = 0; i < node->output_names.size(); ++i)
    if (node->output_names[i] == output) return std::make_pair(node, static_cast<int>(i));
  const std::pair<std::string, std::string> parts{std::string(node_name), std::string(output)};
  std::string known;
  for (const auto& n : node->output_names) known += (known.empty() ? "" : ", ") + n;
  return NotFound("tensor '" + ref + "': op '" + node->name + "' (" + node->type + ") has no output '" +
                  parts.second + "' (outputs: " + known + ")");
}

StatusOr<TensorDesc> Graph::Desc(const std::string& ref) const {
  AF_ASSIGN_OR_RETURN(auto resolved, Resolve(ref));
  return resolved.first->output_descs[resolved.second];
}

std::string Graph::UniqueName(const std::string& base) const {
  if (!index_.Contains(base)) return base;
  int& next = next_suffix_[base];
  for (int i = std::max(next, 1);; ++i) {
    std::string candidate = base + "_" + std::to_string(i);
    if (!index_.Contains(candidate)) {
      next = i;
      return candidate;
    }
  }
}

const Node* Graph::FindVariable(const std::string& variable_name) const {
  // Every node enters through Append, so a name missing from the index is no variable's.
  auto it = variable_index_.find(variable_name);
  if (it == variable_index_.end()) return nullptr;
  const Node* node = FindNode(it->second);
  if (node != nullptr && node->kind == NodeKind::kVariable && node->variable_name == variable_name) return node;
  // A pass rewrote the indexed node in place: the slow, always right answer.
  for (const Node& n : nodes_)
    if (n.kind == NodeKind::kVariable && n.variable_name == variable_name) return &n;
  return nullptr;
}

Node& Graph::Append(Node node) {
  if (!index_.Insert(node.name, nodes_.size()))  // one lookup: a new name enters
    throw std::logic_error("graph: duplicate node name " + node.name);
  if (node.kind == NodeKind::kVariable) variable_index_.emplace(node.variable_name, node.name);
  // Grown fourfold: each growth moves every node (and a node's move writes into its heap-held
  // members, cold in a graph of thousands), so a trace moves each node a third as often as
  // with doubling (measured: 1.5 of 45 ms of a 3000-op trace). Room a large array does not use
  // is address space only.
  if (nodes_.size() == nodes_.capacity()) nodes_.reserve(std::max<size_t>(64, nodes_.capacity() * 4));
  nodes_.push_back(std::move(node));
  return nodes_.back();
}

void Graph::MoveAfter(const std::string& name, const std::string& after) {
  const size_t from = index_.Find(name), at = index_.Find(after);
  if (from == NameIndex::kNone || at == NameIndex::kNone)
    throw std::out_of_range("graph: MoveAfter of " + name + " after " + after + ": no such node");
  const size_t to = at + 1;
  if (from < to) throw std::logic_error("graph: MoveAfter expects " + name + " after " + after);
  std::rotate(nodes_.begin() + static_cast<std::ptrdiff_t>(to), nodes_.begin() + static_cast<std::ptrdiff_t>(from),
              nodes_.begin() + static_cast<std::ptrdiff_t>(from) + 1);
  for (size_t i = to; i <= from; ++i) index_.Assign(nodes_[i].name, i);
}

void Graph::Retain(const std::vector<bool>& keep) {
  // The index is corrected in place instead of rebuilt (a pass fusing a few nodes of thousands
  // pays a string compare per node, not a string copy and an allocation per node). Passes
  // may have replaced nodes (a fused node under another node's name, nodes inserted), so an
  // entry stands only where its position still holds a kept node of that name.
  std::vector<size_t> position(nodes_.size());
  size_t kept_count = 0;
  bool dropped_variable = false;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    position[i] = kept_count;
    kept_count += keep[i] ? 1 : 0;
    dropped_variable |= !keep[i] && nodes_[i].kind == NodeKind::kVariable;
  }
  size_t standing = 0;  // entries that stand: at most one per kept position
  std::vector<bool> stands(nodes_.size(), false);
  index_.RetainIf([&](std::string_view name, size_t& at) {
    if (at >= nodes_.size() || !keep[at] || nodes_[at].name != name) return false;
    stands[at] = true;
    at = position[at];
    ++standing;
    return true;
  });
  // Every kept node has its entry unless a pass put nodes in without Append, renamed one or
  // put a node under another's name (a fusion's node where the node it absorbed stood): only
  // the kept nodes whose entry did not stand are looked up, not every kept node. Of two kept
  // nodes of one name the last one holds the entry: backwards, an entry already past a node's
  // position is a later node's of its name (an entry that stood, or one set in this loop).
  bool new_variable = false;
  if (standing != kept_count) {
    for (size_t i = nodes_.size(); i-- > 0;) {
      if (!keep[i] || stands[i]) continue;
      const size_t at = index_.Find(nodes_[i].name);
      if (at == NameIndex::kNone || at < position[i]) {
        index_.Assign(nodes_[i].name, position[i]);
        new_variable |= nodes_[i].kind == NodeKind::kVariable;
      }
    }
  }
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (keep[i] && position[i] != i) nodes_[position[i]] = std::move(nodes_[i]);
  nodes_.erase(nodes_.begin() + static_cast<std::ptrdiff_t>(kept_count), nodes_.end());
  next_suffix_.clear();  // names may have been freed
  // Each variable's first node is unchanged unless a variable node went or came.
  if (dropped_variable || new_variable) {
    variable_index_.clear();
    for (const Node& n : nodes_)
      if (n.kind == NodeKind::kVariable) variable_index_.emplace(n.variable_name, n.name);
  }
  for (Node& n : nodes_)
    if (!n.control_inputs.empty())
      std::erase_if(n.control_inputs, [&](const std::string& c) { return !index_.Contains(c); });
}

StatusOr<const Node*> Graph::AddOp(const std::string& type, const std::string& name,
                                   const std::vector<std::string>& inputs, const Attrs& attrs,
                                   const std::string& location, const Placement& placement) {
  std::string unique = UniqueName(name.empty() ? type : name);
  auto fail = [&](const Status& s) {
    return Status(s.code(), "op '" + unique + "' (" + type + ") at " + (location.empty() ? "<unknown>" : location) +
                                ": " + s.message());
  };
  auto def_or = OpRegistry::Global().Find(type);
  if (!def_or.ok()) return fail(def_or.status());
  const OpDef* def = def_or.value();
  if (!def->variadic_inputs && inputs.size() != def->input_names.size()) {
    std::string names;
    for (const auto& n : def->input_names) names += (names.empty() ? "" : ", ") + n;
    return fail(InvalidArgument("expected " + std::to_string(def->input_names.size()) + " inputs (" + names +
                                "), got " + std::to_string(inputs.size())));
  }
  InferContext ctx;
  ctx.attrs = attrs;
  ctx.inputs.reserve(inputs.size());
  for (const auto& ref : inputs) {
    auto resolved = Resolve(ref);
    if (!resolved.ok()) return fail(resolved.status());
    ctx.inputs.push_back(resolved.value().first->output_descs[resolved.value().second]);
  }
  if (!def->infer) return fail(Internal("op type has no shape inference"));
  Status inferred = def->infer(ctx);
  if (!inferred.ok()) return fail(inferred);
  Node node;
  node.name = unique;
  node.kind = NodeKind::kOp;
  node.type = type;
  node.inputs = inputs;
  node.attrs = std::move(ctx.attrs);  // inference reads the attributes, never writes them
  node.location = location;
  node.placement = placement;
  node.mutable_inputs = def->mutable_inputs;
  // Variadic outputs (more inferred than declared) are named <first>_<i>.
  if (ctx.outputs.size() == def->output_names.size()) {
    node.output_names = def->output_names;
  } else {
    std::string base = def->output_names.empty() ? "out" : def->output_names[0];
    for (size_t i = 0; i < ctx.outputs.size(); ++i) node.output_names.push_back(base + "_" + std::to_string(i));
  }
  node.output_descs = std::move(ctx.outputs);
  for (const auto& d : node.output_descs)
    if (d.dtype == DType::kInvalid || DTypeSize(d.dtype) == 0) return fail(Internal("inference left an output without dtype"));
  return &Append(std::move(node));
}

namespace {
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"') out += '\\';  // labels carry \n line breaks on purpose
    out += c;
  }
  return out;
}
}  // namespace

std::string Graph::ToDot() const {
  std::ostringstream dot;
  dot << "digraph \"" << Escape(job_name_) << "\" {\n  node [shape=box, fontname=monospace];\n";
  for (const Node& n : nodes_) {
    std::string label = n.name + "\\n" + n.type;
    for (size_t i = 0; i < n.output_descs.size(); ++i) label += "\\n" + n.output_names[i] + ": " + n.output_descs[i].ToString();
    if (!n.devices.empty()) {
      label += "\\non " + PlacementOf(n.devices, n.placement.device_type).ToString();
      if (!n.input_sbp.empty() || !n.output_sbp.empty()) {
        label += ": ";
        for (size_t i = 0; i < n.input_sbp.size(); ++i) label += (i ? "," : "") + n.input_sbp[i].ToString();
        label += "->";
        for (size_t i = 0; i < n.output_sbp.size(); ++i) label += (i ? "," : "") + n.output_sbp[i].ToString();
      }
    }
    if (!n.location.empty()) label += "\\n@ " + n.location;
    const char* style = n.kind == NodeKind::kInput ? ", style=filled, fillcolor=lightblue"
                        : n.kind == NodeKind::kVariable ? ", style=filled, fillcolor=lightyellow"
                        : n.type == "boxing" ? ", style=\"filled,bold\", fillcolor=orange" : "";
    dot << "  \"" << Escape(n.name) << "\" [label=\"" << Escape(label) << "\"" << style << "];\n";
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      auto parts = SplitRef(n.inputs[i]);
      if (!parts.ok()) continue;
      bool is_mutable = false;
      for (int m : n.mutable_inputs) is_mutable |= (static_cast<size_t>(m) == i);
      dot << "  \"" << Escape(parts->first) << "\" -> \"" << Escape(n.name) << "\" [label=\"" << Escape(parts->second)
          << "\"" << (is_mutable ? ", color=red" : "") << "];\n";
    }
    for (const auto& c : n.control_inputs) dot << "  \"" << Escape(c) << "\" -> \"" << Escape(n.name) << "\" [style=dashed];\n";
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    auto parts = SplitRef(outputs_[i]);
    if (parts.ok()) dot << "  \"" << Escape(parts->first) << "\" -> \"<output " << i << ">\";\n";
  }
  for (const Watch& w : watches_) {
    auto ref = w.diff ? (gradients_.count(w.ref) ? gradients_.at(w.ref) : "") : w.ref;
    auto parts = SplitRef(ref);
    if (parts.ok()) dot << "  \"" << Escape(parts->first) << "\" -> \"<watch " << Escape(w.handler_name) << ">\";\n";
  }
  dot << "}\n";
  return dot.str();
}

}  // namespace graph
}  // namespace actorflow

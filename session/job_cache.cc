#include "session/job_cache.h"

#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace actorflow {

using graph::Graph;
using graph::Node;

namespace {

// Doubles by their bits: the key must tell 0.1 from 0.1000000001.
std::string Exact(double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return std::to_string(bits);
}

void WriteAttr(std::ostringstream& out, const AttrValue& value) {
  out << value.index() << ':';
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>) {
          out << Exact(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out << v.size() << '"' << v;
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          out << '[';
          for (int64_t x : v) out << x << ',';
          out << ']';
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          out << '[';
          for (double x : v) out << Exact(x) << ',';
          out << ']';
        } else {
          out << v;
        }
      },
      value);
}

}  // namespace

std::string CanonicalJobKey(const Graph& traced, int register_num) {
  std::unordered_map<std::string, size_t> position;
  std::map<std::string, size_t> variable_position;
  for (size_t i = 0; i < traced.nodes().size(); ++i) {
    position.emplace(traced.nodes()[i].name, i);
    if (traced.nodes()[i].kind == graph::NodeKind::kVariable)
      variable_position.emplace(traced.nodes()[i].variable_name, variable_position.size());
  }
  // A name the trace does not define stays itself (it is part of what the job means).
  auto node = [&](const std::string& name) {
    auto it = position.find(name);
    return it == position.end() ? "?" + std::to_string(name.size()) + '"' + name : "#" + std::to_string(it->second);
  };
  auto ref = [&](const std::string& r) {
    const size_t slash = r.rfind('/');
    if (slash == std::string::npos) return node(r);
    return node(r.substr(0, slash)) + r.substr(slash);
  };
  auto variable = [&](const std::string& name) {
    auto it = variable_position.find(name);
    return it == variable_position.end() ? "?" + std::to_string(name.size()) + '"' + name
                                         : "v" + std::to_string(it->second);
  };
  std::ostringstream out;
  out << "job " << traced.job_type() << " devices " << traced.device_num() << " gpus " << traced.gpu_device_num()
      << " machines " << traced.machine_num()
      << " registers " << register_num << '\n';
  for (const Node& n : traced.nodes()) {
    out << static_cast<int>(n.kind) << ' ' << n.type << " (";
    for (const auto& in : n.inputs) out << ref(in) << ' ';
    out << ") control (";
    for (const auto& c : n.control_inputs) out << node(c) << ' ';
    out << ") attrs {";
    for (const auto& [name, value] : n.attrs.values()) {
      out << name << '=';
      WriteAttr(out, value);
      out << ' ';
    }
    out << "} outputs (";
    for (size_t k = 0; k < n.output_names.size(); ++k)
      out << n.output_names[k] << ':' << (k < n.output_descs.size() ? n.output_descs[k].ToString() : "?") << ' ';
    out << ") mutable (";
    for (int m : n.mutable_inputs) out << m << ' ';
    out << ") on " << n.placement.ToString() << " hints (";
    for (const auto& hint : n.output_sbp_hints) out << (hint ? hint->ToString() : "-") << ' ';
    out << ')';
    if (n.kind == graph::NodeKind::kVariable)
      out << " variable " << variable(n.variable_name) << (n.trainable ? " trainable" : "")
          << (n.zeros_if_missing ? " zeros" : "");
    out << '\n';
  }
  out << "feeds";
  for (const auto& f : traced.feeds()) out << ' ' << node(f);
  out << "\noutputs";
  for (const auto& o : traced.outputs()) out << ' ' << ref(o);
  out << "\nlosses";
  for (const auto& l : traced.losses()) out << ' ' << ref(l);
  out << "\nwatches";
  for (const auto& w : traced.watches()) out << ' ' << ref(w.ref) << (w.diff ? ":diff" : "");
  out << '\n';
  if (const graph::OptimizerSpec* o = traced.optimizer()) {
    out << "optimizer " << o->type << ' ' << Exact(o->momentum) << ' ' << Exact(o->beta1) << ' ' << Exact(o->beta2)
        << ' ' << Exact(o->epsilon) << ' ' << Exact(o->decay_rate) << ' ' << Exact(o->weight_decay) << ' '
        << Exact(o->clip_norm) << (o->exact_bias_correction ? " exact" : "") << " (";
    for (const auto& v : o->variables) out << variable(v) << ' ';
    out << ")\n";
  }
  return out.str();
}

std::optional<std::pair<Graph, plan::Plan>> RebindCompiled(const CachedCompile& cached, const Graph& traced) {
  const Graph& before = cached.traced;
  if (before.nodes().size() != traced.nodes().size() || before.watches().size() != traced.watches().size())
    return std::nullopt;
  // Traced names and variables by position; source lines by node.
  std::unordered_map<std::string, size_t> traced_index;
  std::unordered_map<std::string, std::string> variable_map;
  std::unordered_map<std::string, std::string> location_map;  // old line -> new line, if one
  std::unordered_set<std::string> ambiguous_locations;
  for (size_t i = 0; i < before.nodes().size(); ++i) {
    const Node& old_node = before.nodes()[i];
    const Node& new_node = traced.nodes()[i];
    traced_index.emplace(old_node.name, i);
    if (old_node.kind == graph::NodeKind::kVariable) variable_map.emplace(old_node.variable_name, new_node.variable_name);
    auto [it, inserted] = location_map.emplace(old_node.location, new_node.location);
    if (!inserted && it->second != new_node.location) ambiguous_locations.insert(old_node.location);
  }
  // The traced name a compiled name was made from: itself, or its longest prefix ending
  // before a '-' ("d0-grad_1" from "d0"). Returns the position, or -1.
  auto origin = [&](const std::string& name, size_t* cut) -> long {
    if (auto it = traced_index.find(name); it != traced_index.end()) {
      *cut = name.size();
      return static_cast<long>(it->second);
    }
    for (size_t pos = name.rfind('-'); pos != std::string::npos && pos > 0; pos = name.rfind('-', pos - 1)) {
      if (auto it = traced_index.find(name.substr(0, pos)); it != traced_index.end()) {
        *cut = pos;
        return static_cast<long>(it->second);
      }
    }
    return -1;
  };
  auto rename_variable = [&](const std::string& name) {
    if (auto it = variable_map.find(name); it != variable_map.end()) return it->second;
    for (size_t pos = name.rfind('-'); pos != std::string::npos && pos > 0; pos = name.rfind('-', pos - 1))
      if (auto it = variable_map.find(name.substr(0, pos)); it != variable_map.end()) return it->second + name.substr(pos);
    return name;
  };

  // Compiled nodes by position: the new name and line of each, and old name -> position.
  const Graph& compiled = *cached.compiled;
  const size_t count = compiled.nodes().size();
  std::unordered_map<std::string, size_t> compiled_index;
  std::vector<std::string> new_name(count), new_location(count);
  std::unordered_set<std::string> new_names, new_variables, old_variables;
  compiled_index.reserve(count);
  new_names.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const Node& n = compiled.nodes()[i];
    size_t cut = 0;
    const long from = origin(n.name, &cut);
    std::string name = n.name;
    std::string location = n.location;
    if (from >= 0) {
      name = traced.nodes()[from].name + n.name.substr(cut);
      if (n.location == before.nodes()[from].location) location = traced.nodes()[from].location;
    } else if (n.kind == graph::NodeKind::kVariable && rename_variable(n.variable_name) != n.variable_name) {
      name = rename_variable(n.name);
    }
    if (location == n.location && !ambiguous_locations.count(n.location))
      if (auto it = location_map.find(n.location); it != location_map.end()) location = it->second;
    if (!new_names.insert(name).second) return std::nullopt;
    compiled_index.emplace(n.name, i);
    new_name[i] = std::move(name);
    new_location[i] = std::move(location);
    if (n.kind == graph::NodeKind::kVariable && old_variables.insert(n.variable_name).second &&
        !new_variables.insert(rename_variable(n.variable_name)).second)
      return std::nullopt;
  }
  auto rename = [&](const std::string& name) {
    auto it = compiled_index.find(name);
    return it == compiled_index.end() ? name : new_name[it->second];
  };
  auto rename_ref = [&](const std::string& ref) {
    const size_t slash = ref.rfind('/');
    if (slash == std::string::npos) return rename(ref);
    auto it = compiled_index.find(ref.substr(0, slash));
    return (it == compiled_index.end() ? ref.substr(0, slash) : new_name[it->second]) + ref.substr(slash);
  };

  Graph graph(traced.job_name(), compiled.job_type());
  graph.set_device_num(compiled.device_num());
  graph.set_machine_num(compiled.machine_num());
  graph.set_gpu_device_num(compiled.gpu_device_num());
  for (size_t i = 0; i < count; ++i) {
    const Node& n = compiled.nodes()[i];
    Node copy = n;
    copy.name = new_name[i];
    copy.location = new_location[i];
    for (auto& in : copy.inputs) in = rename_ref(in);
    for (auto& c : copy.control_inputs) c = rename(c);
    if (copy.kind == graph::NodeKind::kVariable) copy.variable_name = rename_variable(n.variable_name);
    graph.Append(std::move(copy));
  }
  for (const auto& f : compiled.feeds()) graph.feeds().push_back(rename(f));
  for (const auto& o : compiled.outputs()) graph.outputs().push_back(rename_ref(o));
  for (const auto& l : compiled.losses()) graph.losses().push_back(rename_ref(l));
  std::unordered_map<std::string, std::string> handler_map;
  for (size_t i = 0; i < compiled.watches().size(); ++i) {
    graph::Watch w = compiled.watches()[i];
    const graph::Watch& now = traced.watches()[i];
    handler_map.emplace(w.handler_name, now.handler_name);
    w.ref = rename_ref(w.ref);
    w.handler_name = now.handler_name;
    w.location = now.location;
    graph.watches().push_back(std::move(w));
  }
  if (compiled.optimizer() != nullptr) {
    graph.optimizer() = std::make_unique<graph::OptimizerSpec>(*compiled.optimizer());
    for (auto& v : graph.optimizer()->variables) v = rename_variable(v);
  }
  for (const auto& [forward, gradient] : compiled.gradients())
    graph.gradients()[rename_ref(forward)] = gradient.empty() ? gradient : rename_ref(gradient);

  plan::Plan plan = *cached.plan;
  plan.set_job_name(traced.job_name());
  for (plan::Task& task : *plan.mutable_tasks()) {
    std::string node_name = task.name();
    std::string device_suffix;
    auto node = compiled_index.find(node_name);
    if (node == compiled_index.end()) {
      const size_t at = node_name.rfind('@');
      if (at != std::string::npos) {
        node = compiled_index.find(node_name.substr(0, at));
        if (node != compiled_index.end()) device_suffix = node_name.substr(at);
      }
    }
    if (task.kind() == plan::SINK && !task.sink_name().empty()) {
      auto it = handler_map.find(task.sink_name());
      if (it == handler_map.end()) return std::nullopt;
      task.set_name("watch-" + it->second);
      task.set_sink_name(it->second);
      for (const graph::Watch& w : graph.watches())
        if (w.handler_name == it->second) task.set_source_location(w.location);
    } else if (node != compiled_index.end() && task.kind() != plan::SINK) {
      task.set_name(new_name[node->second] + device_suffix);
      task.set_source_location(new_location[node->second]);
    }
    if (task.kind() == plan::VARIABLE) task.set_variable_name(rename_variable(task.variable_name()));
    for (plan::RegisterDesc& r : *task.mutable_registers())
      for (plan::BlobDesc& b : *r.mutable_blobs()) b.set_name(rename_ref(b.name()));
  }
  return std::make_pair(std::move(graph), std::move(plan));
}

std::shared_ptr<const CachedCompile> JobCache::Find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [k, entry] : entries_)
    if (k == key) return entry;
  return nullptr;
}

void JobCache::Insert(const std::string& key, std::shared_ptr<const CachedCompile> entry) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->first == key) {
      entries_.erase(it);
      break;
    }
  entries_.emplace_back(key, std::move(entry));
  while (entries_.size() > capacity_) entries_.pop_front();
}

void JobCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

size_t JobCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace actorflow

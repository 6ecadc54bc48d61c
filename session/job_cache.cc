#include "session/job_cache.h"

#include "graph/job_key.h"

#include <cstring>
#include <type_traits>
#include <google/protobuf/arena.h>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace actorflow {

using graph::Graph;
using graph::Node;

std::string CanonicalJobKey(const Graph& traced, int register_num) {
  return graph::JobKey(traced, register_num, nullptr);
}

std::string CanonicalJobKey(const graph::JobBuilder& builder, int register_num) {
  return graph::JobKey(builder.graph(), register_num, builder.node_key());
}

// A name of the cached compile as the node it derives from plus the rest of it: a compiled
// node's name "d0-grad_1" is traced node "d0" + "-grad_1", a reference "d0-grad_1/out" is
// compiled node "d0-grad_1" + "/out", a variable "w-momentum" is traced variable "w" +
// "-momentum". `from` < 0: the name does not derive from one and stays as it is.
struct DerivedName {
  int32_t from = -1;
  uint32_t cut = 0;  // where the rest starts in the old name
};

struct RebindIndex {
  // Per compiled node: the traced node (position) its name derives from; for variables, also
  // the traced variable its variable name and (when not derived from a traced node) its node
  // name derive from.
  std::vector<DerivedName> node_origin, node_variable, node_name_as_variable;
  // Per compiled node, its inputs then its control inputs (flattened, `input_begin[i]` to
  // `input_begin[i + 1]`): the compiled node each refers to.
  std::vector<uint32_t> input_begin;
  std::vector<DerivedName> inputs;
  // Old compiled name -> position (feeds, outputs and the other few references of a hit).
  // Flat tables (graph/name_index.h) with their own copies of the keys.
  graph::NameIndex compiled_index;
  // Old traced name -> position: a reference to a traced node the passes fused away (a diff
  // watch's forward ref, a gradient's key) is renamed by its traced node.
  graph::NameIndex traced_index;
  // Per plan task: the compiled node it lowers (and where a device suffix "@1" starts), its
  // variable; per blob (flattened in task, register, blob order): the compiled node.
  std::vector<DerivedName> task_node, task_variable, blobs;

  // What a hit reads instead of the entry's graphs and plan, which are cold in memory by then
  // (thousands of strings spread over the heap): the old names and lines, packed in `text`.
  NameArena text;
  std::vector<std::string_view> locations;  // the distinct old source lines: the ids below
  std::vector<uint32_t> traced_location, watch_location;  // per traced node, per watch
  // Per compiled node: its old name (for a name derived from a traced node, only the rest after
  // that node's name), variable name (variables only) and line, and whether that line is the
  // line of the traced node its name derives from.
  std::vector<std::string_view> node_name, node_variable_name;
  std::vector<uint32_t> node_location;
  std::vector<bool> node_is_variable, node_line_of_origin;
  // Per plan task: its kind, old name (for a task named after its compiled node, only the rest
  // after that node's name), line, variable name (VARIABLE tasks) and handler name (watch sinks).
  std::vector<plan::TaskKind> task_kind;
  std::vector<std::string_view> task_name, task_variable_name, task_sink_name;
  std::vector<uint32_t> task_location;
};

namespace {

// What RebindCompiled needs of `cached` whatever the new job's names are.
std::shared_ptr<const RebindIndex> BuildRebindIndex(const CachedCompile& cached) {
  const Graph& before = cached.traced;
  const Graph& compiled = *cached.compiled;
  auto index = std::make_shared<RebindIndex>();
  graph::NameIndex& traced_index = index->traced_index;
  graph::NameIndex variable_position;
  traced_index.Reserve(before.nodes().size());
  for (size_t i = 0; i < before.nodes().size(); ++i) {
    const Node& n = before.nodes()[i];
    traced_index.Insert(n.name, i);
    if (n.kind == graph::NodeKind::kVariable) variable_position.Insert(n.variable_name, i);
  }
  constexpr size_t kNone = graph::NameIndex::kNone;
  // The name itself, or its longest prefix ending before a '-' ("d0-grad_1" from "d0").
  auto derive = [](const graph::NameIndex& names, const std::string& name) {
    if (const size_t at = names.Find(name); at != kNone)
      return DerivedName{static_cast<int32_t>(at), static_cast<uint32_t>(name.size())};
    for (size_t pos = name.rfind('-'); pos != std::string::npos && pos > 0; pos = name.rfind('-', pos - 1))
      if (const size_t at = names.Find(std::string_view(name).substr(0, pos)); at != kNone)
        return DerivedName{static_cast<int32_t>(at), static_cast<uint32_t>(pos)};
    return DerivedName{};
  };
  const size_t count = compiled.nodes().size();
  index->compiled_index.Reserve(count);
  for (size_t i = 0; i < count; ++i) index->compiled_index.Insert(compiled.nodes()[i].name, i);
  // A reference "node/output" or a node name: the compiled node and where the rest starts.
  auto ref = [&](const std::string& r) {
    const size_t slash = r.rfind('/');
    const size_t end = slash == std::string::npos ? r.size() : slash;
    const size_t at = index->compiled_index.Find(std::string_view(r).substr(0, end));
    return at == kNone ? DerivedName{} : DerivedName{static_cast<int32_t>(at), static_cast<uint32_t>(end)};
  };
  // Besides, the packed copies a hit reads: the old names and lines.
  InternedLines lines(index->text);
  auto location = [&](const std::string& line) { return lines.Id(line); };  // index->locations at the end
  for (const Node& n : before.nodes()) index->traced_location.push_back(location(n.location));
  for (const graph::Watch& w : before.watches()) index->watch_location.push_back(location(w.location));
  index->node_origin.resize(count);
  index->node_variable.resize(count);
  index->node_name_as_variable.resize(count);
  index->input_begin.reserve(count + 1);
  index->node_name.reserve(count);
  index->node_variable_name.resize(count);
  index->node_location.reserve(count);
  index->node_is_variable.resize(count);
  index->node_line_of_origin.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const Node& n = compiled.nodes()[i];
    const DerivedName origin = derive(traced_index, n.name);
    index->node_origin[i] = origin;
    index->node_name.push_back(index->text.Concat(origin.from >= 0 ? std::string_view(n.name).substr(origin.cut) : n.name));
    index->node_location.push_back(location(n.location));
    index->node_line_of_origin[i] = origin.from >= 0 && n.location == before.nodes()[origin.from].location;
    if (n.kind == graph::NodeKind::kVariable) {
      index->node_variable[i] = derive(variable_position, n.variable_name);
      index->node_name_as_variable[i] = derive(variable_position, n.name);
      index->node_is_variable[i] = true;
      index->node_variable_name[i] = index->text.Concat(n.variable_name);
    }
    index->input_begin.push_back(static_cast<uint32_t>(index->inputs.size()));
    for (const std::string& in : n.inputs) index->inputs.push_back(ref(in));
    for (const std::string& c : n.control_inputs) {
      const size_t at = index->compiled_index.Find(c);
      index->inputs.push_back(at == kNone ? DerivedName{}
                                          : DerivedName{static_cast<int32_t>(at), static_cast<uint32_t>(c.size())});
    }
  }
  index->input_begin.push_back(static_cast<uint32_t>(index->inputs.size()));
  const plan::Plan& plan = *cached.plan;
  const size_t tasks = static_cast<size_t>(plan.tasks_size());
  index->task_node.resize(tasks);
  index->task_variable.resize(tasks);
  index->task_kind.reserve(tasks);
  index->task_name.reserve(tasks);
  index->task_variable_name.resize(tasks);
  index->task_sink_name.resize(tasks);
  index->task_location.reserve(tasks);
  for (size_t t = 0; t < tasks; ++t) {
    const plan::Task& task = plan.tasks(static_cast<int>(t));
    const std::string& name = task.name();
    if (const size_t node = index->compiled_index.Find(name); node != kNone) {
      index->task_node[t] = DerivedName{static_cast<int32_t>(node), static_cast<uint32_t>(name.size())};
    } else if (const size_t at = name.rfind('@'); at != std::string::npos) {
      if (const size_t base = index->compiled_index.Find(std::string_view(name).substr(0, at)); base != kNone)
        index->task_node[t] = DerivedName{static_cast<int32_t>(base), static_cast<uint32_t>(at)};
    }
    index->task_kind.push_back(task.kind());
    const DerivedName node = index->task_node[t];
    index->task_name.push_back(index->text.Concat(
        node.from >= 0 && task.kind() != plan::SINK ? std::string_view(name).substr(node.cut) : name));
    index->task_location.push_back(location(task.source_location()));
    if (task.kind() == plan::VARIABLE) {
      index->task_variable[t] = derive(variable_position, task.variable_name());
      index->task_variable_name[t] = index->text.Concat(task.variable_name());
    }
    if (task.kind() == plan::SINK) index->task_sink_name[t] = index->text.Concat(task.sink_name());
    for (const plan::RegisterDesc& r : task.registers())
      for (const plan::BlobDesc& b : r.blobs()) index->blobs.push_back(ref(b.name()));
  }
  index->locations = lines.TakeLines();
  return index;
}

}  // namespace

void PrepareRebind(const CachedCompile& cached) {
  std::call_once(cached.index_once, [&] { cached.index = BuildRebindIndex(cached); });
}

namespace {

// A reference of the cached compile ("node/output" or a node name) under the new names: a
// compiled node by its new name, a traced node the passes fused away by the new trace's name.
std::string RenameRef(const RebindIndex& index, const JobNames& names, const std::string& ref) {
  const size_t slash = ref.rfind('/');
  const size_t end = slash == std::string::npos ? ref.size() : slash;
  const std::string_view node = std::string_view(ref).substr(0, end);
  if (const size_t at = index.compiled_index.Find(node); at != graph::NameIndex::kNone)
    return std::string(names.node_names[at]).append(ref, end);
  if (const size_t at = index.traced_index.Find(node); at != graph::NameIndex::kNone)
    return std::string(names.traced_names[at]).append(ref, end);
  return ref;
}

}  // namespace

std::shared_ptr<const JobNames> BindNames(const CachedCompile& cached, const Graph& traced) {
  const Graph& before = cached.traced;
  if (before.nodes().size() != traced.nodes().size() || before.watches().size() != traced.watches().size())
    return nullptr;
  PrepareRebind(cached);
  // Read from here on: the index (packed) and the new trace, not the entry's graphs and plan.
  const RebindIndex& index = *cached.index;
  auto names = std::make_shared<JobNames>();
  NameArena& text = names->text;
  names->job_name = traced.job_name();
  // The new trace's lines, each distinct one stored once.
  InternedLines stored_lines(text);
  auto store_line = [&](std::string_view line) { return stored_lines.Store(line); };
  const size_t traced_count = traced.nodes().size();
  names->traced_names.resize(traced_count);
  names->traced_variable_names.resize(traced_count);
  std::vector<std::string_view> traced_locations(traced_count);
  for (size_t i = 0; i < traced_count; ++i) {
    const Node& n = traced.nodes()[i];
    names->traced_names[i] = text.Concat(n.name);
    if (n.kind == graph::NodeKind::kVariable) names->traced_variable_names[i] = text.Concat(n.variable_name);
    traced_locations[i] = store_line(n.location);
  }
  names->traced_watches = traced.watches();
  // Old lines (by id) -> new lines: where an old line maps to one new line, that one; otherwise
  // (several, or a line no traced node or watch had) it stays.
  enum : uint8_t { kUnmapped, kMapped, kAmbiguous };
  std::vector<uint8_t> line_state(index.locations.size(), kUnmapped);
  std::vector<std::string_view> new_line(index.locations.size());
  auto map_line = [&](uint32_t old_line, std::string_view line) {
    if (line_state[old_line] == kUnmapped) {
      line_state[old_line] = kMapped;
      new_line[old_line] = line;
    } else if (line_state[old_line] == kMapped && new_line[old_line] != line) {
      line_state[old_line] = kAmbiguous;
    }
  };
  for (size_t i = 0; i < traced_count; ++i) map_line(index.traced_location[i], traced_locations[i]);
  // Watches' lines too: the passes give nodes made for a watch_diff the watch's line.
  for (size_t i = 0; i < traced.watches().size(); ++i)
    map_line(index.watch_location[i], store_line(traced.watches()[i].location));
  // An old line as it was (tasks made for no traced node keep theirs), stored once.
  std::vector<std::string_view> kept_lines(index.locations.size());
  std::vector<bool> kept(index.locations.size());
  auto kept_line = [&](uint32_t id) {
    if (!kept[id]) {
      kept[id] = true;
      kept_lines[id] = text.Concat(index.locations[id]);
    }
    return kept_lines[id];
  };
  for (size_t id = 0; id < new_line.size(); ++id)
    if (line_state[id] != kMapped) new_line[id] = kept_line(static_cast<uint32_t>(id));
  // A derived name under the new job's names: the new traced node's name (or variable name)
  // and the rest of the old name.
  auto traced_name = [&](const DerivedName& d, std::string_view rest) {
    return text.Concat(names->traced_names[d.from], rest);
  };
  auto variable_name = [&](const DerivedName& d, std::string_view old) {
    return d.from < 0 ? text.Concat(old) : text.Concat(names->traced_variable_names[d.from], old.substr(d.cut));
  };

  // Compiled nodes by position: the new name and line of each.
  const size_t count = index.node_name.size();
  std::vector<std::string_view>& new_name = names->node_names;
  std::vector<std::string_view>& new_location = names->node_locations;
  new_name.resize(count);
  new_location.resize(count);
  names->variable_names.resize(count);
  // Sets of names (the positions unused): a duplicate makes the renaming ambiguous.
  graph::NameIndex new_names, new_variables, old_variables;
  new_names.Reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const DerivedName from = index.node_origin[i];
    const std::string_view old_name = index.node_name[i];  // the rest only, when derived
    const std::string_view old_variable = index.node_variable_name[i];
    const bool is_variable = index.node_is_variable[i];
    std::string_view variable;
    if (is_variable) variable = variable_name(index.node_variable[i], old_variable);
    if (from.from >= 0) {
      new_name[i] = traced_name(from, old_name);
    } else if (is_variable && variable != old_variable) {
      new_name[i] = variable_name(index.node_name_as_variable[i], old_name);
    } else {
      new_name[i] = text.Concat(old_name);
    }
    if (!new_names.Insert(new_name[i], 0)) return nullptr;
    // A node keeps the line of the traced node it derives from where it had that one's line.
    const uint32_t line = index.node_location[i];
    new_location[i] = index.node_line_of_origin[i] && traced_locations[from.from] != index.locations[line]
                          ? traced_locations[from.from]
                          : new_line[line];
    if (is_variable) {
      names->variable_names[i] = variable;
      if (old_variables.Insert(old_variable, 0) && !new_variables.Insert(variable, 0)) return nullptr;
    }
  }
  const Graph& compiled = *cached.compiled;
  for (const auto& f : compiled.feeds()) names->feeds.push_back(RenameRef(index, *names, f));
  for (const auto& o : compiled.outputs()) names->outputs.push_back(RenameRef(index, *names, o));
  for (size_t i = 0; i < compiled.watches().size(); ++i)
    names->handlers.emplace(compiled.watches()[i].handler_name, traced.watches()[i].handler_name);

  // Per task: what RenamedPlan writes into the copy's name, source line, sink and variable.
  const size_t tasks = index.task_name.size();
  PlanNames& table = names->tasks;
  table.job_name = traced.job_name();
  table.task_names.resize(tasks);
  table.source_locations.resize(tasks);
  names->sink_names.resize(tasks);
  names->task_variable_names.resize(tasks);
  for (size_t t = 0; t < tasks; ++t) {
    const plan::TaskKind kind = index.task_kind[t];
    const DerivedName node = index.task_node[t];
    const std::string_view old_name = index.task_name[t];
    std::string_view& name = table.task_names[t];
    std::string_view& location = table.source_locations[t];
    if (kind == plan::SINK && !index.task_sink_name[t].empty()) {
      auto it = names->handlers.find(std::string(index.task_sink_name[t]));
      if (it == names->handlers.end()) return nullptr;
      name = text.Concat("watch-", it->second);
      names->sink_names[t] = text.Concat(it->second);
      location = kept_line(index.task_location[t]);
      for (size_t w = 0; w < traced.watches().size(); ++w)
        if (traced.watches()[w].handler_name == it->second) location = store_line(traced.watches()[w].location);
    } else if (node.from >= 0 && kind != plan::SINK) {
      name = old_name.empty() ? new_name[node.from] : text.Concat(new_name[node.from], old_name);  // the rest
      location = new_location[node.from];
    } else {
      name = text.Concat(old_name);
      location = kept_line(index.task_location[t]);
    }
    if (kind == plan::VARIABLE)
      names->task_variable_names[t] = variable_name(index.task_variable[t], index.task_variable_name[t]);
  }
  return names;
}

Graph RenamedGraph(const CachedCompile& cached, const JobNames& names) {
  const RebindIndex& index = *cached.index;
  const Graph& before = cached.traced;
  const Graph& compiled = *cached.compiled;
  const size_t count = compiled.nodes().size();
  auto renamed = [&](const DerivedName& d, const std::string& old) {
    return d.from < 0 ? old : std::string(names.node_names[d.from]).append(old, d.cut);
  };
  // Variables outside nodes and tasks (the optimizer's list): as BuildRebindIndex derives them.
  std::unordered_map<std::string_view, size_t> variable_position;
  auto rename_variable = [&](const std::string& name) {
    if (variable_position.empty())
      for (size_t i = 0; i < before.nodes().size(); ++i)
        if (before.nodes()[i].kind == graph::NodeKind::kVariable)
          variable_position.emplace(before.nodes()[i].variable_name, i);
    if (auto it = variable_position.find(name); it != variable_position.end())
      return std::string(names.traced_variable_names[it->second]);
    for (size_t pos = name.rfind('-'); pos != std::string::npos && pos > 0; pos = name.rfind('-', pos - 1))
      if (auto it = variable_position.find(std::string_view(name).substr(0, pos)); it != variable_position.end())
        return std::string(names.traced_variable_names[it->second]).append(name, pos);
    return name;
  };

  Graph graph(names.job_name, compiled.job_type());
  graph.set_device_num(compiled.device_num());
  graph.set_machine_num(compiled.machine_num());
  graph.set_gpu_device_num(compiled.gpu_device_num());
  graph.Reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const Node& n = compiled.nodes()[i];
    Node copy = n;
    copy.name = names.node_names[i];
    copy.location = names.node_locations[i];
    const DerivedName* in = index.inputs.data() + index.input_begin[i];
    for (auto& r : copy.inputs) r = renamed(*in++, r);
    for (auto& c : copy.control_inputs) c = renamed(*in++, c);
    if (copy.kind == graph::NodeKind::kVariable) copy.variable_name = names.variable_names[i];
    graph.Append(std::move(copy));
  }
  graph.feeds() = names.feeds;
  graph.outputs() = names.outputs;
  for (const auto& l : compiled.losses()) graph.losses().push_back(RenameRef(index, names, l));
  for (size_t i = 0; i < compiled.watches().size(); ++i) {
    graph::Watch w = compiled.watches()[i];
    const graph::Watch& now = names.traced_watches[i];
    w.ref = RenameRef(index, names, w.ref);
    w.handler_name = now.handler_name;
    w.location = now.location;
    graph.watches().push_back(std::move(w));
  }
  if (compiled.optimizer() != nullptr) {
    graph.optimizer() = std::make_unique<graph::OptimizerSpec>(*compiled.optimizer());
    for (auto& v : graph.optimizer()->variables) v = rename_variable(v);
  }
  for (const auto& [forward, gradient] : compiled.gradients())
    graph.gradients()[RenameRef(index, names, forward)] = gradient.empty() ? gradient : RenameRef(index, names, gradient);
  return graph;
}

std::shared_ptr<const plan::Plan> RenamedPlan(const CachedCompile& cached, const JobNames& names) {
  const RebindIndex& index = *cached.index;
  // The renamed copy of the plan lives in an arena: thousands of small messages and strings
  // bump-allocated (and freed) at once instead of one malloc each; the arena goes with the
  // last holder of the plan.
  auto arena = std::make_shared<google::protobuf::Arena>();
  plan::Plan& plan = *google::protobuf::Arena::CreateMessage<plan::Plan>(arena.get());
  plan.CopyFrom(*cached.plan);
  plan.set_job_name(names.job_name);
  const DerivedName* blob = index.blobs.data();
  for (int t = 0; t < plan.tasks_size(); ++t) {
    plan::Task& task = *plan.mutable_tasks(t);
    task.set_name(std::string(names.tasks.task_names[t]));
    task.set_source_location(std::string(names.tasks.source_locations[t]));
    if (task.kind() == plan::SINK && !task.sink_name().empty()) task.set_sink_name(std::string(names.sink_names[t]));
    if (task.kind() == plan::VARIABLE) task.set_variable_name(std::string(names.task_variable_names[t]));
    for (plan::RegisterDesc& r : *task.mutable_registers())
      for (plan::BlobDesc& b : *r.mutable_blobs()) {
        const DerivedName d = *blob++;
        if (d.from >= 0) b.set_name(std::string(names.node_names[d.from]).append(b.name(), d.cut));
      }
  }
  return std::shared_ptr<const plan::Plan>(arena, &plan);
}

std::optional<std::pair<Graph, std::shared_ptr<const plan::Plan>>> RebindCompiled(const CachedCompile& cached,
                                                                                  const Graph& traced) {
  std::shared_ptr<const JobNames> names = BindNames(cached, traced);
  if (names == nullptr) return std::nullopt;
  return std::make_pair(RenamedGraph(cached, *names), RenamedPlan(cached, *names));
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

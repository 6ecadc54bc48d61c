// JobCache: compiled plans by the structure of the traced job, so a second job function that
// traces the same job up to names (same ops, attributes, shapes, placements, hints, feeds,
// outputs, optimizer, device count and register count; any op, variable, watch or job names and
// source lines) reuses the first one's compiled graph and plan instead of running the passes.
//
// The key is the job's canonical text (graph/job_key.h): every node by its position in the
// trace instead of its name, variables by the position of their first node, watches by
// position; the cache compares the whole text, not only a hash of it. A hit is named by the new job (BindNames): traced nodes by
// position, nodes the passes made from them ("<op>-grad", "<variable>-update", an optimizer
// state "<variable>-m") by the traced name they start with, variables and watch handlers by the
// same correspondence, so the new job's variables are bound by its own names. The hit shares the
// entry's immutable plan with the runtime, which reports the job's task names and lines from a
// table (PlanNames); each job still gets its own runtime, registers and variables. Copies of the
// graph and plan under the new names (RenamedGraph, RenamedPlan) are made only when read.
// Where the renaming cannot be trusted (two nodes would get one name) the caller compiles.
//
// Thread-safety: JobCache is synchronized; the free functions are pure.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <vector>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "actors/proto/plan.pb.h"
#include "actors/runtime.h"
#include "graph/graph.h"
#include "graph/job_builder.h"
#include "session/name_table.h"

namespace actorflow {

// Where every name of a cached compile comes from, found once per entry (on its first hit) so
// that each later hit only concatenates names instead of looking each one up by string.
struct RebindIndex;

struct CachedCompile {
  graph::Graph traced;  // the trace it was compiled from (names and lines of the first job)
  // After the passes, and the plan: shared with the first job (CompiledJob), never changed.
  std::shared_ptr<const graph::Graph> compiled;
  std::shared_ptr<const plan::Plan> plan;
  // Built by PrepareRebind (a pure function of the three above), at the latest on the first hit.
  mutable std::once_flag index_once;
  mutable std::shared_ptr<const RebindIndex> index;
};

// The canonical text of `traced` compiled with `register_num` registers (see above).
std::string CanonicalJobKey(const graph::Graph& traced, int register_num);
// The same key, from the node part the builder wrote as the trace grew where it has one.
std::string CanonicalJobKey(const graph::JobBuilder& builder, int register_num);

// `cached` (compiled from a job with the same key as `traced`) under the names, variables, watch
// handlers and source lines of `traced`; std::nullopt when a name would be ambiguous.
// Finds, once per entry, where each name of `cached` comes from (what every hit needs whatever
// its names): the session calls it when it stores an entry, so a hit only renames.
void PrepareRebind(const CachedCompile& cached);

// The names a job gives a cached compile (what RebindCompiled writes into its copies), found
// without copying the compiled graph or the plan: a hit shares the entry's plan with the runtime
// and hands it these names (the runtime's table, PlanNames), and builds the renamed copies only
// when someone asks for them (RenamedGraph, RenamedPlan). Immutable once made. Every view below
// is into `text` (names made from the new trace, and copies of the old names kept as they were),
// so a JobNames needs nothing else alive; an aliasing shared_ptr to `tasks` keeps it alive.
struct JobNames {
  std::string job_name;
  NameArena text;  // the characters of every view below
  // Per compiled node (position): its name, source line and, for variables, variable name.
  std::vector<std::string_view> node_names, node_locations, variable_names;
  // Per plan task: its name and source line (the runtime's table), a watch sink's handler
  // name ("" for other tasks) and a VARIABLE task's variable name ("" for others).
  PlanNames tasks;
  std::vector<std::string_view> sink_names, task_variable_names;
  // The compiled job's watch handler names -> this job's; feeds and outputs renamed.
  std::unordered_map<std::string, std::string> handlers;
  std::vector<std::string> feeds, outputs;
  // Of the new trace, what the renamed copies need besides: per traced node its name and (for
  // variables) variable name, and its watches.
  std::vector<std::string_view> traced_names, traced_variable_names;
  std::vector<graph::Watch> traced_watches;
};

// `cached` (compiled from a job with the same key as `traced`) named by `traced`; null when a
// name would be ambiguous (two nodes or variables one name): the caller compiles instead.
std::shared_ptr<const JobNames> BindNames(const CachedCompile& cached, const graph::Graph& traced);
// The copies of `cached`'s compiled graph and plan under `names` (from BindNames on `cached`).
graph::Graph RenamedGraph(const CachedCompile& cached, const JobNames& names);
std::shared_ptr<const plan::Plan> RenamedPlan(const CachedCompile& cached, const JobNames& names);

// BindNames, then both copies. The plan is immutable from here on (shared with the runtime).
std::optional<std::pair<graph::Graph, std::shared_ptr<const plan::Plan>>> RebindCompiled(const CachedCompile& cached,
                                                                                         const graph::Graph& traced);

class JobCache {
 public:
  explicit JobCache(size_t capacity = 16) : capacity_(capacity) {}
  // The entry compiled under `key`, or null. The entry stays valid while the pointer is held.
  std::shared_ptr<const CachedCompile> Find(const std::string& key) const;
  // Keeps the `capacity` most recently inserted entries.
  void Insert(const std::string& key, std::shared_ptr<const CachedCompile> entry);
  void Clear();
  size_t size() const;

 private:
  mutable std::mutex mu_;
  size_t capacity_;
  std::deque<std::pair<std::string, std::shared_ptr<const CachedCompile>>> entries_;  // oldest first
};

}  // namespace actorflow

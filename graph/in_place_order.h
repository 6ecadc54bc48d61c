// In-place write ordering over a plan: which tasks read the registers some task writes in
// place, and the control edges that run each writer after those readers (graph/lowering.cc
// uses them; VerifyInPlaceOrder, declared in passes.h, checks every plan).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "actors/proto/plan.pb.h"
#include "graph/chain_labels.h"
#include "graph/plan_tasks.h"

namespace actorflow {
namespace graph {

// Parents of every node of a DAG in one array: node t's are parents[begin[t] .. begin[t + 1]).
// One allocation for the whole graph instead of a vector per node, and the walks over every
// node's parents (chain labels: a few sweeps) read it in order.
struct ParentRows {
  std::vector<int> begin{0};  // size() == nodes + 1
  std::vector<int> parents;
  // Closes the current node's row (its parents were pushed onto `parents`).
  void EndRow() { begin.push_back(static_cast<int>(parents.size())); }
  int size() const { return static_cast<int>(begin.size()) - 1; }
};

// Exact ancestry in a DAG whose nodes are numbered in topological order, for the few pairs the
// in-place ordering asks about (a writer and the readers of what it writes): chain labels
// (graph/chain_labels.h) answer most questions in O(chains); the rest search up from the node
// through parents numbered above the candidate ancestor (nothing numbered below it can lie on a
// path from it). Linear memory; time linear in the graph plus what the searches visit, which
// on the compiler's graphs is a few nodes per question (an earlier version kept a bit per
// (node, reader) pair: quadratic in the job's size).
class AncestorIndex {
 public:
  // parents[t] / rows' row t: t's parents, each numbered below t.
  explicit AncestorIndex(ParentRows rows);
  explicit AncestorIndex(const std::vector<std::vector<int>>& parents);
  // A control edge from `parent` to `child` added after construction (parent < child). The
  // labels were computed without it: still sound (they only miss paths), the search sees it.
  void AddEdge(int child, int parent);
  // Whether `ancestor` is a strict ancestor of `node`.
  bool IsAncestor(int ancestor, int node);

 private:
  ParentRows rows_;
  // Edges added after construction, per child a list chained through added_next_ (-1 ends it);
  // added_head_ stays empty until the first one.
  std::vector<int> added_head_, added_parent_, added_next_;
  ChainLabels labels_;
  std::vector<int> visited_;  // search generation per node
  std::vector<int> stack_;
  int generation_ = 0;
};

// Each in-place writer runs after every task reading the bytes of the register it writes, in
// the same iteration: `add_control(writer, reader)` for each reader not already its ancestor.
// The ordering pass guarantees it for one device; spread over several, readers on other
// devices (a boxing slicing a variable, another device's matmul reading the shared buffer) get
// their control edge here. Readers and writers of disjoint parts (InputDesc.part: the shards of
// a variable stored split) need none. Tasks are in topological order.
void OrderInPlaceWriters(plan::Plan& plan, const std::function<void(plan::Task*, int)>& add_control);

}  // namespace graph
}  // namespace actorflow

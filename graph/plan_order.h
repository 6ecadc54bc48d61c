// PlanOrder: which acts of a plan happen before which (the facts register memory planning rests
// on; graph/memory_plan.h says why they hold in the actor runtime), in time and memory linear
// in the tasks and edges.
//
//  - Before(u, t): u(i) happens before t(i) (u is a strict ancestor of t through data or control
//    edges; edges from read-only variables carry no messages and count for nothing).
//  - BeforeNext(c, t): c(i) happens before t(i + 1): some task p that is t or an ancestor of t
//    has a single register that some reader r reads (a back edge: r(i) acks before p writes
//    for i + 1), and c is r or an ancestor of r. With Plan.serial_iterations, always.
//
// Exact answers to these would take a bit per task pair (tasks^2 / 8 bytes per relation). These
// answers are sufficient conditions: a "true" is always right, a "false" may be a fact this
// representation cannot see (the planner then shares less, never wrongly). They come from a
// few chains (paths through the graph, the longest first): for each chain and task, the last
// chain position at or above the task and the first at or below it, so u is an ancestor of t
// when u reaches a chain position that reaches t; direct parents and back edges of t and of its
// parents are asked about exactly. On the graphs the compiler emits (a forward and a backward
// spine with weight-gradient and update branches) the longest path carries nearly all of it.
//
// Thread-safety: immutable after Of(); reads from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/status.h"
#include "actors/proto/plan.pb.h"
#include "graph/chain_labels.h"
#include "graph/plan_tasks.h"

namespace actorflow {
namespace graph {

class PlanOrder {
 public:
  // Internal error if a task reads a task that is not before it in the plan (not topological)
  // or a register its producer does not have.
  static StatusOr<PlanOrder> Of(const plan::Plan& plan);
  // The same from `tasks`, read from `plan` (whose names and serial_iterations it reads).
  static StatusOr<PlanOrder> Of(const plan::Plan& plan, const PlanTasks& tasks);

  int size() const { return n_; }
  bool Before(int u, int t) const;
  bool BeforeNext(int c, int t) const;
  // Whether t(i + 1) waits for some act of iteration i (exact).
  bool AnyBeforeNext(int t) const { return serial_ || has_back_edge_above_[t] != 0; }
  // The tasks reading register `reg` of task `t` through edges (data or control), ascending.
  struct Range {
    const int* first;
    const int* last;
    const int* begin() const { return first; }
    const int* end() const { return last; }
    bool empty() const { return first == last; }
    size_t size() const { return static_cast<size_t>(last - first); }
    int back() const { return last[-1]; }
  };
  Range Readers(int t, int reg) const {
    const int r = register_base_[t] + reg;
    return Range{readers_.data() + reader_begin_[r], readers_.data() + reader_begin_[r + 1]};
  }
  Range Parents(int t) const { return Range{parents_.data() + parent_begin_[t], parents_.data() + parent_begin_[t + 1]}; }

 private:
  // Whether c reads a single register of p (a back edge p -> c).
  bool ReadsSingleRegisterOf(int c, int p) const;

  int n_ = 0;
  bool serial_ = false;
  std::vector<int> register_base_;                  // task -> index of its first register
  std::vector<char> single_;                        // register index -> a back edge source
  std::vector<int> reader_begin_, readers_;         // register index -> readers (CSR, ascending)
  std::vector<int> parent_begin_, parents_;         // task -> parents (CSR, ascending)
  ChainLabels labels_;
  // [chain * n + task]: the largest `above` of a reader of a back edge from the task or an
  // ancestor (-1: none).
  std::vector<int> reach_;
  std::vector<char> has_back_edge_above_;
};

}  // namespace graph
}  // namespace actorflow

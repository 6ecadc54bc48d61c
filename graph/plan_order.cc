#include "graph/plan_order.h"

#include <algorithm>
#include <limits>
#include <string>

namespace actorflow {
namespace graph {
namespace {

// Chains taken (fewer when a further one would add fewer than kLeastNewTasks tasks). Each costs
// three ints per task and a sweep over the edges.
constexpr int kMostChains = 4;
constexpr int kLeastNewTasks = 2;

bool Contains(PlanOrder::Range range, int value) { return std::binary_search(range.begin(), range.end(), value); }

}  // namespace

StatusOr<PlanOrder> PlanOrder::Of(const plan::Plan& plan) {
  AF_ASSIGN_OR_RETURN(const PlanTasks tasks, PlanTasks::Of(plan));
  return Of(plan, tasks);
}

StatusOr<PlanOrder> PlanOrder::Of(const plan::Plan& plan, const PlanTasks& tasks) {
  PlanOrder order;
  const int n = tasks.size();
  order.n_ = n;
  order.serial_ = plan.serial_iterations();
  order.register_base_.resize(n + 1);
  for (int t = 0; t <= n; ++t) order.register_base_[t] = tasks.register_begin(t);
  const int registers = order.register_base_[n];
  order.single_.assign(registers, 0);
  for (int t = 0; t < n; ++t) {
    if (tasks.read_only_variable(t)) continue;
    const bool variable = (tasks.task_flags(t) & PlanTasks::kVariable) != 0;
    for (int r = order.register_base_[t]; r < order.register_base_[t + 1]; ++r)
      order.single_[r] = variable || tasks.register_num(r) <= 1 ? 1 : 0;
  }

  // The edges that order acts: (register index, reader) and (parent, child), counted, then filled.
  std::vector<std::pair<int, int>> reads;  // (register index, reader), readers ascending
  std::vector<int> parent_count(n, 0);
  reads.reserve(static_cast<size_t>(n) * 2);
  std::vector<int> last_child_of(n, -1);   // dedupes a parent per child
  std::vector<int> parent_of_edge;
  for (int t = 0; t < n; ++t) {
    for (int i = tasks.input_begin(t); i < tasks.input_begin(t + 1); ++i) {
      const int p = tasks.producer(i);
      if (p < 0 || p >= t)
        return Internal("plan '" + plan.job_name() + "': task '" + plan.tasks(t).name() + "' reads task #" +
                        std::to_string(plan.tasks(t).inputs(i - tasks.input_begin(t)).producer_task_id()) +
                        ", which is not before it");
      // A read-only variable's readers read its buffer directly: no message, no order.
      if (tasks.read_only_variable(p)) continue;
      const int reg = tasks.producer_register(i);
      if (reg < 0 || reg >= tasks.registers(p))
        return Internal("plan '" + plan.job_name() + "': task '" + plan.tasks(t).name() + "' reads register " +
                        std::to_string(reg) + " of task '" + plan.tasks(p).name() + "'");
      reads.emplace_back(order.register_base_[p] + reg, t);
      if (last_child_of[p] != t) {
        last_child_of[p] = t;
        parent_of_edge.push_back(p);
        ++parent_count[t];
      }
    }
  }
  order.parent_begin_.assign(n + 1, 0);
  for (int t = 0; t < n; ++t) order.parent_begin_[t + 1] = order.parent_begin_[t] + parent_count[t];
  order.parents_ = std::move(parent_of_edge);  // already grouped by child, children ascending
  for (int t = 0; t < n; ++t)
    std::sort(order.parents_.begin() + order.parent_begin_[t], order.parents_.begin() + order.parent_begin_[t + 1]);

  order.reader_begin_.assign(registers + 1, 0);
  for (const auto& [reg, reader] : reads) ++order.reader_begin_[reg + 1];
  for (int r = 0; r < registers; ++r) order.reader_begin_[r + 1] += order.reader_begin_[r];
  order.readers_.resize(reads.size());
  {
    std::vector<int> fill(order.reader_begin_.begin(), order.reader_begin_.end() - 1);
    for (const auto& [reg, reader] : reads) order.readers_[fill[reg]++] = reader;  // readers ascending
    // Drop repeats (a task reading one register twice), compacting the lists.
    std::vector<int> begin(registers + 1, 0);
    int out = 0;
    for (int r = 0; r < registers; ++r) {
      begin[r] = out;
      for (int k = order.reader_begin_[r]; k < order.reader_begin_[r + 1]; ++k)
        if (out == begin[r] || order.readers_[out - 1] != order.readers_[k]) order.readers_[out++] = order.readers_[k];
    }
    begin[registers] = out;
    order.readers_.resize(out);
    order.reader_begin_ = std::move(begin);
  }

  order.labels_ = ChainLabels::Of(n, [&order](int t) { return order.Parents(t); }, kMostChains, kLeastNewTasks);
  order.reach_.assign(static_cast<size_t>(order.labels_.chains) * n, -1);
  order.has_back_edge_above_.assign(n, 0);
  // Back edges: a reader r of a single register of p; r(i) before p(i + 1), so every c at or
  // above r comes before p's next act and its descendants' (reach: the chain position of r).
  for (int t = 0; t < n; ++t) {
    for (int p : order.Parents(t)) order.has_back_edge_above_[t] |= order.has_back_edge_above_[p];
    for (int k = 0; k < order.labels_.chains; ++k) {
      int* reach = &order.reach_[static_cast<size_t>(k) * n];
      const int* above = &order.labels_.above[static_cast<size_t>(k) * n];
      for (int p : order.Parents(t)) reach[t] = std::max(reach[t], reach[p]);
      for (int r = order.register_base_[t]; r < order.register_base_[t + 1]; ++r) {
        if (!order.single_[r]) continue;
        for (int k2 = order.reader_begin_[r]; k2 < order.reader_begin_[r + 1]; ++k2)
          reach[t] = std::max(reach[t], above[order.readers_[k2]]);
      }
    }
    for (int r = order.register_base_[t]; r < order.register_base_[t + 1]; ++r)
      if (order.single_[r] && order.reader_begin_[r] < order.reader_begin_[r + 1]) order.has_back_edge_above_[t] = 1;
  }
  return order;
}

bool PlanOrder::Before(int u, int t) const {
  if (u == t) return false;
  if (u > t) return false;  // tasks are in topological order: an ancestor comes first
  return labels_.Reaches(u, t) || Contains(Parents(t), u);
}

bool PlanOrder::ReadsSingleRegisterOf(int c, int p) const {
  for (int r = register_base_[p]; r < register_base_[p + 1]; ++r)
    if (single_[r] && std::binary_search(readers_.data() + reader_begin_[r], readers_.data() + reader_begin_[r + 1], c))
      return true;
  return false;
}

bool PlanOrder::BeforeNext(int c, int t) const {
  if (serial_) return true;
  for (int k = 0; k < labels_.chains; ++k)
    if (labels_.below[static_cast<size_t>(k) * n_ + c] <= reach_[static_cast<size_t>(k) * n_ + t]) return true;
  // c itself the reader of a back edge from t or a parent of t.
  if (ReadsSingleRegisterOf(c, t)) return true;
  for (int p : Parents(t))
    if (ReadsSingleRegisterOf(c, p)) return true;
  return false;
}

}  // namespace graph
}  // namespace actorflow

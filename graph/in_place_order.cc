// In-place write ordering over a plan (graph/in_place_order.h) and its check (passes.h).
#include "graph/in_place_order.h"

#include <algorithm>
#include <limits>
#include <map>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "actors/check.h"
#include "actors/plan_dtype.h"
#include "graph/passes.h"

namespace actorflow {
namespace graph {
namespace {

// The bytes of its blob a data input reads: a part view's range (InputDesc.part), else all.
std::pair<int64_t, int64_t> InputBytes(const plan::Plan& plan, const plan::InputDesc& in) {
  if (!in.part()) return {0, std::numeric_limits<int64_t>::max()};
  const plan::BlobDesc& blob =
      plan.tasks(static_cast<int>(in.producer_task_id())).registers(in.producer_register()).blobs(in.blob_index());
  int64_t bytes = static_cast<int64_t>(DTypeSize(FromProtoDType(blob.dtype())));
  for (int64_t d : in.view_shape()) bytes *= d;
  return {in.byte_offset(), in.byte_offset() + bytes};
}

// Whether input `ia` of task `ta` and input `ib` of task `tb`, reading the same blob, touch a
// common byte (shards of a variable stored split do not: their readers and writers on different
// devices need no order). Whole reads overlap; only part views' inputs are read from the plan.
bool Overlap(const plan::Plan& plan, const PlanTasks& tasks, int ta, int ia, int tb, int ib) {
  if (((tasks.input_flags(tasks.input_begin(ta) + ia) | tasks.input_flags(tasks.input_begin(tb) + ib)) &
       PlanTasks::kPart) == 0)
    return true;
  const auto x = InputBytes(plan, plan.tasks(ta).inputs(ia)), y = InputBytes(plan, plan.tasks(tb).inputs(ib));
  return x.first < y.second && y.first < x.second;
}

// Readers of the registers some task writes in place: (producer task, register) -> the
// (task, input index) pairs reading it by data edges, ascending. Also the reading tasks. The
// written registers are a sorted array searched by bisection: every data input of the plan
// is looked up, and the array (a few per variable) stays in cache where a tree's nodes do not.
struct WrittenRegisterReaders {
  std::vector<std::pair<int, int>> registers;             // sorted, distinct
  std::vector<std::vector<std::pair<int, int>>> readers;  // by position in `registers`
  std::vector<int> tasks;
  bool empty() const { return registers.empty(); }
  std::vector<std::pair<int, int>>* Find(int producer, int reg) {
    const std::pair<int, int> key{producer, reg};
    auto it = std::lower_bound(registers.begin(), registers.end(), key);
    return it == registers.end() || *it != key ? nullptr : &readers[static_cast<size_t>(it - registers.begin())];
  }
  const std::vector<std::pair<int, int>>& at(int producer, int reg) const {
    auto* found = const_cast<WrittenRegisterReaders*>(this)->Find(producer, reg);
    if (found == nullptr) throw std::out_of_range("in-place order: register not written in place");
    return *found;
  }
};
WrittenRegisterReaders ReadersOfWrittenRegisters(const PlanTasks& tasks) {
  WrittenRegisterReaders result;
  const int n = tasks.size();
  for (int t = 0; t < n; ++t)
    for (int k = tasks.written_begin(t); k < tasks.written_begin(t + 1); ++k) {
      const int m = tasks.written(k);
      if (m < 0 || m >= tasks.inputs(t)) continue;
      const int i = tasks.input_begin(t) + m;
      result.registers.emplace_back(tasks.producer(i), tasks.producer_register(i));
    }
  if (result.registers.empty()) return result;
  std::sort(result.registers.begin(), result.registers.end());
  result.registers.erase(std::unique(result.registers.begin(), result.registers.end()), result.registers.end());
  result.readers.resize(result.registers.size());
  for (int t = 0; t < n; ++t)
    for (int i = tasks.input_begin(t); i < tasks.input_begin(t + 1); ++i) {
      if ((tasks.input_flags(i) & PlanTasks::kControl) != 0) continue;
      std::vector<std::pair<int, int>>* readers = result.Find(tasks.producer(i), tasks.producer_register(i));
      if (readers == nullptr) continue;
      readers->emplace_back(t, i - tasks.input_begin(t));
      if (result.tasks.empty() || result.tasks.back() != t) result.tasks.push_back(t);
    }
  return result;
}

// Parents by data and control edges, from the plan's inputs (-1 where no task has the
// producer's id, as VerifyInPlaceOrder reads it).
ParentRows PlanParents(const PlanTasks& tasks) {
  ParentRows rows;
  rows.begin.reserve(static_cast<size_t>(tasks.size()) + 1);
  rows.parents.reserve(static_cast<size_t>(tasks.input_begin(tasks.size())));
  for (int t = 0; t < tasks.size(); ++t) {
    for (int i = tasks.input_begin(t); i < tasks.input_begin(t + 1); ++i) rows.parents.push_back(tasks.producer(i));
    rows.EndRow();
  }
  return rows;
}

}  // namespace

AncestorIndex::AncestorIndex(ParentRows rows) : rows_(std::move(rows)), visited_(rows_.size(), 0) {
  labels_ = ChainLabels::Of(rows_.size(), [this](int t) {
    return std::span<const int>(rows_.parents.data() + rows_.begin[t],
                                static_cast<size_t>(rows_.begin[t + 1] - rows_.begin[t]));
  });
}

namespace {
ParentRows RowsOf(const std::vector<std::vector<int>>& parents) {
  ParentRows rows;
  for (const std::vector<int>& row : parents) {
    rows.parents.insert(rows.parents.end(), row.begin(), row.end());
    rows.EndRow();
  }
  return rows;
}
}  // namespace

AncestorIndex::AncestorIndex(const std::vector<std::vector<int>>& parents) : AncestorIndex(RowsOf(parents)) {}

void AncestorIndex::AddEdge(int child, int parent) {
  if (added_head_.empty()) added_head_.assign(static_cast<size_t>(rows_.size()), -1);
  added_parent_.push_back(parent);
  added_next_.push_back(added_head_[child]);
  added_head_[child] = static_cast<int>(added_parent_.size()) - 1;
}

bool AncestorIndex::IsAncestor(int ancestor, int node) {
  if (ancestor >= node) return false;
  if (labels_.Reaches(ancestor, node)) return true;
  ++generation_;
  stack_.assign(1, node);
  visited_[node] = generation_;
  // Whether the search ends at parent p of the node it stands on (found), or goes on above it.
  auto visit = [&](int p) {
    if (p == ancestor) return true;
    if (p < ancestor || visited_[p] == generation_) return false;
    if (labels_.Reaches(ancestor, p)) return true;
    visited_[p] = generation_;
    stack_.push_back(p);
    return false;
  };
  while (!stack_.empty()) {
    const int t = stack_.back();
    stack_.pop_back();
    for (int k = rows_.begin[t]; k < rows_.begin[t + 1]; ++k)
      if (visit(rows_.parents[k])) return true;
    if (!added_head_.empty())
      for (int e = added_head_[t]; e >= 0; e = added_next_[e])
        if (visit(added_parent_[e])) return true;
  }
  return false;
}

void OrderInPlaceWriters(plan::Plan& plan, const std::function<void(plan::Task*, int)>& add_control) {
  const int n = plan.tasks_size();
  StatusOr<PlanTasks> read = PlanTasks::Of(plan);
  AF_CHECK(read.ok()) << "in-place order of a lowered plan: " << read.status().message();
  const PlanTasks& tasks = read.value();
  const WrittenRegisterReaders written = ReadersOfWrittenRegisters(tasks);
  if (written.empty()) return;
  AncestorIndex ancestors(PlanParents(tasks));
  for (int t = 0; t < n; ++t) {
    for (int k = tasks.written_begin(t); k < tasks.written_begin(t + 1); ++k) {
      const int m = tasks.written(k);
      const int target = tasks.input_begin(t) + m;
      for (const auto& [r, input] : written.at(tasks.producer(target), tasks.producer_register(target))) {
        if (r >= t) break;
        if (ancestors.IsAncestor(r, t) || !Overlap(plan, tasks, r, input, t, m)) continue;
        add_control(plan.mutable_tasks(t), r);
        ancestors.AddEdge(t, r);
      }
    }
  }
}


Status VerifyInPlaceOrder(const plan::Plan& plan) {
  AF_ASSIGN_OR_RETURN(const PlanTasks tasks, PlanTasks::Of(plan));
  return VerifyInPlaceOrder(plan, tasks);
}

Status VerifyInPlaceOrder(const plan::Plan& plan, const PlanTasks& tasks) {
  const int n = tasks.size();
  // Tasks are in topological order (every input's producer comes before it): checked on the
  // parents read in one walk over the plan, which the ancestry below is built from.
  ParentRows parents = PlanParents(tasks);
  for (int t = 0; t < n; ++t)
    for (int k = parents.begin[t]; k < parents.begin[t + 1]; ++k) {
      if (parents.parents[k] >= 0 && parents.parents[k] < t) continue;
      const int64_t p = plan.tasks(t).inputs(k - parents.begin[t]).producer_task_id();
      return Internal("plan '" + plan.job_name() + "': task '" + plan.tasks(t).name() + "' reads task #" +
                      std::to_string(p) + ", which is not before it");
    }
  for (int t = 0; t < n; ++t)
    for (int k = tasks.written_begin(t); k < tasks.written_begin(t + 1); ++k)
      if (const int m = tasks.written(k); m < 0 || m >= tasks.inputs(t))
        return Internal("plan '" + plan.job_name() + "': task '" + plan.tasks(t).name() + "' writes input " +
                        std::to_string(m) + " of " + std::to_string(tasks.inputs(t)));
  const WrittenRegisterReaders written = ReadersOfWrittenRegisters(tasks);
  if (written.empty()) return Status::Ok();
  // What each task waits for this iteration (data and control edges), among the readers.
  AncestorIndex ancestors(std::move(parents));
  for (int w = 0; w < n; ++w) {
    for (int k = tasks.written_begin(w); k < tasks.written_begin(w + 1); ++k) {
      const int m = tasks.written(k);
      const int target = tasks.input_begin(w) + m;
      for (const auto& [r, i] : written.at(tasks.producer(target), tasks.producer_register(target))) {
        if (r == w || !Overlap(plan, tasks, r, i, w, m)) continue;
        bool also_writes = false;  // two writers of one register: ordered either way
        for (int j = tasks.written_begin(r); j < tasks.written_begin(r + 1); ++j) also_writes |= tasks.written(j) == i;
        if (!ancestors.IsAncestor(r, w) && !(also_writes && ancestors.IsAncestor(w, r))) {
          const plan::Task& writer = plan.tasks(w);
          const plan::InputDesc& in = writer.inputs(m);
          return Internal("plan '" + plan.job_name() + "': task '" + plan.tasks(r).name() + "' reads register " +
                          std::to_string(in.producer_register()) + " of task '" +
                          plan.tasks(tasks.producer(target)).name() + "' unordered with its in-place writer '" +
                          writer.name() + "' (the reader must run before the writer)");
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace graph
}  // namespace actorflow

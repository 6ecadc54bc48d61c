// Internal to the runtime: a plan's task ids -> task positions, built once at instantiation.
// Compiled plans number their tasks 0, 1, ... in order (graph/lowering.cc), so the common case
// is a flat array indexed by id (one load per lookup, no hash node to chase; a plan of 10 k tasks
// looks ids up ~20 k times while it is wired). Plans with sparse or negative ids (hand-written
// ones, tests) fall back to a hash map. Not synchronized: the instantiating thread only.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/status.h"

namespace actorflow {

class TaskIds {
 public:
  // `ids[i]` is task i's id. InvalidArgument naming the id when two tasks share one.
  template <typename IdOf>
  Status Build(int count, IdOf id_of) {
    dense_.clear();
    sparse_.clear();
    // Dense when every id lies in [0, 2 * count + 16): the array wastes at most half its slots.
    const int64_t limit = 2 * static_cast<int64_t>(count) + 16;
    bool dense = true;
    for (int i = 0; i < count && dense; ++i) dense = id_of(i) >= 0 && id_of(i) < limit;
    if (dense) {
      dense_.assign(static_cast<size_t>(limit), -1);
      for (int i = 0; i < count; ++i) {
        int& slot = dense_[static_cast<size_t>(id_of(i))];
        if (slot >= 0) return Duplicate(id_of(i));
        slot = i;
      }
      return Status::Ok();
    }
    sparse_.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i)
      if (!sparse_.emplace(id_of(i), i).second) return Duplicate(id_of(i));
    return Status::Ok();
  }
  // The position of task `id`, -1 if no task has it.
  int Find(int64_t id) const {
    if (!dense_.empty() || sparse_.empty()) {
      return id >= 0 && id < static_cast<int64_t>(dense_.size()) ? dense_[static_cast<size_t>(id)] : -1;
    }
    auto it = sparse_.find(id);
    return it == sparse_.end() ? -1 : it->second;
  }
  bool dense() const { return !dense_.empty(); }

 private:
  static Status Duplicate(int64_t id) { return InvalidArgument("plan: duplicate task id " + std::to_string(id)); }
  std::vector<int> dense_;                     // id -> position, -1: none
  std::unordered_map<int64_t, int> sparse_;    // otherwise
};

}  // namespace actorflow

// How a variable of a job over several machines is held across them (docs/cluster.md,
// "Variables across machines"): whole, a copy on each machine that reads it (data parallelism,
// graph::ReplicateVariablesAcrossMachines, or a placement on other machines only), or split on
// one axis into shards, each on the machine of its device and only there (graph::ShardedVariable).
// Each rank's session holds only what its machine's tasks use; these helpers read the layout off
// the whole plan (the same on every rank) and copy parts in and out of a logical tensor.
//
// Thread-safety: plain values and functions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {

struct VariableLayout {
  int axis = -1;                  // -1: whole on each of `machines`; else the split axis of the parts
  std::vector<int> machines;      // whole: the machines holding a copy; split: the machine of part i
  std::vector<int64_t> starts;    // split: part i's first index on `axis`
  std::vector<TensorDesc> parts;  // split: part i's shape and dtype

  bool split() const { return axis >= 0; }
  bool HeldWholeOn(int machine) const;
  std::vector<int> PartsOn(int machine) const;  // the indices of the parts on `machine`
  // "whole on machines [1]", "split on axis 1 over machines [0, 1]".
  std::string ToString() const;
  bool operator==(const VariableLayout& other) const;
  bool operator!=(const VariableLayout& other) const { return !(*this == other); }
};

// The layout of variable `name` (logical `desc`) in `plan`, a whole plan over several machines:
// its VARIABLE tasks, shards (attrs shard_axis, shard_index, shard_parts) or whole copies.
// Internal when the tasks disagree (both kinds, a missing part, parts that do not tile `desc`);
// NotFound when the plan has no task of it.
StatusOr<VariableLayout> LayoutInPlan(const plan::Plan& plan, const std::string& name, const TensorDesc& desc);

// Copies part `index` of `layout` between the logical tensor `whole` (of `desc`) and `part`
// (contiguous, layout.parts[index]): into the part when `into_part`, else back into `whole`.
void CopyPart(const TensorDesc& desc, const VariableLayout& layout, size_t index, void* whole, void* part,
              bool into_part);

// The parts of `layout` on `machine`, each a new buffer (`alignment`-byte aligned) holding its
// part of the logical tensor `whole` (of `desc`); Internal when out of memory.
StatusOr<std::map<int, std::shared_ptr<void>>> CutParts(const TensorDesc& desc, const VariableLayout& layout,
                                                        int machine, const void* whole, size_t alignment);

}  // namespace actorflow

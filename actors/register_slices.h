// Registers that are slices of another task's register (plan.proto RegisterDesc.slice_of and
// reserved_byte_size; a reader takes the block whole with InputDesc.whole). Internal to the
// runtime: Runtime::Create calls these once, before any message flows.
#pragma once

#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/status.h"
#include "actors/task_ids.h"
#include "actors/task_state.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {

// (task index, register index) of a register that reserves a block -> the registers sliced into it.
using SliceGroups = std::map<std::pair<int, int>, std::vector<std::pair<int, int>>>;

// Points every sliced register's blocks into its owner's blocks (owners were allocated, slices
// were not) and checks the group: the owner is a compute task's register reserving the bytes,
// the slice one blob of a compute task, same register_num and memory case, and no two slices
// (nor a slice and the owner's own blob) overlapping. InvalidArgument naming the tasks otherwise.
StatusOr<SliceGroups> PlaceRegisterSlices(const plan::Plan& plan, const TaskIds& task_ids,
                                          TaskStates& states);

// For an input read whole (InputDesc.whole) of register `owner` of task `producer`: the in-edges
// of `reader` over each register sliced into it (`edge_of`: (task index, register) -> in-edge).
// InvalidArgument naming the reader and the slice it does not read.
StatusOr<std::vector<int>> WholeInputSliceEdges(const plan::Plan& plan, const SliceGroups& groups, int reader,
                                                int producer, int owner,
                                                const std::map<std::pair<int, int>, int>& edge_of);

}  // namespace actorflow

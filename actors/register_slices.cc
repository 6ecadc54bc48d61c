#include "actors/register_slices.h"

#include <algorithm>
#include <string>

namespace actorflow {
namespace {

std::string RegisterName(const plan::Plan& plan, int task, int reg) {
  return "register '" + plan.tasks(task).registers(reg).name() + "' of task '" + plan.tasks(task).name() + "'";
}

}  // namespace

StatusOr<SliceGroups> PlaceRegisterSlices(const plan::Plan& plan, const TaskIds& task_ids,
                                          TaskStates& states) {
  SliceGroups groups;
  for (int i = 0; i < plan.tasks_size(); ++i) {
    const plan::Task& task = plan.tasks(i);
    for (int k = 0; k < task.registers_size(); ++k) {
      const plan::RegisterDesc& reg = task.registers(k);
      if (reg.reserved_byte_size() < 0)
        return InvalidArgument("plan: " + RegisterName(plan, i, k) + " reserves " +
                               std::to_string(reg.reserved_byte_size()) + " bytes");
      if (reg.reserved_byte_size() > 0 && task.kind() != plan::COMPUTE)
        return InvalidArgument("plan: " + RegisterName(plan, i, k) +
                               " reserves a block for slices, but only compute tasks' registers can (it is a " +
                               plan::TaskKind_Name(task.kind()) + ")");
      if (!reg.has_slice_of()) continue;
      const plan::RegisterSlice& slice = reg.slice_of();
      const std::string what = "plan: " + RegisterName(plan, i, k) + " is a slice of";
      const int owner_task = task_ids.Find(slice.task_id());
      if (owner_task < 0) return InvalidArgument(what + " unknown task " + std::to_string(slice.task_id()));
      const plan::Task& owner = plan.tasks(owner_task);
      if (slice.register_index() < 0 || slice.register_index() >= owner.registers_size())
        return InvalidArgument(what + " register " + std::to_string(slice.register_index()) + " of task '" + owner.name() +
                               "', which has " + std::to_string(owner.registers_size()));
      const plan::RegisterDesc& owner_reg = owner.registers(slice.register_index());
      const std::string target = what + " " + RegisterName(plan, owner_task, slice.register_index());
      if (task.kind() != plan::COMPUTE || owner_task == i || owner_reg.has_slice_of())
        return InvalidArgument(target + ": a slice is a compute task's register inside another task's register "
                               "that is no slice itself");
      if (owner_reg.reserved_byte_size() <= 0)
        return InvalidArgument(target + ", which reserves no block (reserved_byte_size)");
      if (reg.blobs_size() != 1) return InvalidArgument(what + " another register but holds " +
                                                        std::to_string(reg.blobs_size()) + " blobs (expected one)");
      if (reg.register_num() != owner_reg.register_num())
        return InvalidArgument(target + " but has " + std::to_string(reg.register_num()) + " registers, not " +
                               std::to_string(owner_reg.register_num()));
      OutputSlots& out = states[i]->outputs()[k];
      const OutputSlots& block = states[owner_task]->outputs()[slice.register_index()];
      if (out.place.memory_case != block.place.memory_case)
        return InvalidArgument(target + " but lives in " + out.place.memory_case.ToString() + " memory, not " +
                               block.place.memory_case.ToString());
      const int64_t bytes = static_cast<int64_t>(out.blob_descs[0].byte_size());
      if (slice.byte_offset() < 0 || slice.byte_offset() + bytes > owner_reg.reserved_byte_size())
        return InvalidArgument(target + " at bytes [" + std::to_string(slice.byte_offset()) + ", " +
                               std::to_string(slice.byte_offset() + bytes) + "), outside its " +
                               std::to_string(owner_reg.reserved_byte_size()) + " reserved bytes");
      for (int r = 0; r < out.register_num; ++r) out.register_memory[r] = block.register_memory[r] + slice.byte_offset();
      groups[{owner_task, slice.register_index()}].emplace_back(i, k);
    }
  }
  // No two pieces of a block overlap: the owner's own blobs from offset 0, then the slices.
  for (const auto& [owner, slices] : groups) {
    std::vector<std::pair<int64_t, std::pair<int, int>>> pieces;  // (begin, register), sorted
    const OutputSlots& block = states[owner.first]->outputs()[owner.second];
    pieces.push_back({0, owner});
    for (const auto& s : slices)
      pieces.push_back({plan.tasks(s.first).registers(s.second).slice_of().byte_offset(), s});
    std::sort(pieces.begin(), pieces.end());
    auto end_of = [&](const std::pair<int64_t, std::pair<int, int>>& piece) {
      const OutputSlots& out = states[piece.second.first]->outputs()[piece.second.second];
      if (piece.second == owner) {
        size_t end = 0;
        for (size_t b = 0; b < out.blob_descs.size(); ++b) end = std::max(end, block.blob_offsets[b] + out.blob_descs[b].byte_size());
        return piece.first + static_cast<int64_t>(end);
      }
      return piece.first + static_cast<int64_t>(out.blob_descs[0].byte_size());
    };
    for (size_t p = 1; p < pieces.size(); ++p)
      if (pieces[p].first < end_of(pieces[p - 1]))
        return InvalidArgument("plan: " + RegisterName(plan, pieces[p].second.first, pieces[p].second.second) +
                               " overlaps " + RegisterName(plan, pieces[p - 1].second.first, pieces[p - 1].second.second) +
                               " inside the block of " + RegisterName(plan, owner.first, owner.second));
  }
  return groups;
}

StatusOr<std::vector<int>> WholeInputSliceEdges(const plan::Plan& plan, const SliceGroups& groups, int reader,
                                                int producer, int owner,
                                                const std::map<std::pair<int, int>, int>& edge_of) {
  std::vector<int> edges;
  auto group = groups.find({producer, owner});
  if (group == groups.end()) return edges;
  for (const auto& slice : group->second) {
    auto edge = edge_of.find(slice);
    if (edge == edge_of.end())
      return InvalidArgument("plan: task '" + plan.tasks(reader).name() + "' reads " + RegisterName(plan, producer, owner) +
                             " whole but not " + RegisterName(plan, slice.first, slice.second) +
                             ", a slice of it (it must wait for every slice; a control input does)");
    edges.push_back(edge->second);
  }
  return edges;
}

}  // namespace actorflow

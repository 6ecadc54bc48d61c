#include "session/variable_parts.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "actors/plan_dtype.h"

namespace actorflow {

namespace {

int64_t IntAttr(const plan::Task& task, const char* name) {
  auto it = task.attrs().find(name);
  return it == task.attrs().end() ? -1 : it->second.i();
}

std::string List(const std::vector<int>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

}  // namespace

bool VariableLayout::HeldWholeOn(int machine) const {
  return !split() && std::find(machines.begin(), machines.end(), machine) != machines.end();
}

std::vector<int> VariableLayout::PartsOn(int machine) const {
  std::vector<int> on;
  if (!split()) return on;
  for (size_t i = 0; i < machines.size(); ++i)
    if (machines[i] == machine) on.push_back(static_cast<int>(i));
  return on;
}

std::string VariableLayout::ToString() const {
  if (!split()) return "whole on machines " + List(machines);
  return "split on axis " + std::to_string(axis) + " over machines " + List(machines);
}

bool VariableLayout::operator==(const VariableLayout& other) const {
  return axis == other.axis && machines == other.machines && starts == other.starts && parts == other.parts;
}

StatusOr<VariableLayout> LayoutInPlan(const plan::Plan& plan, const std::string& name, const TensorDesc& desc) {
  VariableLayout layout;
  std::set<int> whole_on;
  std::map<int64_t, std::pair<int, TensorDesc>> shards;  // index -> (machine, desc)
  int64_t parts = -1;
  const std::string what = "plan '" + plan.job_name() + "': variable '" + name + "'";
  for (const plan::Task& task : plan.tasks()) {
    if (task.kind() != plan::VARIABLE || task.variable_name() != name) continue;
    if (task.attrs().count("shard_parts") == 0) {
      whole_on.insert(task.machine_id());
      continue;
    }
    if (task.registers_size() == 0 || task.registers(0).blobs_size() != 1)
      return Internal(what + ": shard task '" + task.name() + "' holds no blob");
    const plan::BlobDesc& blob = task.registers(0).blobs(0);
    const int64_t axis = IntAttr(task, "shard_axis"), index = IntAttr(task, "shard_index");
    if (layout.axis >= 0 && axis != layout.axis) return Internal(what + ": its shards are split on different axes");
    if (parts >= 0 && IntAttr(task, "shard_parts") != parts)
      return Internal(what + ": its shards disagree on the count");
    layout.axis = static_cast<int>(axis);
    parts = IntAttr(task, "shard_parts");
    shards[index] = {task.machine_id(),
                     TensorDesc{Shape(blob.shape().begin(), blob.shape().end()), FromProtoDType(blob.dtype())}};
  }
  if (whole_on.empty() && shards.empty()) return NotFound(what + " has no task in the plan");
  if (!whole_on.empty() && !shards.empty()) return Internal(what + " is held both whole and in shards");
  if (shards.empty()) {
    layout.machines.assign(whole_on.begin(), whole_on.end());
    return layout;
  }
  if (layout.axis < 0 || layout.axis >= static_cast<int>(desc.shape.size()) ||
      static_cast<int64_t>(shards.size()) != parts)
    return Internal(what + ": " + std::to_string(shards.size()) + " shards of " + std::to_string(parts) +
                    " on axis " + std::to_string(layout.axis) + " of " + desc.ToString());
  int64_t start = 0;
  for (const auto& [index, held] : shards) {
    const TensorDesc& part = held.second;
    Shape expected = desc.shape;
    if (part.shape.size() != expected.size() || part.dtype != desc.dtype)
      return Internal(what + ": shard " + std::to_string(index) + " is " + part.ToString() + " of " + desc.ToString());
    expected[layout.axis] = part.shape[layout.axis];
    if (part.shape != expected) return Internal(what + ": shard " + std::to_string(index) + " is " + part.ToString());
    layout.machines.push_back(held.first);
    layout.starts.push_back(start);
    layout.parts.push_back(part);
    start += part.shape[layout.axis];
  }
  if (start != desc.shape[layout.axis])
    return Internal(what + ": its shards cover " + std::to_string(start) + " of " + desc.ToString() + " on axis " +
                    std::to_string(layout.axis));
  return layout;
}

void CopyPart(const TensorDesc& desc, const VariableLayout& layout, size_t index, void* whole, void* part,
              bool into_part) {
  // Row-major: `outer` blocks (the axes before the split axis), each holding the whole tensor's
  // `length` x `inner` elements of which the part takes its `part_length` x `inner` from `start`.
  const int axis = layout.axis;
  const size_t element = DTypeSize(desc.dtype);
  int64_t outer = 1, inner = 1;
  for (int a = 0; a < axis; ++a) outer *= desc.shape[a];
  for (size_t a = static_cast<size_t>(axis) + 1; a < desc.shape.size(); ++a) inner *= desc.shape[a];
  const size_t whole_row = static_cast<size_t>(desc.shape[axis] * inner) * element;
  const size_t part_row = static_cast<size_t>(layout.parts[index].shape[axis] * inner) * element;
  const size_t offset = static_cast<size_t>(layout.starts[index] * inner) * element;
  auto* whole_bytes = static_cast<char*>(whole);
  auto* part_bytes = static_cast<char*>(part);
  for (int64_t block = 0; block < outer; ++block) {
    char* in_whole = whole_bytes + static_cast<size_t>(block) * whole_row + offset;
    char* in_part = part_bytes + static_cast<size_t>(block) * part_row;
    if (into_part) {
      std::memcpy(in_part, in_whole, part_row);
    } else {
      std::memcpy(in_whole, in_part, part_row);
    }
  }
}

StatusOr<std::map<int, std::shared_ptr<void>>> CutParts(const TensorDesc& desc, const VariableLayout& layout,
                                                        int machine, const void* whole, size_t alignment) {
  std::map<int, std::shared_ptr<void>> parts;
  for (int index : layout.PartsOn(machine)) {
    const size_t bytes = layout.parts[static_cast<size_t>(index)].byte_size();
    const size_t rounded = (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
    void* buffer = std::aligned_alloc(alignment, rounded);
    if (buffer == nullptr)
      return Internal("out of memory for part " + std::to_string(index) + " (" + std::to_string(bytes) + " bytes)");
    std::shared_ptr<void> owned(buffer, [](void* p) { std::free(p); });
    CopyPart(desc, layout, static_cast<size_t>(index), const_cast<void*>(whole), buffer, /*into_part=*/true);
    parts.emplace(index, std::move(owned));
  }
  return parts;
}

}  // namespace actorflow

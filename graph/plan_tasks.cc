#include "graph/plan_tasks.h"

#include <algorithm>

#include "actors/plan_dtype.h"
#include "actors/task_ids.h"

namespace actorflow {
namespace graph {
namespace {

// The runtime aligns every blob of a register to this (actors/runtime.cc kAlignment): a
// register takes the sum of its blobs' sizes rounded up, and shared offsets are multiples.
constexpr int64_t kAlignment = 64;
int64_t AlignUp(int64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

int64_t BlobBytes(const plan::BlobDesc& blob) {
  if (blob.byte_size() > 0) return blob.byte_size();
  TensorDesc desc;
  desc.shape.assign(blob.shape().begin(), blob.shape().end());
  desc.dtype = FromProtoDType(blob.dtype());
  return static_cast<int64_t>(desc.byte_size());
}

}  // namespace

int64_t RegisterBytes(const plan::RegisterDesc& reg) {
  int64_t bytes = 0;
  for (const plan::BlobDesc& blob : reg.blobs()) bytes += AlignUp(BlobBytes(blob));
  return std::max(bytes, reg.reserved_byte_size());
}

StatusOr<PlanTasks> PlanTasks::Of(const plan::Plan& plan) {
  const int n = plan.tasks_size();
  TaskIds ids;
  AF_RETURN_IF_ERROR(ids.Build(n, [&](int t) { return plan.tasks(t).id(); }));
  PlanTasks tasks;
  tasks.task_flags_.reserve(static_cast<size_t>(n));
  tasks.input_begin_.reserve(static_cast<size_t>(n) + 1);
  tasks.register_begin_.reserve(static_cast<size_t>(n) + 1);
  tasks.written_begin_.reserve(static_cast<size_t>(n) + 1);
  // About two inputs and one register a task in the compiler's plans.
  tasks.producer_.reserve(static_cast<size_t>(n) * 2);
  tasks.producer_register_.reserve(static_cast<size_t>(n) * 2);
  tasks.input_flags_.reserve(static_cast<size_t>(n) * 2);
  tasks.register_num_.reserve(static_cast<size_t>(n) + 16);
  tasks.register_bytes_.reserve(static_cast<size_t>(n) + 16);
  tasks.register_flags_.reserve(static_cast<size_t>(n) + 16);
  for (const plan::Task& task : plan.tasks()) {
    uint8_t flags = 0;
    if (task.kind() == plan::VARIABLE) flags |= kVariable | (task.read_only() ? kReadOnly : 0);
    // A source's register is written by the host's Push once the register is free, like an act.
    if (((task.kind() == plan::COMPUTE && !task.asynchronous()) || task.kind() == plan::SOURCE) &&
        task.device_type() == "cpu")
      flags |= kShareableKind;
    tasks.task_flags_.push_back(flags);
    tasks.all_on_machine_zero_ = tasks.all_on_machine_zero_ && task.machine_id() == 0;
    const int first_input = static_cast<int>(tasks.producer_.size());
    for (const plan::InputDesc& in : task.inputs()) {
      tasks.producer_.push_back(ids.Find(in.producer_task_id()));
      tasks.producer_register_.push_back(in.producer_register());
      tasks.input_flags_.push_back(static_cast<uint8_t>((in.control() ? kControl : 0) | (in.whole() ? kWhole : 0) |
                                                        (in.part() ? kPart : 0)));
    }
    for (int m : task.mutable_inputs()) {
      tasks.written_.push_back(m);
      if (m >= 0 && m < task.inputs_size()) tasks.input_flags_[static_cast<size_t>(first_input + m)] |= kWritten;
    }
    tasks.input_begin_.push_back(static_cast<int>(tasks.producer_.size()));
    tasks.written_begin_.push_back(static_cast<int>(tasks.written_.size()));
    for (const plan::RegisterDesc& reg : task.registers()) {
      tasks.register_num_.push_back(reg.register_num());
      tasks.register_bytes_.push_back(RegisterBytes(reg));
      uint8_t register_flags = 0;
      if (reg.memory_case().kind() == plan::MEMORY_HOST && !reg.has_slice_of() && reg.reserved_byte_size() == 0)
        register_flags |= kHostPlain;
      if (reg.has_shared_memory()) register_flags |= kSharedMemory;
      tasks.register_flags_.push_back(register_flags);
    }
    tasks.register_begin_.push_back(static_cast<int>(tasks.register_num_.size()));
  }
  return tasks;
}

}  // namespace graph
}  // namespace actorflow

// PlanTasks: what the in-place order check, PlanOrder and the register memory planner read of a
// plan's tasks, read in one walk into flat arrays (a few bytes per task, input and register).
// Those passes run back to back on a freshly lowered plan; each walking the protobuf tasks
// itself (a message per task, per input, per register and per blob, thousands of them cold by
// then) cost cache misses per task that grew faster than the plan: read once here, they walk
// these arrays instead. Facts of the plan as it was when read: a pass changing the plan
// (PlanRegisterMemory lowering register_num) keeps its own copy of what it changes.
//
// Thread-safety: immutable after Of(); reads from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/status.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace graph {

class PlanTasks {
 public:
  // Task flags.
  static constexpr uint8_t kVariable = 1;            // kind VARIABLE
  static constexpr uint8_t kReadOnly = 2;            // a VARIABLE with read_only
  static constexpr uint8_t kShareableKind = 4;       // a synchronous COMPUTE or a SOURCE, on "cpu"
  // Input flags.
  static constexpr uint8_t kControl = 1;
  static constexpr uint8_t kWhole = 2;
  static constexpr uint8_t kWritten = 4;             // listed in the task's mutable_inputs
  static constexpr uint8_t kPart = 8;
  // Register flags.
  static constexpr uint8_t kHostPlain = 1;           // host memory, no slice_of, nothing reserved
  static constexpr uint8_t kSharedMemory = 2;        // has shared_memory already

  // Task ids are looked up as the runtime does (actors/task_ids.h); InvalidArgument naming the
  // id when two tasks share one.
  static StatusOr<PlanTasks> Of(const plan::Plan& plan);

  int size() const { return static_cast<int>(task_flags_.size()); }
  bool all_on_machine_zero() const { return all_on_machine_zero_; }
  uint8_t task_flags(int t) const { return task_flags_[t]; }
  bool read_only_variable(int t) const { return (task_flags_[t] & kReadOnly) != 0; }

  // Inputs of task t: [input_begin(t), input_begin(t + 1)), in the plan's order.
  int input_begin(int t) const { return input_begin_[t]; }
  int inputs(int t) const { return input_begin_[t + 1] - input_begin_[t]; }
  // The producer's position (-1: no task has the input's producer_task_id) and register.
  int producer(int i) const { return producer_[i]; }
  int producer_register(int i) const { return producer_register_[i]; }
  uint8_t input_flags(int i) const { return input_flags_[i]; }

  // The task's mutable_inputs as listed (an index may be out of range: VerifyInPlaceOrder
  // reports it): [written_begin(t), written_begin(t + 1)).
  int written_begin(int t) const { return written_begin_[t]; }
  int written(int k) const { return written_[k]; }

  // Registers of task t: [register_begin(t), register_begin(t + 1)); the global index of
  // register r of task t is register_begin(t) + r.
  int register_begin(int t) const { return register_begin_[t]; }
  int registers(int t) const { return register_begin_[t + 1] - register_begin_[t]; }
  int register_count() const { return register_begin_.back(); }
  int register_num(int r) const { return register_num_[r]; }
  // What one of its registers allocates: its blobs (each aligned), or its reserved block.
  int64_t register_bytes(int r) const { return register_bytes_[r]; }
  uint8_t register_flags(int r) const { return register_flags_[r]; }

 private:
  bool all_on_machine_zero_ = true;
  std::vector<uint8_t> task_flags_;
  std::vector<int> input_begin_{0};
  std::vector<int> producer_, producer_register_;
  std::vector<uint8_t> input_flags_;
  std::vector<int> written_begin_{0};
  std::vector<int> written_;
  std::vector<int> register_begin_{0};
  std::vector<int> register_num_;
  std::vector<int64_t> register_bytes_;
  std::vector<uint8_t> register_flags_;
};

// What one register allocates (one of its register_num): its blobs, each rounded up to the
// runtime's alignment, or its reserved block if larger.
int64_t RegisterBytes(const plan::RegisterDesc& reg);

}  // namespace graph
}  // namespace actorflow

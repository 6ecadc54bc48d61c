// InlineRun: one iteration of a plan on the calling thread, task after task in a topological
// order of the plan, with no actor, message or thread hand-off between them.
//
// Why: a synchronous caller of an idle runtime waits for every hop of its iteration: the host
// hands the inputs to a worker thread, actors pass registers to each other, and the sink hands
// the result back. On this kind of machine (a VM whose idle vCPUs halt) each hand-off to a
// sleeping thread costs microseconds, more than small kernels (batch-1 inference, an empty
// job). Running the chain on the caller removes every one of them; the kernels, their order and
// the bytes they see are those of the actors' run.
//
// Contract (used by Runtime::Impl, which decides when; see RuntimeOptions::run_inline):
//  - it has its own kernels (the make_kernel hook called again) and its own registers, one per
//    output, so it never touches what the actors own; read-only variables are read in place;
//  - only plans of synchronous tasks in memory the CPU reads, with no watch sinks, no written
//    variables and no registers read whole across tasks (Ineligible says which rule failed);
//  - Run is not thread-safe: the runtime calls it under its push lock, one iteration at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/kernel.h"
#include "actors/memory.h"
#include "actors/status.h"
#include "actors/task_states.h"
#include "actors/tensor.h"

namespace actorflow {
struct RuntimeHooks;

class InlineRun {
 public:
  // Why `states` (the runtime's instantiated tasks, wired) cannot run inline, or "" if they
  // can. `max_register_bytes`: the most register memory the inline copy may allocate.
  static std::string Ineligible(const TaskStates& states, size_t max_register_bytes);
  // Builds the inline copy of an eligible plan: kernels, registers (from `memory`, which must
  // outlive it), views. Fails as instantiation fails (a kernel that cannot be built).
  static StatusOr<std::unique_ptr<InlineRun>> Create(const TaskStates& states,
                                                     const RuntimeHooks& hooks, RegisterMemory& memory,
                                                     const AllocatorRegistry& allocators);

  // One iteration: inputs[k] into feed k's register, every task in order, the main sink's blobs
  // into `outputs`. The first failing task ends it, its error naming the op as the actors' do
  // ("op 'x' (type) at file:line, iteration N: ..."). Inputs and outputs were checked by the caller.
  Status Run(int64_t iteration, const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs);

  size_t register_bytes() const { return register_bytes_; }

 private:
  InlineRun() = default;
  enum class Kind { kFeed, kKernel, kDeliver };
  struct Step {
    Kind kind;
    int feed = 0;  // kFeed: which input
    const TaskState* state = nullptr;  // its where() names the op in errors
    KernelFn kernel;
    std::vector<TensorView> inputs, outputs;
  };
  std::vector<Step> steps_;
  size_t register_bytes_ = 0;
};

}  // namespace actorflow

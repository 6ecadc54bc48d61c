// Runtime: instantiates a Plan as one persistent CAF actor per task and runs iterations.
//
// Contract (see ARCHITECTURE.md, "The runtime"):
//  - registers are pre-allocated here, never per iteration;
//  - an actor acts while every input holds a ready register for its next iteration and
//    every output has a free register; a register is free again once all consumers acked;
//  - each Push is one iteration; many may be in flight; completions run in iteration order;
//  - a failing kernel fails its iteration only (the error names the task, op and the user's
//    source line); later iterations run normally;
//  - destroying the Runtime drains in-flight iterations, ends every actor, leaks nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/environment.h"
#include "actors/kernel.h"
#include "actors/status.h"
#include "actors/tensor.h"
#include "actors/trace.h"

namespace actorflow {
namespace plan { class Plan; class Task; }

struct RuntimeOptions {
  // The thread budget of the environment the runtime makes for itself when Create is given
  // none (see EnvironmentOptions); ignored when it is given one, whose budget holds.
  int num_threads = 0;
  int num_workers = 0;
  int kernel_threads = 0;
  std::function<void(int kernel_threads)> on_worker_start;
  // Optional observer (e.g. ChromeTraceRecorder). Not owned; must outlive the Runtime.
  RuntimeObserver* observer = nullptr;
};

struct RuntimeHooks {
  // COMPUTE tasks: build the kernel for a task (called once, at instantiation).
  std::function<StatusOr<KernelFn>(const plan::Task&)> make_kernel;
  // VARIABLE tasks: the external memory holding the variable (must outlive the Runtime).
  std::function<StatusOr<void*>(const plan::Task&)> variable_buffer;
  // SINK tasks with a non-empty sink_name (watch handlers): called on an actor thread, in
  // iteration order, with views valid only during the call.
  std::function<Status(const std::string& sink_name, int64_t iteration, const std::vector<TensorView>&)> sink_handler;
};

// Called once per iteration, in iteration order, after every sink of the iteration delivered
// (or with the iteration's error). Runs on an actor thread: keep it short, never block on the
// runtime from it.
using Completion = std::function<void(int64_t iteration, const Status& status)>;

class Runtime {
 public:
  // Runs the plan's actors on `environment`'s scheduler, shared with other runtimes; without
  // one (the C++ Pipeline, tests) the runtime makes its own from options' thread budget.
  static StatusOr<std::unique_ptr<Runtime>> Create(const plan::Plan& plan, RuntimeHooks hooks,
                                                   RuntimeOptions options = {},
                                                   std::shared_ptr<ActorEnvironment> environment = nullptr);
  ~Runtime();

  // Starts one iteration. `inputs[k]` feeds the SOURCE task with feed_index k (desc must match
  // the source's blob exactly); it is copied into a free source register, blocking while none
  // is free (backpressure reaches the caller). `outputs` are caller-owned buffers, one per blob
  // of the main SINK (sink_name ""), filled before `done` runs. Thread-safe.
  StatusOr<int64_t> Push(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                         Completion done);
  // Convenience: Push and wait for this iteration's completion.
  Status Run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs);
  // Blocks until every pushed iteration completed.
  void Drain();

  // Descriptions of the feeds (by feed_index) and of the main sink's blobs.
  const std::vector<TensorDesc>& input_descs() const;
  const std::vector<TensorDesc>& output_descs() const;

  class Impl;
 private:
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorflow

// Runtime: instantiates a Plan as one persistent CAF actor per task and runs iterations.
//
// Contract (see ARCHITECTURE.md, "The runtime"):
//  - registers are pre-allocated here, never per iteration, each from the allocator of its
//    memory case (actors/memory.h); a memory case without one fails Create, naming the task;
//  - a task is an input, an output and an act policy (actors/task_state.h); an asynchronous
//    compute task (plan Task.asynchronous) holds an act's registers until the kernel's
//    completion handle is called (actors/kernel.h); its iteration's error comes with it;
//  - an actor acts while every input holds a ready register for its next iteration and
//    every output has a free register; a register is free again once all consumers acked;
//  - each Push is one iteration; many may be in flight; completions run in iteration order;
//  - a failing kernel fails its iteration only (the error names the task, op and the user's
//    source line); later iterations run normally;
//  - destroying the Runtime (or Shutdown) drains in-flight iterations, ends every actor, leaks
//    nothing; if that takes longer than RuntimeOptions::shutdown_timeout, it is an error
//    (Shutdown's Status, stderr, forced_shutdown_count(), on_forced_shutdown), never silent;
//  - completions, sink handlers and kernels run on actor threads: Push, Run and Drain called
//    from one of them would wait for the thread they block, so Push and Run fail at once with
//    FailedPrecondition and Drain returns without waiting (push from another thread instead);
//  - a kernel or sink handler that throws fails its iteration like a failing kernel; a
//    completion that throws is reported once on stderr and the runtime carries on.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <string_view>
#include <vector>

#include "actors/environment.h"
#include "actors/kernel.h"
#include "actors/memory.h"
#include "actors/status.h"
#include "actors/tensor.h"
#include "actors/trace.h"

namespace actorflow {
namespace plan { class Plan; class Task; }

// The names a job gives a plan it shares with other jobs (session/job_cache.h: a structure
// compiled once, each job function of that structure binding its own names): the job's name
// and, per task position, the task name and the user's source line the runtime reports (errors,
// inline refusals) instead of the plan's own. Sink names and variable names stay the plan's:
// the hooks receive the plan's task and translate them. The names are views: whoever makes the
// table keeps their characters alive as long as the table (e.g. with an aliasing shared_ptr).
struct PlanNames {
  std::string job_name;
  std::vector<std::string_view> task_names, source_locations;  // one per task of the plan
};

struct RuntimeOptions {
  // The thread budget of the environment the runtime makes for itself when Create is given
  // none (see EnvironmentOptions); ignored when it is given one, whose budget holds.
  int num_threads = 0;
  int num_workers = 0;
  int kernel_threads = 0;
  std::function<void(int kernel_threads)> on_worker_start;
  // Idle shares lent to acting kernels: with num_workers > 1 and num_threads > kernel_threads,
  // each kernel act is told (KernelContext::threads) kernel_threads times the number of workers
  // whose kernel is not acting right now (its own included), at most num_threads. A device
  // waiting on another then lends its cores to the one computing; both acting, each keeps its
  // share. Costs two atomic operations per kernel act; off (0 in ctx.threads) otherwise.
  bool lend_idle_threads = false;
  // Optional observer (e.g. ChromeTraceRecorder). Not owned; must outlive the Runtime.
  RuntimeObserver* observer = nullptr;
  // How long Shutdown (and the destructor) waits for in-flight iterations to drain and for
  // end-of-stream to end every actor. Past it Shutdown returns an error (a healthy runtime
  // never gets there): unfinished iterations are abandoned (their completions get the error),
  // end of stream is sent anyway, and actors still running one more timeout later are stopped
  // (each handles an abandon message ahead of its queued work, whatever it still holds, such
  // as asynchronous acts whose completion never came; the error names those acts).
  std::chrono::milliseconds shutdown_timeout{30000};
  // Called (on the thread running Shutdown) when the shutdown timeout fired, with the error,
  // before the actors are killed. Shutdown still waits for a kernel that is running to return.
  std::function<void(const Status&)> on_forced_shutdown;
  // Where registers come from, by memory case (not owned; must outlive the Runtime). Null: the
  // process-wide AllocatorRegistry::Global(), which has host memory.
  const AllocatorRegistry* allocators = nullptr;
  // Synchronous calls on an idle runtime run on the caller's thread (actors/inline_run.h): a
  // Push with may_run_inline (Run's) that finds no iteration in flight runs the plan's tasks in
  // order itself, with its own copy of the kernels and registers, and returns after its
  // completion ran; any other call goes through the actors as always. Only for plans InlineRun
  // accepts (synchronous tasks in host memory, no watch sinks, no written variables, at most
  // inline_register_bytes of registers) and never with an observer (the trace records actors);
  // inline_refusal() says why a runtime does not. The kernels must keep no state between
  // calls that the two copies would split (the caller checks the ops: session.cc).
  bool run_inline = false;
  size_t inline_register_bytes = size_t{8} << 20;
  // Null: the plan's own names. Otherwise one name and source line per task (checked at Create).
  std::shared_ptr<const PlanNames> names;
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
// (or with the iteration's error). Runs on an actor thread: keep it short; Push, Run and Drain
// do not wait from it (see the contract above): hand further pushes to another thread. An
// exception thrown from it is caught and reported on stderr (once per runtime).
using Completion = std::function<void(int64_t iteration, const Status& status)>;

class Runtime {
 public:
  // Runs the plan's actors on `environment`'s scheduler, shared with other runtimes; without
  // one (the C++ Pipeline, tests) the runtime makes its own from options' thread budget.
  static StatusOr<std::unique_ptr<Runtime>> Create(const plan::Plan& plan, RuntimeHooks hooks,
                                                   RuntimeOptions options = {},
                                                   std::shared_ptr<ActorEnvironment> environment = nullptr);
  // The same on a plan shared with its owner (a compiled job, the job cache): the runtime keeps
  // `plan` alive and reads it in place instead of copying it (a copy is ~5 tasks per traced op
  // of protobuf for a training job). `plan` must not change while the runtime lives.
  static StatusOr<std::unique_ptr<Runtime>> Create(std::shared_ptr<const plan::Plan> plan, RuntimeHooks hooks,
                                                   RuntimeOptions options = {},
                                                   std::shared_ptr<ActorEnvironment> environment = nullptr);
  ~Runtime();

  // Starts one iteration. `inputs[k]` (host memory) feeds the SOURCE task with feed_index k
  // (desc must match the source's blob exactly); it is copied into a free source register
  // (CopyBytes: into whatever memory case the register has), blocking while none
  // is free (backpressure reaches the caller). `outputs` are caller-owned buffers, one per blob
  // of the main SINK (sink_name ""), filled before `done` runs. Thread-safe.
  // `may_run_inline`: the caller waits for the completion anyway, so an idle runtime may run
  // the iteration on this thread (RuntimeOptions::run_inline); `done` then runs here, before
  // Push returns, marked as an actor handler (Push, Run and Drain refuse inside it).
  StatusOr<int64_t> Push(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                         Completion done, bool may_run_inline = false);
  // Convenience: Push (inline where it may) and wait for this iteration's completion.
  Status Run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs);
  // Blocks until every pushed iteration completed. From a completion, sink handler or kernel it
  // returns at once (it would wait for itself).
  void Drain();
  // Drains, then ends every actor (the destructor calls it). Idempotent; Push fails afterwards.
  // Returns once every actor's last handler is over (no kernel, completion or sink handler of
  // this runtime runs after it); CAF may still be releasing the actors themselves then (an
  // actor system the runtime made waits for them when it is destroyed).
  // An error when shutdown_timeout expired and the actors had to be killed.
  Status Shutdown();
  // Process-wide number of shutdowns that timed out and killed actors (tests assert it is 0).
  static int64_t forced_shutdown_count();

  // Descriptions of the feeds (by feed_index) and of the main sink's blobs.
  const std::vector<TensorDesc>& input_descs() const;
  const std::vector<TensorDesc>& output_descs() const;
  // Why synchronous calls do not run inline ("" when they do; see RuntimeOptions::run_inline).
  const std::string& inline_refusal() const;

  class Impl;
 private:
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorflow

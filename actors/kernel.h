// What the runtime knows of a kernel: a callable over tensor views. Nothing of ops.
//
// Synchronous kernels (the default) do their work inside the call: when it returns, the
// outputs are written and the runtime announces them and releases the inputs.
//
// Asynchronous kernels (plan Task.asynchronous) launch work and return; the work ends later,
// elsewhere (a GPU stream callback, a network send, a collective, a thread pool). The contract:
//  - During the call the kernel takes a handle with ctx.TakeCompletion() and hands it to the
//    work. Until the handle is completed the runtime holds the act's registers: the inputs are
//    not acked (their producer cannot overwrite them) and the outputs are not announced (no
//    consumer reads them), so the work may read ctx's input data and write its output data
//    until then. The views themselves (ctx.inputs/outputs, the vectors) are valid only during
//    the call: copy the pointers the work needs.
//  - Complete(status) must be called exactly once, from any thread (the kernel's own call
//    included). An error status fails that act's iteration only. Afterwards the work must not
//    touch the registers any more.
//  - A second call returns FailedPrecondition (and is reported on stderr); it never completes
//    another act. Dropping every copy of a handle without completing it completes the act with
//    an Internal error ("destroyed without being called"), so a lost handle fails its
//    iteration instead of hanging the runtime. A call after the runtime shut down returns
//    FailedPrecondition; the register memory stays valid while a handle exists.
//  - An asynchronous kernel that returns without taking the handle completed synchronously,
//    with its returned status. One that took the handle and then returns an error (or throws)
//    fails the iteration, and the runtime still waits for the handle before releasing the
//    registers (the launched work may be using them).
//  - The actor keeps launching later iterations while a launch is in flight, up to the
//    registers it has (each launch holds one free register of every output); completions may
//    come in any order, the runtime announces outputs in iteration order.
// A synchronous kernel that calls TakeCompletion gets an empty handle and fails its iteration
// (its task was not declared asynchronous, so nothing would hold its registers).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"

namespace actorflow {

namespace runtime_internal {
struct CompletionSlot;  // one in-flight act of an asynchronous task (actors/task_state.h)
}

// A copyable handle that completes one asynchronous act. Thread-safe: copies may live on any
// thread; see the contract above for what calling it means.
class KernelCompletion {
 public:
  KernelCompletion() = default;  // empty: Complete returns FailedPrecondition
  KernelCompletion(const KernelCompletion& other);
  KernelCompletion(KernelCompletion&& other) noexcept;
  KernelCompletion& operator=(KernelCompletion other) noexcept;
  ~KernelCompletion();

  // Completes the act: ok, or the error that fails its iteration. Exactly once per act.
  Status Complete(Status status = Status::Ok());
  bool valid() const { return slot_ != nullptr; }

 private:
  friend struct KernelContext;
  KernelCompletion(std::shared_ptr<runtime_internal::CompletionSlot> slot, int64_t launch, int64_t iteration);
  void Release();  // drops this copy's hold on its launch

  std::shared_ptr<runtime_internal::CompletionSlot> slot_;
  int64_t launch_ = -1;  // which act of the slot this handle completes
  int64_t iteration_ = 0;
};

// Filled by the owning actor before each act. The vectors are owned by the actor and
// reused across iterations (only data pointers change), so acting never allocates.
struct KernelContext {
  const std::vector<TensorView>* inputs = nullptr;   // data inputs, in InputDesc order (control inputs excluded)
  const std::vector<TensorView>* outputs = nullptr;  // blobs of the task's free output registers, in register/blob order
  int64_t iteration = 0;
  // Intra-op threads this act may use (RuntimeOptions::lend_idle_threads): its share plus the
  // shares of workers idle as it starts. 0: no lending; use KernelInit::num_threads.
  int threads = 0;
  // The task is plan Task.stream_ordered: a device kernel may end the act once its work is
  // enqueued (actors/device.h, StreamKernel).
  bool stream_ordered = false;

  const TensorView& input(size_t i) const { return (*inputs)[i]; }
  const TensorView& output(size_t i) const { return (*outputs)[i]; }
  size_t num_inputs() const { return inputs->size(); }
  size_t num_outputs() const { return outputs->size(); }

  // Asynchronous tasks: the handle that completes this act (see the contract above). Taking it
  // again in the same call returns another copy of the same handle.
  KernelCompletion TakeCompletion();
  bool asynchronous() const { return completion_slot != nullptr; }

  // Set by the runtime (asynchronous tasks only); kernels use TakeCompletion.
  const std::shared_ptr<runtime_internal::CompletionSlot>* completion_slot = nullptr;
  int64_t completion_launch = -1;
  bool completion_taken = false;  // the runtime reads it after the call
  bool completion_refused = false;  // a synchronous task asked for a handle
};

// A kernel may keep state in its closure (RNG, moving statistics); it is only ever
// called from its owning actor, one act at a time.
using KernelFn = std::function<Status(KernelContext&)>;

}  // namespace actorflow

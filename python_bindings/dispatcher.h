// Dispatcher: a compiled job's queue of Python callbacks (push completions, watch handlers),
// run holding the GIL in the order the runtime produced them. Every job's queue is served by
// ONE callback thread per process, started by the first callback of any job and ended when the
// last job that used it stops: the number of OS threads does not grow with compiled jobs, with
// or without callbacks. Items of one job run in order; items of different jobs run in the
// order they were enqueued (one GIL: running them on more threads would not run them faster),
// several under one GIL hold when they queue up (dispatcher.cc). The thread is named
// "af.callbacks".
// Actor threads only enqueue (never touch Python objects, never wait for the GIL), so a slow
// or blocked Python thread never stalls the actors; memory stays bounded because callers of
// push wait while too many of their job's calls are pending (TryBeginCall).
// On the callback thread (inside a callback), WaitIdle returns at once: a synchronous call made
// from a callback returns before its own watch handlers run (they run after the callback).
//
// Thread-safety: Enqueue from any thread; Stop/WaitIdle/TryBeginCall without holding the GIL.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace actorflow {
namespace python {

class Dispatcher {
 public:
  // A unit of work run with the GIL held. `run` may be empty (drop only): `drop` always runs
  // with the GIL held, after `run`, to release the Python objects the item holds.
  struct Item {
    std::function<void()> run;
    std::function<void()> drop;
  };

  Dispatcher();
  ~Dispatcher();  // Stop()

  // Also after Stop: what is enqueued still runs (and releases its objects).
  void Enqueue(Item item);
  // Blocks until every item of this job enqueued so far has run (returns at once on the
  // callback thread).
  void WaitIdle();
  // Counts this job's calls between TryBeginCall (caller) and EndCall (after its callback ran);
  // TryBeginCall waits while `limit` calls are pending, unless called from the callback thread,
  // and gives up after `timeout` (false then, nothing counted), so a caller can check for
  // signals between tries.
  bool TryBeginCall(int64_t limit, std::chrono::milliseconds timeout);
  void EndCall();
  // Runs what this job has queued, then releases its hold on the callback thread (the thread
  // ends when no job holds it; Stop of the last one joins it). Idempotent. Must not hold the
  // GIL. Called on the callback thread itself (a callback clearing the session), it returns at
  // once; the job's queued items still run.
  void Stop();
  static bool on_callback_thread();
  // After fork() the callback thread does not exist in the child: its state (maybe locked) is
  // left behind and the child starts afresh on first use. Call in the child only.
  void AbandonAfterFork();

  // One job's counters, guarded by the callback thread's shared mutex. Public only so that the
  // shared queue (dispatcher.cc) can keep a job's state alive until its queued items ran.
  struct JobState {
    int64_t enqueued = 0, done = 0, pending_calls = 0;
    bool holds_thread = false, stopping = false;
  };

 private:
  std::shared_ptr<JobState> job_;
};

}  // namespace python
}  // namespace actorflow

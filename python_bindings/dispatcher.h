// Dispatcher: the one thread per compiled job (started by the job's first callback; jobs
// without callbacks have none) that runs Python callbacks (push completions,
// watch handlers) holding the GIL, in the order the runtime produced them. Actor threads only
// enqueue (never touch Python objects, never wait for the GIL), so a slow or blocked Python
// thread never stalls the actors; memory stays bounded because callers of push wait while
// too many calls are pending (WaitPending).
//
// Thread-safety: Enqueue from any thread; Stop/WaitIdle/WaitPending without holding the GIL.
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

  void Enqueue(Item item);
  // Blocks until every item enqueued so far has run (returns at once on the dispatcher thread).
  void WaitIdle();
  // Counts calls between TryBeginCall (caller) and EndCall (after its callback ran);
  // TryBeginCall waits while `limit` calls are pending, unless called from the dispatcher
  // thread, and gives up after `timeout` (false then, nothing counted), so a caller can check
  // for signals between tries.
  bool TryBeginCall(int64_t limit, std::chrono::milliseconds timeout);
  void EndCall();
  // Runs what is queued, then ends the thread. Idempotent. Must not hold the GIL. Called on
  // the dispatcher thread itself (a callback clearing the session), it returns at once and the
  // thread ends after the item running now and what is queued.
  void Stop();
  bool on_dispatcher_thread() const { return std::this_thread::get_id() == thread_id_.load(); }
  // After fork() the thread does not exist in the child: never join it or touch its state
  // (it may be locked). Call in the child only; the old state is leaked.
  void AbandonAfterFork();

 private:
  // Shared with the thread, which may outlive the Dispatcher (destroyed from one of its own
  // items: the thread is detached then and finishes on this state alone).
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Item> queue;
    int64_t enqueued = 0, done = 0, pending_calls = 0;
    bool stopping = false, finished = false;
  };
  static void Loop(std::shared_ptr<State> state);
  void StartLocked();  // state_->mu held
  std::shared_ptr<State> state_;
  std::thread thread_;               // set once, with started_
  bool started_ = false;             // guarded by state_->mu
  std::atomic<std::thread::id> thread_id_{};
};

}  // namespace python
}  // namespace actorflow

// Dispatcher: the one thread per compiled job that runs Python callbacks (push completions,
// watch handlers) holding the GIL, in the order the runtime produced them. Actor threads only
// enqueue (never touch Python objects, never wait for the GIL), so a slow or blocked Python
// thread never stalls the actors; memory stays bounded because callers of push wait while
// too many calls are pending (WaitPending).
//
// Thread-safety: Enqueue from any thread; Stop/WaitIdle/WaitPending without holding the GIL.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
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
  // Counts calls between BeginCall (caller) and EndCall (after its callback ran); BeginCall
  // blocks while `limit` calls are pending, unless called from the dispatcher thread.
  void BeginCall(int64_t limit);
  void EndCall();
  // Runs what is queued, then ends the thread. Idempotent. Must not hold the GIL.
  void Stop();
  bool on_dispatcher_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  int64_t enqueued_ = 0, done_ = 0, pending_calls_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace python
}  // namespace actorflow

// CallWait: how a synchronous caller waits for its iteration (Runtime::Run, CompiledJob::Run).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "actors/runtime.h"
#include "actors/status.h"

namespace actorflow {

// A synchronous caller's wait for one iteration: pass completion() to Push, then Wait(). A
// short iteration comes back in microseconds, so Wait polls (yielding the core to the actors)
// for up to 200 us before it blocks: blocking at once would add a thread wake-up on each side
// (a halted vCPU's costs more than the chain). The completion's last touch of this object is
// the flag Wait polls, set after its lock is released, so a polling caller returns without
// taking the lock (it would find it held in the instant before the unlock and sleep on it).
// Owned by the waiting thread; one iteration per object.
class CallWait {
 public:
  // Captures only `this` (fits std::function's own storage: no allocation).
  Completion completion();
  // The iteration's status, once its completion ran. Only after a successful Push.
  Status Wait();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;  // under mu_
  std::atomic<bool> finished_flag_{false};
  Status result_;
};

}  // namespace actorflow

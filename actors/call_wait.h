// CallWait: how a synchronous caller waits for its iteration (Runtime::Run, CompiledJob::Run).
#pragma once

#include <atomic>
#include <chrono>
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
// While it polls, the caller lends its thread to the kernels (CallWaitAssist below): a caller
// that polls is one more runnable thread on the host, so on a budget whose kernels split their
// work over helper threads it takes a helper's share instead of competing with it for a core.
// It keeps polling while work keeps coming (200 us past the last chunk it ran).
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

// Polls `flag` (acquire) for up to `poll`, extended while the thread finds kernel work to do
// (CallWaitAssist below); whether the flag was set. CallWait::Wait and the Python binding's
// synchronous call poll with it before they block.
bool PollForCompletion(const std::atomic<bool>& flag,
                       std::chrono::microseconds poll = std::chrono::microseconds(200));

// Work a polling caller can do for the process, installed once by the kernels' thread pool
// (kernels/parallel_chunks.cc; the runtime does not depend on the kernels). enter/leave bracket
// a caller's polling (the pool then leaves a helper asleep for the share the caller can take);
// poll runs chunks of a job being split, if any is claimable, and says whether it ran one.
struct CallWaitAssist {
  void (*enter)();
  bool (*poll)();
  void (*leave)();
};
// `assist` must outlive the process's calls (a static object); null removes it.
void SetCallWaitAssist(const CallWaitAssist* assist);

}  // namespace actorflow

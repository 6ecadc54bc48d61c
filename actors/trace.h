// The runtime's one observer interface. Every actor reports its acts and waits here;
// nothing else in the runtime logs. Implementations must be thread-safe: actors call
// from CAF worker threads concurrently. docs/trace_format.md specifies the JSON written
// by ChromeTraceRecorder.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace actorflow {
namespace plan { class Plan; }

enum class WaitReason { kInputNotReady = 0, kOutputRegistersFull = 1 };
const char* WaitReasonName(WaitReason reason);  // "input not ready" / "output registers full"

class RuntimeObserver {
 public:
  virtual ~RuntimeObserver() = default;
  // Called once when a runtime instantiates a plan (before any act).
  virtual void OnPlan(const plan::Plan& plan) {}
  // One act of task `task_id` for `iteration`, times in ns from a steady clock.
  virtual void OnAct(int64_t task_id, int64_t iteration, int64_t start_ns, int64_t end_ns) = 0;
  // A wait of `task_id` that ended at end_ns; `iteration` is the one the actor waited to run.
  virtual void OnWait(int64_t task_id, int64_t iteration, WaitReason reason, int64_t start_ns, int64_t end_ns) = 0;
};

// Steady-clock nanoseconds, the time base of all observer calls.
int64_t NowNs();

}  // namespace actorflow

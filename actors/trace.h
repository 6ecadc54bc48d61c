// The runtime's one observer interface. Every actor reports its acts and waits to its own
// TraceLane (no lock: one writer per lane); nothing else in the runtime logs.
// docs/trace_format.md specifies the JSON written by ChromeTraceRecorder.
#pragma once

#include <atomic>
#include <cstdint>

#include "actors/trace_lane.h"

namespace actorflow {
namespace plan { class Plan; }

// Steady-clock nanoseconds (wall-clock measurements; the trace clock where there is no TSC).
int64_t NowNs();

// The trace clock: cheap enough to read twice per act. Where the kernel itself keeps time
// with an invariant TSC (x86-64, clocksource "tsc"), a tick is one TSC cycle: rdtsc costs about
// half of steady_clock::now() here. Elsewhere ticks are steady-clock nanoseconds. The
// recorder converts ticks to time when it writes (trace_recorder.cc, NsPerTick).
namespace trace_clock {
extern const bool kTscTicks;  // decided once, at start-up
inline int64_t Now() {
#if defined(__x86_64__)
  if (kTscTicks) return static_cast<int64_t>(__builtin_ia32_rdtsc());
#endif
  return NowNs();
}
}  // namespace trace_clock

class RuntimeObserver {
 public:
  virtual ~RuntimeObserver() = default;
  // Called once when a runtime instantiates a plan (before any act).
  virtual void OnPlan(const plan::Plan& plan) {}
  // Called once after OnPlan: the number of worker threads the actors share.
  virtual void OnWorkers(int workers) {}
  // The lane the actor of task `task_id` appends its acts and waits to (trace clock ticks,
  // trace_clock::Now()); nullptr: not observed. Called after OnPlan, before any act; the lane
  // must stay valid until the runtime is destroyed.
  virtual TraceLane* LaneFor(int64_t task_id) = 0;
  // LaneFor(kHostLane): the host's lane. Each Push appends one act (copying the inputs in and
  // starting the iteration) after a wait for "output registers full" when the sources' registers
  // were all in flight (backpressure reaching the caller). Pushes are serialized by the runtime.
  static constexpr int64_t kHostLane = -1;

  // Pause and resume recording on a live runtime (any thread): while paused, actors make no
  // observer call and read no clock. A wait in progress when recording resumes is not recorded.
  void set_recording(bool on) { recording_.store(on, std::memory_order_relaxed); }
  bool recording() const { return recording_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> recording_{true};
};

}  // namespace actorflow

// StepClock: times the consecutive steps of a compile (passes, lowering, the session's steps)
// as wall time and as the calling thread's CPU time. The CPU time is what a step costs whatever
// else the host runs: on a loaded host the wall time of a step includes the time its thread
// waited for a core, which says nothing about the step.
//
// Not thread-safe: one clock per compile, used by the compiling thread.
#pragma once

#include <time.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace actorflow {
namespace graph {

// (step, seconds) in the order the steps ran.
using StepTimings = std::vector<std::pair<std::string, double>>;

class StepClock {
 public:
  // Either list may be null (that time is not recorded).
  StepClock(StepTimings* wall, StepTimings* cpu) : wall_(wall), cpu_(cpu) { Restart(); }

  // Appends the time since the previous Lap or Restart as `step`.
  void Lap(const std::string& step) {
    const auto now = std::chrono::steady_clock::now();
    const double cpu_now = ThreadCpuSeconds();
    if (wall_ != nullptr) wall_->emplace_back(step, std::chrono::duration<double>(now - wall_started_).count());
    if (cpu_ != nullptr) cpu_->emplace_back(step, cpu_now - cpu_started_);
    wall_started_ = now;
    cpu_started_ = cpu_now;
  }
  // Starts the next step now: what ran since the last lap (a DOT dump) is not counted.
  void Restart() {
    wall_started_ = std::chrono::steady_clock::now();
    cpu_started_ = ThreadCpuSeconds();
  }

  static double ThreadCpuSeconds() {
    timespec now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
  }

 private:
  StepTimings* wall_;
  StepTimings* cpu_;
  std::chrono::steady_clock::time_point wall_started_;
  double cpu_started_ = 0;
};

}  // namespace graph
}  // namespace actorflow

// ChromeTraceRecorder: a RuntimeObserver that keeps every act and wait in memory (one buffer
// per actor, appended only by that actor, so recording takes no lock) and writes Chrome trace
// event JSON (docs/trace_format.md) that Perfetto, chrome://tracing and
// `python -m actorflow.trace` open.
// Thread-safety: OnAct/OnWait from the owning actors; Write/ToJson only after the runtime
// drained (no act in progress). One recorder observes one plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/status.h"
#include "actors/trace.h"

namespace actorflow {

class ChromeTraceRecorder : public RuntimeObserver {
 public:
  ChromeTraceRecorder();
  ~ChromeTraceRecorder() override;
  void OnPlan(const plan::Plan& plan) override;
  TraceLane* LaneFor(int64_t task_id) override;
  void OnWorkers(int workers) override { workers_ = workers; }

  std::string ToJson() const;
  Status Write(const std::string& path) const;  // temp file + rename
  // Whether a trace can be written to `path`: not a directory or special file, in an existing
  // writable directory. The error names the path and the OS error. Checked when tracing is set
  // up, so a bad path fails there rather than losing the trace at shutdown.
  static Status CheckWritable(const std::string& path);
  size_t num_events() const;  // acts + waits recorded (sub-microsecond waits included)

 private:
  struct Lane;
  std::vector<Lane*> lanes_;     // indexed by task position in the plan
  std::string plan_json_actors_;
  std::string job_name_;
  int workers_ = 0;  // 0: not told
  int64_t origin_ticks_, origin_ns_;  // one instant on both clocks
};

}  // namespace actorflow

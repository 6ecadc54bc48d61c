// Plans and small helpers of cluster_bench (bench/cluster_bench.cc), which document the measures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/proto/plan.pb.h"
#include "actors/status.h"

namespace actorflow_bench {

// Plan building: a register of `bytes` uint8 (bytes < 0: a register without blobs, what a
// control edge reads), a task of `kind` on `machine` (id = its index), an input.
void AddRegister(actorflow::plan::Task* task, const char* name, int64_t bytes);
actorflow::plan::Task* AddTask(actorflow::plan::Plan& plan, const std::string& name, actorflow::plan::TaskKind kind,
                               int machine);
void AddInput(actorflow::plan::Task* task, int64_t producer, bool control);
// Recomputes every register's consumer list from the tasks' inputs.
void FillConsumers(actorflow::plan::Plan& plan);
// A send or recv task of a hand-made plan (what graph::InsertCrossMachineTransfers makes).
actorflow::plan::Task* AddTransfer(actorflow::plan::Plan& plan, const char* op, int machine, int peer, int channel,
                                   int64_t bytes);

// Machine `rank`'s part of the register round trip: machine 0's "origin" register is sent to
// machine 1, whose RECV register is sent straight back into machine 0's RECV register, which a
// "check" task reads. No feed, fetch or copy (the kernels "origin" and "check" are the bench's).
actorflow::StatusOr<actorflow::plan::Plan> RegisterRoundTripPlan(int64_t bytes, int rank);

// The stamp the origin writes into both ends of its register at `iteration`, and its check.
void Stamp(char* data, int64_t bytes, int64_t iteration);
bool Stamped(const char* data, int64_t bytes, int64_t iteration);

// Median and range of per-round values.
struct Spread {
  double median = 0, low = 0, high = 0;
};
Spread SpreadOf(std::vector<double> values);

// How an all-reduce measure runs: through runtime calls (each rank feeds its values and fetches
// the sum) by the ring or by the funnel through machine 0, or the ring on registers alone (an
// "origin" task per machine holds the values, a "check" task reads the sum; no feed, no fetch).
enum class AllReduceMode { kRingCall, kFunnelCall, kRingRegisters };
actorflow::plan::Plan AllReducePlan(int world, int64_t bytes, AllReduceMode mode);

}  // namespace actorflow_bench

// ClusterMembership: this process as one machine (rank) of a multi-machine job: the control
// plane (comm/cluster.h) and the data plane (comm/data_plane.h) on the process's environment
// (session/environment.h). One per process, started by the front end before its first job
// (python -m actorflow.launch sets the ranks; docs/cluster.md) and stopped at exit.
//
// With a membership, a job compiled for machine_num == world_size machines checks its plan
// with every rank (Cluster::CheckPlan), instantiates only this rank's tasks and moves the
// bytes of cross-machine edges through the data plane (session/session.cc).
//
// Thread-safety: all functions are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <vector>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "actors/status.h"
#include "comm/cluster.h"
#include "comm/data_plane.h"
#include "graph/passes.h"

namespace actorflow {

class ClusterMembership {
 public:
  // Loads the network layer into the process's environment (before its first actor system:
  // FailedPrecondition naming the cause otherwise), joins the cluster (rendezvous: every rank
  // must come within options.rendezvous_timeout) and starts the data plane. FailedPrecondition
  // when already started.
  static Status Start(const ClusterOptions& options);
  // This process's membership, or null when it is not part of a cluster (or was stopped).
  static std::shared_ptr<ClusterMembership> Get();
  // Leaves the cluster (Cluster::Shutdown: a barrier every rank makes, bounded by `timeout`).
  // Call after the jobs drained. Ok when not started.
  static Status Stop(std::chrono::milliseconds timeout);

  // Checks with every rank that they compiled the same `plan` (Cluster::CheckPlan: a collective,
  // one per compiled job, in the same order on every rank) and returns this rank's part of it.
  StatusOr<graph::MachinePlan> CheckAndExtract(const plan::Plan& plan);

  ~ClusterMembership();  // stops the deadline watch

  // A call of multi-machine job `job` pushed by this rank: counted (Cluster::NoteCall) and, with
  // a call deadline (ClusterOptions::call_deadline), watched: while it has not ended
  // `call_deadline` after this, a watch thread asks every rank whether it made the call
  // (Cluster::CheckCalls): if one did not, the cluster fails on every rank with the error
  // naming it (the data plane then fails this call and every later one); if all did, the call
  // is slow and is watched for another deadline. Returns the token for EndCall (0: unwatched).
  // `job` must outlive the call (the compiled job's name). No allocation once warm.
  uint64_t StartCall(const std::string& job);
  // The call of `token` completed (successfully or not). Cheap; 0 is ignored.
  void EndCall(uint64_t token);

  Cluster& cluster() { return *cluster_; }
  DataPlane& data_plane() { return *data_plane_; }
  int rank() const { return cluster_->rank(); }
  int world_size() const { return cluster_->world_size(); }
  const ClusterOptions& options() const { return options_; }

 private:
  ClusterOptions options_;
  std::shared_ptr<ActorEnvironment> actors_;
  std::unique_ptr<Cluster> cluster_;
  std::shared_ptr<DataPlane> data_plane_;

  void Watch();  // the watch thread
  struct Watched {
    uint64_t token = 0;
    const std::string* job = nullptr;
    int64_t calls = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::vector<Watched> watched_;  // pending calls, unordered (few: the registers bound them)
  uint64_t next_token_ = 1;
  bool stopping_ = false;
  std::thread watcher_;  // started with the first watched call
};

}  // namespace actorflow

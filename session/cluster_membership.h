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
#include <memory>

#include "actors/status.h"
#include "comm/cluster.h"
#include "comm/data_plane.h"

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
};

}  // namespace actorflow

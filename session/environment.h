// Environment: what lives as long as the process and is shared by every compiled job: the
// actor system(s) running every runtime's actors (later the io middleman and the device list).
// One per process (Environment::Global()); sessions hold it by shared_ptr.
//
// Threads: jobs asking for the same number of scheduler workers share one actor system, so
// compiling more jobs adds no OS threads (compiled jobs default to one worker: one system in
// practice). A job's kernel_threads is its kernels' own share, set per kernel call, so jobs
// with different shares run on the same workers.
//
// fork(): the child inherits none of the scheduler's threads. The child handler (pthread_atfork,
// registered at first use) abandons every actor system, never to be joined, and bumps
// generation(); objects built on an older generation (runtimes, dispatchers) must be
// abandoned too and rebuilt on the child's fresh systems, made on demand.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "actors/environment.h"

namespace actorflow {

class Environment {
 public:
  static std::shared_ptr<Environment> Global();

  // The shared actor system with `num_workers` scheduler threads, made on first request.
  StatusOr<std::shared_ptr<ActorEnvironment>> ActorsFor(int num_workers);
  // Adds `configure` (EnvironmentOptions::configure_system) to every actor system made from
  // now on, e.g. to load the network layer (comm/cluster.h) so the cluster's control plane
  // runs on the process's one system instead of a second one. Only before the first system
  // exists (a system cannot gain the network layer after construction): FailedPrecondition
  // otherwise. Without a call nothing changes.
  Status SetSystemConfigurator(std::function<void(caf::actor_system_config&)> configure);
  // Scheduler threads started so far, over every actor system of this generation.
  int scheduler_threads() const;

  // Incremented in the child of every fork(); 0 in a process that never forked.
  static uint64_t generation();

 private:
  Environment() = default;
  static void AfterForkInChild();
  mutable std::mutex mu_;
  std::map<int, std::shared_ptr<ActorEnvironment>> systems_;  // by worker count
  std::function<void(caf::actor_system_config&)> configure_system_;
};

}  // namespace actorflow

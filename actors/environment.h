// ActorEnvironment: one CAF actor system (its scheduler's worker threads) and the thread
// budget it was sized for, shared by every Runtime created with it. A process keeps one (the
// session owns it), so the number of OS threads does not grow with the number of compiled
// jobs, and the network layer has one place to live.
//
// Thread budget: `num_workers` scheduler threads run every actor of every runtime sharing the
// environment; each kernel may use its own job's kernel_threads (RuntimeOptions), which it
// sets per call (kernels/README.md), so jobs with different shares coexist on one scheduler.
//
// Thread-safety: immutable after Create; system() may be used from any thread. Every Runtime
// created with an environment must be destroyed before the environment (they hold it by
// shared_ptr, so this holds unless someone leaks one).
#pragma once

#include <functional>
#include <memory>

#include "actors/status.h"

namespace caf { class actor_system; class actor_system_config; }

namespace actorflow {

struct EnvironmentOptions {
  // Total thread budget (CAF workers x kernel threads). 0 = number of cores.
  int num_threads = 0;
  // CAF scheduler workers. 0 = num_threads.
  int num_workers = 0;
  // Threads one kernel may use by default. 0 = num_threads / num_workers, at least 1.
  int kernel_threads = 0;
  // Called on every scheduler thread as it starts, with the resolved kernel_threads (e.g. to
  // call omp_set_num_threads; the runtime itself knows no threading library). Thread-safe.
  std::function<void(int kernel_threads)> on_worker_start;
  // Called once with CAF's configuration before the actor system is built, for what must be
  // in place at construction (the network layer's module and its settings: comm/cluster.h).
  // Unset: the configuration, and so the thread count, is exactly the single-process one.
  std::function<void(caf::actor_system_config&)> configure_system;
};

class ActorEnvironment {
 public:
  static StatusOr<std::shared_ptr<ActorEnvironment>> Create(const EnvironmentOptions& options);
  ~ActorEnvironment();  // joins the scheduler's threads
  ActorEnvironment(const ActorEnvironment&) = delete;
  ActorEnvironment& operator=(const ActorEnvironment&) = delete;

  caf::actor_system& system() { return *system_; }
  int num_workers() const { return num_workers_; }
  int kernel_threads() const { return kernel_threads_; }

  // After fork() the child has none of the scheduler's threads: the environment cannot run
  // actors there and cannot be joined. Call in the child only; the object is then abandoned
  // (its memory deliberately leaked by the destructor) so exiting never waits for threads
  // that do not exist.
  void AbandonAfterFork() { abandoned_ = true; }

 private:
  ActorEnvironment() = default;
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  int num_workers_ = 1;
  int kernel_threads_ = 1;
  bool abandoned_ = false;
};

// Resolves the budget as ActorEnvironment::Create does: {workers, kernel threads}.
std::pair<int, int> ResolveThreadBudget(int num_threads, int num_workers, int kernel_threads);

// The default number of scheduler workers for a job whose tasks are on `devices` CPU devices
// under a budget of `budget` threads: one per device while each keeps at least two threads
// (min(devices, budget / 2)), else one worker for all devices, each kernel on the whole budget.
// Why: devices in one process add no cores; a worker with a one-thread share runs each small
// kernel alone and pays a cross-thread hand-off (a wake-up, ~10 us here) at every edge between
// devices, while one worker runs the devices' tasks back to back and puts both cores in every
// large kernel. On this 2-core host (budget 2, 2 devices) one worker keeps the seed MLP's
// 2-device train step within 1.03-1.06x of one device where a worker per device (lending its
// idle share) took 1.26-1.28x (bench/parallel_bench.cc MlpTwoOverOneDevice). With two or more
// threads per worker the devices' kernels still have threads of their own, and an idle one
// lends them (RuntimeOptions::lend_idle_threads). Always >= 1.
int DefaultWorkerCount(int budget, int devices);

}  // namespace actorflow

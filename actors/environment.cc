#include "actors/environment.h"

#include <caf/all.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>

#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

#include "actors/job_queue.h"
#include "actors/task_state.h"

namespace actorflow {
namespace {

// Hands each CAF thread its share of the thread budget (see EnvironmentOptions::on_worker_start).
class WorkerStartHook : public caf::thread_hook {
 public:
  WorkerStartHook(std::function<void(int)> on_start, int kernel_threads)
      : on_start_(std::move(on_start)), kernel_threads_(kernel_threads) {}
  // The actor system is gone when the hook is destroyed, so every thread_started call has
  // returned; CAF's joins of some threads are invisible to TSan, hence the explicit edge.
  ~WorkerStartHook() override { HappensAfterReceive(this); }
  void init(caf::actor_system&) override {}
  void thread_started() override {
    on_start_(kernel_threads_);
    HappensBeforeSend(this);
  }
  void thread_terminates() override {}

 private:
  const std::function<void(int)> on_start_;
  const int kernel_threads_;
};

// CAF's work stealing, except where a job an actor makes runnable goes. CAF puts it at the
// head of the sending worker's own queue (the worker runs the newest first) and wakes nobody: a
// worker that went to sleep (its polling ran out) only looks for work to steal every
// relaxed-sleep-duration. When one actor makes two others runnable (one producer read by every
// device's first kernel), one of them then waits behind the other on the sender's worker while
// the other worker sleeps: the 2-device seed MLP's second hidden matmul waited ~0.3-0.5 ms so,
// one whole matmul. Here, when the sender's queue already holds a job, the new one still goes
// to its head, and the oldest (the one this worker would run last) goes to a sleeping worker
// whose queue is empty, appended there with CAF's wake-up (external_enqueue). The sender's
// order is unchanged; if the sleeper is slow to wake (a loaded host), the sender steals the
// job back as soon as it runs out of work, as it steals any other. A chain (one producer, one
// ready consumer) keeps running on its worker and pays no wake-up.
class SpreadingWorkStealing : public caf::policy::work_stealing {
 public:
  // CAF's per-worker data (polling strategies, sleep state), with the worker's jobs in a
  // JobQueue (actors/job_queue.h) instead of CAF's queue, which stays unused.
  struct worker_data : caf::policy::work_stealing::worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator* parent)
        : caf::policy::work_stealing::worker_data(parent) {}
    worker_data(const worker_data& other) : caf::policy::work_stealing::worker_data(other) {}
    JobQueue<caf::resumable> jobs;
  };

  // CAF's victim choice (a random other worker), taking its oldest job.
  template <class Worker>
  caf::resumable* TrySteal(Worker* self) {
    auto* parent = self->parent();
    const size_t workers = parent->num_workers();
    if (workers < 2) return nullptr;
    size_t victim = d(self).uniform(d(self).rengine);
    if (victim == self->id()) victim = workers - 1;
    return d(parent->worker_by_id(victim)).jobs.take_tail();
  }

  // CAF's dequeue, except that the aggressive polling yields the core every 64 attempts (~1 us)
  // while it spins. An idle worker polls ~100 us for the next message before it sleeps; a
  // caller thread waiting for the iteration on the same core (a loaded host, or the scheduler
  // placing both there) could only run when that polling ended: a 10-actor chain's call took
  // ~100 us so against ~6 us with a core each (ChainLatency/10/0, the process pinned to one
  // core). A yield with no other thread runnable on the core returns at once.
  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& data = d(self);
    for (int k = 0; k < 2; ++k) {  // aggressive, then moderate polling
      const auto& strategy = data.strategies[k];
      for (size_t i = 0; i < strategy.attempts; i += strategy.step_size) {
        if (caf::resumable* job = data.jobs.take_head()) return job;
        if (i % strategy.steal_interval == 0)
          if (caf::resumable* job = TrySteal(self)) return job;
        if (strategy.sleep_duration.count() > 0) std::this_thread::sleep_for(strategy.sleep_duration);
        else if ((i & 63) == 63) std::this_thread::yield();
      }
    }
    // Nothing going on: sleep until a message comes (external_enqueue wakes the worker), looking
    // for jobs to steal every relaxed-sleep-duration times the steal interval.
    const auto& relaxed = data.strategies[2];
    for (size_t timeouts = 1;; ) {
      bool woken;
      {
        std::unique_lock<std::mutex> guard(data.waitdata.lock);
        data.waitdata.sleeping = true;
        woken = data.waitdata.cv.wait_for(guard, relaxed.sleep_duration, [&] { return !data.jobs.empty(); });
        data.waitdata.sleeping = false;
      }
      if (woken) {
        if (caf::resumable* job = data.jobs.take_head()) return job;
      } else if (timeouts++ % relaxed.steal_interval == 0) {
        if (caf::resumable* job = TrySteal(self)) return job;
      }
    }
  }

  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    auto& data = d(self);
    data.jobs.append(job);
    std::lock_guard<std::mutex> guard(data.waitdata.lock);
    if (data.waitdata.sleeping && !data.jobs.empty()) data.waitdata.cv.notify_one();
  }

  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    d(self).jobs.append(job);
  }

  template <class Worker, class UnaryFunction>
  void foreach_resumable(Worker* self, UnaryFunction f) {
    while (caf::resumable* job = d(self).jobs.take_head()) f(job);
  }

  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    const bool had_work = !d(self).jobs.empty();
    d(self).jobs.prepend(job);
    if (!had_work) return;
    auto* coordinator = self->parent();
    const size_t workers = coordinator->num_workers();
    for (size_t k = 1; k < workers; ++k) {
      auto* other = coordinator->worker_by_id((self->id() + k) % workers);
      bool idle;
      {
        std::lock_guard<std::mutex> guard(d(other).waitdata.lock);
        idle = d(other).waitdata.sleeping && d(other).jobs.empty();
      }
      if (idle) {
        // Null if other workers stole everything meanwhile.
        if (caf::resumable* oldest = d(self).jobs.take_tail()) other->external_enqueue(oldest);
        return;
      }
    }
  }
};

}  // namespace
}  // namespace actorflow

// The worker loop for the policy above. Each job is dequeued, resumed, and then kept, released
// or ended according to its resume_result, as CAF's scheduler contract for resumables requires.
// What it leaves out is the logger bracket CAF's generic loop puts around every job
// (CAF_PUSH_AID_FROM_PTR): a dynamic_cast of the job to abstract_actor (a cross-cast walking the
// actor's class hierarchy: ~8% of a hop in a 100-actor chain) and two logger look-ups with a
// scope guard, only to tag log lines that this CAF, built with logging compiled out, never
// writes. An explicit specialization of the member for this one policy, so CAF itself is not
// patched; it must precede the coordinator's instantiation below.
template <>
void caf::scheduler::worker<actorflow::SpreadingWorkStealing>::run() {
  CAF_SET_LOGGER_SYS(&system());
  for (;;) {
    resumable* job = policy_.dequeue(this);
    policy_.before_resume(this, job);
    const resumable::resume_result result = job->resume(this, max_throughput_);
    policy_.after_resume(this, job);
    switch (result) {
      case resumable::resume_later:
        policy_.resume_job_later(this, job);  // the job keeps its reference
        break;
      case resumable::done:
        policy_.after_completion(this, job);
        intrusive_ptr_release(job);
        break;
      case resumable::awaiting_message:
        intrusive_ptr_release(job);  // enqueued again when a message comes
        break;
      case resumable::shutdown_execution_unit:
        policy_.after_completion(this, job);
        policy_.before_shutdown(this);
        return;
    }
  }
}

namespace actorflow {

std::pair<int, int> ResolveThreadBudget(int num_threads, int num_workers, int kernel_threads) {
  unsigned cores = std::thread::hardware_concurrency();
  int threads = num_threads > 0 ? num_threads : (cores == 0 ? 2 : static_cast<int>(cores));
  int workers = num_workers > 0 ? num_workers : threads;
  int per_kernel = kernel_threads > 0 ? kernel_threads : std::max(1, threads / workers);
  return {workers, per_kernel};
}

int DefaultWorkerCount(int budget, int devices) { return std::max(1, std::min(devices, budget / 2)); }

StatusOr<std::shared_ptr<ActorEnvironment>> ActorEnvironment::Create(const EnvironmentOptions& options) {
  if (options.num_threads < 0 || options.num_workers < 0 || options.kernel_threads < 0)
    return InvalidArgument("thread budget: num_threads, num_workers and kernel_threads must be >= 0 (0 = default), got " +
                           std::to_string(options.num_threads) + ", " + std::to_string(options.num_workers) + ", " +
                           std::to_string(options.kernel_threads));
  std::shared_ptr<ActorEnvironment> environment(new ActorEnvironment());
  auto [workers, kernel_threads] = ResolveThreadBudget(options.num_threads, options.num_workers, options.kernel_threads);
  environment->num_workers_ = workers;
  environment->kernel_threads_ = kernel_threads;
  auto config = std::make_unique<caf::actor_system_config>();
  if (options.on_worker_start) config->add_thread_hook<WorkerStartHook>(options.on_worker_start, kernel_threads);
  config->set("scheduler.max-threads", static_cast<size_t>(workers));
  // The actor system takes a scheduler module given here instead of making its own.
  config->module_factories.push_back([](caf::actor_system& system) -> caf::actor_system::module* {
    return new caf::scheduler::coordinator<SpreadingWorkStealing>(system);
  });
  // CAF's default polling adds latency between actors; poll aggressively, then sleep.
  config->set("work-stealing.moderate-poll-attempts", static_cast<size_t>(0));
  // And keep polling for ~100 us after the last message before sleeping: a caller's next call
  // usually comes within that, and waking a sleeping worker costs ~10 us here (MLP batch-1
  // inference 95 -> 56 us, empty job round trip 20 -> 13 us; ~100 us of CPU per idle gap).
  config->set("work-stealing.aggressive-poll-attempts", static_cast<size_t>(10000));
  // An idle worker that fell asleep checks for stealable actors every relaxed-sleep-duration
  // (CAF's default, 10 ms, lets a ready actor wait behind a long kernel that long).
  config->set("work-stealing.relaxed-sleep-duration", caf::timespan{std::chrono::milliseconds(1)});
  config->set("logger.console", caf::atom("none"));
  if (options.configure_system) options.configure_system(*config);
  environment->system_ = std::make_unique<caf::actor_system>(*config);
  environment->config_ = std::move(config);
  return environment;
}

ActorEnvironment::~ActorEnvironment() {
  if (abandoned_) {
    // Joining would wait for threads that only existed in the parent process.
    (void)system_.release();
    (void)config_.release();
    return;
  }
  system_.reset();
  config_.reset();
}

}  // namespace actorflow

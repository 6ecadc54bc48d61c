#include "actors/environment.h"

#include <caf/all.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>

#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

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

// CAF's work stealing with five changes, about where a runnable job (an actor with messages)
// goes, who may take it, and how long an idle worker polls:
//  - Each worker's jobs are in a JobQueue (actors/job_queue.h: a ring under one short lock)
//    instead of CAF's list, which allocated per job and walked itself under both its locks
//    whenever a thief took its tail.
//  - The job an act makes runnable last (what CAF puts at the head of the sending worker's
//    queue, to run next) goes into the worker's `next` slot, which other workers leave alone
//    unless its owner has not come back for a job for kPatience (it is inside a long act);
//    the job that was there moves to the head of the queue, where thieves may take it. Why:
//    with CAF's rule (a polling worker takes the tail of any non-empty queue) the idle second
//    worker took a chain's next actor while the sender was still finishing its act, then the
//    first worker took the one after: one iteration of a 10-actor chain of no-op acts hopped
//    between the cores at every actor (~7 steals per iteration) and took 13-17 us in about half
//    the runs against ~6 us on one worker. A thief still takes queued jobs at once (an
//    acknowledgement, another iteration's actor: a pipeline's second core).
//  - A job from outside the workers (a caller's Push) goes to the worker that got the last one
//    if it is polling for work, else to another polling worker, else round robin (CAF: always
//    round robin, so consecutive iterations started on alternating cores).
//  - When one act makes two others runnable while another worker sleeps (one producer read by
//    every device's first kernel), the queued one goes to the sleeper at once, with CAF's
//    wake-up (external_enqueue): a sleeping worker looks for work to steal only every
//    relaxed-sleep-duration, and the 2-device seed MLP's second hidden matmul waited ~0.3-0.5
//    ms behind the first so. If the sleeper is slow to wake (a loaded host), the sender steals
//    the job back as soon as it runs out of work. A chain (one producer, one ready consumer)
//    keeps running on its worker and pays no wake-up.
//  - An idle spare worker (IsSpare) polls ~10 us instead of ~100 us before it sleeps.
class SpreadingWorkStealing : public caf::policy::work_stealing {
 public:
  static constexpr std::chrono::nanoseconds kPatience{3000};
  // Aggressive polling attempts of a spare worker (IsSpare), ~10 us; the others poll for
  // work-stealing.aggressive-poll-attempts (~100 us, see ActorEnvironment::Create).
  static constexpr size_t kSparePolls = 1000;

  // CAF's per-worker data (polling strategies, sleep state) with this policy's own: the
  // worker's jobs (CAF's queue stays unused), its next job, and what it saw of each victim.
  struct worker_data : caf::policy::work_stealing::worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator* parent)
        : caf::policy::work_stealing::worker_data(parent), seen(parent->num_workers()) {}
    worker_data(const worker_data& other) : caf::policy::work_stealing::worker_data(other), seen(other.seen.size()) {}
    JobQueue<caf::resumable> jobs;
    // Written by the owner (internal_enqueue); taken by the owner, or by a thief after kPatience.
    alignas(64) std::atomic<caf::resumable*> next{nullptr};
    std::atomic<uint64_t> takes{0};    // jobs the owner has taken, for thieves to see it move on
    std::atomic<bool> polling{false};  // awake and out of work (in dequeue, not asleep)
    // This worker's view of each victim's next job (its own thread only): the victim's takes
    // when the job was first seen there, and when.
    struct Seen {
      uint64_t takes = ~uint64_t{0};
      std::chrono::steady_clock::time_point since;
    };
    std::vector<Seen> seen;
  };

  struct coordinator_data : caf::policy::work_stealing::coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator* parent)
        : caf::policy::work_stealing::coordinator_data(parent) {}
    std::atomic<size_t> last{0};  // the worker given the last job from outside
  };

  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    auto& data = d(self);
    const size_t workers = self->num_workers();
    const size_t last = data.last.load(std::memory_order_relaxed);
    size_t chosen = last;
    size_t k = 0;
    while (k < workers && !d(self->worker_by_id(chosen)).polling.load(std::memory_order_acquire))
      chosen = (last + ++k) % workers;
    if (k == workers) chosen = data.next_worker++ % workers;
    if (chosen != last) data.last.store(chosen, std::memory_order_relaxed);
    self->worker_by_id(chosen)->external_enqueue(job);
  }

  // Whether an idle worker is spare: there are others, and the last job from outside went to
  // another (the one that keeps polling for the caller's next call, central_enqueue). A spare
  // worker polls briefly before it sleeps. Why: a caller waiting for its iteration polls too
  // (CallWait), so two idle workers polling beside one running the iteration are three spinning
  // threads on two cores; one iteration of a 10-actor chain of no-op acts took 10-14 us (and 30
  // us now and then) in about one run in three against 5.6-5.9 us, and with spare workers
  // sleeping after ~10 us 5.8-7.7 us in every run. It still takes queued jobs while it polls and
  // is woken for work handed to it (internal_enqueue, external_enqueue).
  template <class Worker>
  bool IsSpare(Worker* self) {
    return self->parent()->num_workers() > 1 && d(self->parent()).last.load(std::memory_order_relaxed) != self->id();
  }

  // The owner's next job: the `next` slot, else the head of its queue.
  template <class Worker>
  caf::resumable* TakeOwn(Worker* self) {
    auto& data = d(self);
    caf::resumable* job = data.next.load(std::memory_order_relaxed) != nullptr
                              ? data.next.exchange(nullptr, std::memory_order_acquire)
                              : nullptr;
    if (job == nullptr) job = data.jobs.take_head();
    if (job != nullptr) data.takes.store(data.takes.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    return job;
  }

  // A random other worker's (CAF's choice) oldest queued job, else its next job if it has not
  // taken a job for kPatience; `patient` = false (a sleeping worker's periodic look, every
  // relaxed-sleep-duration) takes the next job without waiting.
  template <class Worker>
  caf::resumable* TrySteal(Worker* self, bool patient) {
    auto* parent = self->parent();
    const size_t workers = parent->num_workers();
    if (workers < 2) return nullptr;
    size_t victim = d(self).uniform(d(self).rengine);
    if (victim == self->id()) victim = workers - 1;
    worker_data& other = d(parent->worker_by_id(victim));
    if (caf::resumable* job = other.jobs.take_tail()) return job;
    typename worker_data::Seen& seen = d(self).seen[victim];
    if (other.next.load(std::memory_order_relaxed) == nullptr) {
      seen.takes = ~uint64_t{0};
      return nullptr;
    }
    if (patient) {
      const uint64_t takes = other.takes.load(std::memory_order_acquire);
      const auto now = std::chrono::steady_clock::now();
      if (takes != seen.takes) {  // a job it has not sat on yet
        seen.takes = takes;
        seen.since = now;
        return nullptr;
      }
      if (now - seen.since < kPatience) return nullptr;
    }
    return other.next.exchange(nullptr, std::memory_order_acquire);
  }

  // CAF's dequeue, except that the aggressive polling yields the core every 64 attempts (~1 us)
  // while it spins, and the worker says when it polls (central_enqueue). An idle worker polls ~100 us for the next message before it sleeps; a
  // caller thread waiting for the iteration on the same core (a loaded host, or the scheduler
  // placing both there) could only run when that polling ended: a 10-actor chain's call took
  // ~100 us so against ~6 us with a core each (ChainLatency/10/0, the process pinned to one
  // core). A yield with no other thread runnable on the core returns at once.
  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& data = d(self);
    if (caf::resumable* job = TakeOwn(self)) return job;
    data.polling.store(true, std::memory_order_release);
    caf::resumable* job = Poll(self);
    data.polling.store(false, std::memory_order_release);
    return job;
  }

  template <class Worker>
  caf::resumable* Poll(Worker* self) {
    auto& data = d(self);
    for (int k = 0; k < 2; ++k) {  // aggressive, then moderate polling
      const auto& strategy = data.strategies[k];
      const size_t attempts = k == 0 && IsSpare(self) ? std::min(kSparePolls, strategy.attempts) : strategy.attempts;
      for (size_t i = 0; i < attempts; i += strategy.step_size) {
        if (caf::resumable* job = TakeOwn(self)) return job;
        if (i % strategy.steal_interval == 0)
          if (caf::resumable* job = TrySteal(self, true)) return job;
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
        data.polling.store(false, std::memory_order_release);
        data.waitdata.sleeping = true;
        woken = data.waitdata.cv.wait_for(guard, relaxed.sleep_duration, [&] { return !data.jobs.empty() || data.next.load() != nullptr; });
        data.waitdata.sleeping = false;
      }
      if (woken) {
        if (caf::resumable* job = TakeOwn(self)) return job;
      } else if (timeouts++ % relaxed.steal_interval == 0) {
        if (caf::resumable* job = TrySteal(self, false)) return job;
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
    while (caf::resumable* job = TakeOwn(self)) f(job);
  }

  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    auto& data = d(self);
    caf::resumable* before = data.next.exchange(job, std::memory_order_acq_rel);
    if (before == nullptr) return;
    data.jobs.prepend(before);
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

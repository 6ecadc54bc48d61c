#include "python_bindings/dispatcher.h"

#include <pybind11/pybind11.h>
#include <pthread.h>
#include <unistd.h>

#include <utility>

namespace py = pybind11;

namespace actorflow {
namespace python {
namespace {

// getpid() is a system call (~0.3 us here) and every job call asks for the callback state
// twice; the pid changes only across fork(), whose child handler stores the new one. The
// handler is registered before the first pid is stored, so no child keeps its parent's.
std::atomic<pid_t> cached_pid{0};
pid_t CurrentPid() {
  pid_t pid = cached_pid.load(std::memory_order_relaxed);
  if (pid != 0) return pid;
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, [] { cached_pid.store(getpid()); }); });
  pid = getpid();
  cached_pid.store(pid);
  return pid;
}

// The process's callback thread and the queue it serves. Never destroyed (leaked on purpose):
// a detached thread may still touch it at interpreter exit, and after fork() the child starts
// a fresh one while the parent's may be locked by a thread that does not exist in the child.
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  struct Entry {
    std::shared_ptr<Dispatcher::JobState> job;  // kept alive until its item ran
    Dispatcher::Item item;
  };
  std::deque<Entry> queue;
  int holders = 0;        // jobs that enqueued since they started and have not stopped
  bool running = false;   // the current thread serves the queue
  uint64_t generation = 0;  // of the current thread; a retired thread exits at its next check
  std::thread thread;     // the current thread, until joined by the last Stop or detached
  std::atomic<std::thread::id> thread_id{};
  pid_t pid = CurrentPid();
};

std::atomic<Shared*> shared_instance{nullptr};
std::mutex shared_create_mu;


// The callback state of this process (a fresh one in a child of fork()).
Shared& TheShared() {
  Shared* s = shared_instance.load(std::memory_order_acquire);
  if (s != nullptr && s->pid == CurrentPid()) return *s;
  std::lock_guard<std::mutex> lock(shared_create_mu);
  s = shared_instance.load(std::memory_order_acquire);
  if (s == nullptr || s->pid != CurrentPid()) {
    s = new Shared();  // leaked: see Shared
    shared_instance.store(s, std::memory_order_release);
  }
  return *s;
}

// The callback thread's name (top -H, gdb, /proc/<pid>/task/*/comm): callbacks run here, never
// on an actor worker ("caf.*"); tests check it.
constexpr char kThreadName[] = "af.callbacks";
// Items run under one GIL hold at most (Loop).
constexpr int kItemsPerHold = 64;

void Loop(Shared* s, uint64_t generation) {
  pthread_setname_np(pthread_self(), kThreadName);
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    s->cv.wait(lock, [&] { return !s->queue.empty() || s->holders == 0 || s->generation != generation; });
    if (s->generation != generation) return;  // retired by the last Stop, which joins us
    if (s->queue.empty()) {  // no job holds the thread and nothing is left
      s->running = false;
      s->thread_id.store(std::thread::id());
      s->cv.notify_all();
      return;
    }
    Shared::Entry entry = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    auto finished = [&] {  // under the lock: the entry's job counts it done
      ++entry.job->done;
      entry.job.reset();
      s->cv.notify_all();
    };
    // Python may already be finalizing if the owner forgot to Stop() at exit; never touch the
    // interpreter then (the items leak, which is the lesser evil at exit).
    if (!Py_IsInitialized() || _Py_IsFinalizing()) {
      new Dispatcher::Item(std::move(entry.item));  // deliberately leaked
      lock.lock();
      finished();
      continue;
    }
    // One GIL hold for what is queued: taking the GIL is a hand-off with the caller's thread
    // (two context switches when it is feeding the job), so items queued meanwhile run under
    // the same hold, up to kItemsPerHold. The caller still gets the interpreter between
    // callbacks at CPython's switch interval, as with any Python thread. Lock order GIL -> mu,
    // as in the items' drop (EndCall).
    {
      py::gil_scoped_acquire gil;
      for (int held = 1;; ++held) {
        if (entry.item.run) entry.item.run();
        if (entry.item.drop) entry.item.drop();
        entry.item = Dispatcher::Item();
        lock.lock();
        finished();
        const bool more = !s->queue.empty() && s->generation == generation && held < kItemsPerHold;
        if (more) {
          entry = std::move(s->queue.front());
          s->queue.pop_front();
        }
        lock.unlock();
        if (!more) break;
      }
    }
    lock.lock();
  }
}

}  // namespace

Dispatcher::Dispatcher() : job_(std::make_shared<JobState>()) {}

Dispatcher::~Dispatcher() { Stop(); }

bool Dispatcher::on_callback_thread() {
  return TheShared().thread_id.load() == std::this_thread::get_id();
}

void Dispatcher::AbandonAfterFork() {
  // TheShared() is already a fresh state in the child; this job's counters may describe items
  // that stayed in the parent.
  job_ = std::make_shared<JobState>();
}

void Dispatcher::Enqueue(Item item) {
  Shared& s = TheShared();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!job_->holds_thread) {
    job_->holds_thread = true;
    ++s.holders;
  }
  if (!s.running) {
    // A previous thread that ended (no holders) was joined or detached by the Stop that let it
    // go; one that was detached may still be finishing its last instructions.
    if (s.thread.joinable()) s.thread.detach();
    s.running = true;
    s.thread = std::thread(Loop, &s, ++s.generation);
    s.thread_id.store(s.thread.get_id());
  }
  s.queue.push_back(Shared::Entry{job_, std::move(item)});
  ++job_->enqueued;
  s.cv.notify_all();
}

void Dispatcher::WaitIdle() {
  if (on_callback_thread()) return;
  Shared& s = TheShared();
  std::unique_lock<std::mutex> lock(s.mu);
  const int64_t target = job_->enqueued;
  std::shared_ptr<JobState> job = job_;
  s.cv.wait(lock, [&] { return job->done >= target || !s.running; });
}

bool Dispatcher::TryBeginCall(int64_t limit, std::chrono::milliseconds timeout) {
  Shared& s = TheShared();
  std::unique_lock<std::mutex> lock(s.mu);
  std::shared_ptr<JobState> job = job_;
  if (!on_callback_thread() &&
      !s.cv.wait_for(lock, timeout, [&] { return job->pending_calls < limit || job->stopping; }))
    return false;
  ++job->pending_calls;
  return true;
}

void Dispatcher::EndCall() {
  Shared& s = TheShared();
  std::lock_guard<std::mutex> lock(s.mu);
  --job_->pending_calls;
  s.cv.notify_all();
}

void Dispatcher::Stop() {
  Shared& s = TheShared();
  const bool on_thread = on_callback_thread();
  std::unique_lock<std::mutex> lock(s.mu);
  std::shared_ptr<JobState> job = job_;
  job->stopping = true;
  s.cv.notify_all();
  if (!job->holds_thread) return;
  if (on_thread) {
    // A callback stopping its own (or any) job: this job's queued items run after the item
    // running now; the thread ends by itself once no job holds it and the queue is empty.
    job->holds_thread = false;
    if (--s.holders == 0 && s.thread.joinable()) s.thread.detach();
    s.cv.notify_all();
    return;
  }
  s.cv.wait(lock, [&] { return job->done >= job->enqueued || !s.running; });
  job->holds_thread = false;
  if (--s.holders > 0 || !s.running) return;
  // The last holder: every job's items have run, so the queue is empty. Retire the thread
  // under the lock (a job that enqueues from now on starts a fresh one) and join it.
  ++s.generation;
  s.running = false;
  s.thread_id.store(std::thread::id());
  std::thread thread = std::move(s.thread);
  s.cv.notify_all();
  lock.unlock();
  if (thread.joinable()) thread.join();
}

}  // namespace python
}  // namespace actorflow

#include "kernels/parallel_chunks.h"

#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "actors/call_wait.h"

namespace actorflow {
namespace {

// How long an idle helper polls for the next job before it sleeps: covers the small kernels
// between two large ones of one step without a futex wake, and costs little on a busy host.
constexpr auto kSpinTime = std::chrono::microseconds(100);
constexpr int kMaxChunks = 0xffff;
constexpr int kMaxHelpers = 63;

// The job is one 64-bit word: generation (32 bits) | number of chunks (16) | next chunk (16).
// Claiming a chunk is one compare-exchange of the whole word, so a helper can never claim a
// chunk of a job that has ended: the word then says next == limit.
uint64_t Pack(uint32_t generation, uint32_t limit, uint32_t next) {
  return (static_cast<uint64_t>(generation) << 32) | (static_cast<uint64_t>(limit) << 16) | next;
}
uint32_t Limit(uint64_t s) { return static_cast<uint32_t>(s >> 16) & 0xffff; }
uint32_t Next(uint64_t s) { return static_cast<uint32_t>(s) & 0xffff; }
bool Claimable(uint64_t s) { return Next(s) < Limit(s); }

struct Pool {
  std::mutex job_mutex;  // one job at a time; a caller that cannot take it runs inline
  std::atomic<uint64_t> state{0};
  std::atomic<void (*)(void*, int)> body{nullptr};
  std::atomic<void*> context{nullptr};
  std::atomic<int> completed{0};
  std::atomic<int> tickets{0};  // helpers still allowed to join the current job
  std::atomic<uint32_t> wake{0};
  std::atomic<int> sleepers{0};
  std::atomic<int> helpers{0};
  std::atomic<int> assistants{0};    // callers polling for their iteration (CallWaitAssist)
  std::atomic<int> last_helpers{0};  // helpers the latest job asked for
  std::atomic<int64_t> wake_ups{0};
  std::atomic<int64_t> jobs{0}, caller_only_jobs{0};  // split jobs; those no helper took a chunk of
  std::mutex grow_mutex;
  uint32_t generation = 0;  // job_mutex holder only
  std::chrono::steady_clock::time_point last_job_end{};  // job_mutex holder only

  // Claims and runs chunks of the current job until none is left; how many it ran.
  int Work() {
    int ran = 0;
    uint64_t s = state.load(std::memory_order_acquire);
    while (Claimable(s)) {
      if (state.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        body.load(std::memory_order_relaxed)(context.load(std::memory_order_relaxed), static_cast<int>(Next(s)));
        completed.fetch_add(1, std::memory_order_release);
        ++ran;
        s = state.load(std::memory_order_acquire);
      }
    }
    return ran;
  }

  // Takes one of the current job's tickets: whether this thread may join it.
  bool TryJoin() {
    return Claimable(state.load(std::memory_order_acquire)) && tickets.load(std::memory_order_relaxed) > 0 &&
           tickets.fetch_sub(1) > 0;
  }

  void HelperLoop() {
    omp_set_num_threads(1);
    for (;;) {
      const uint32_t seen = wake.load();
      if (TryJoin()) {
        Work();
        continue;
      }
      const auto until = std::chrono::steady_clock::now() + kSpinTime;
      bool found = false;
      // Yielding now and then: a worker or caller waiting for a core this helper spins on gets it.
      for (int i = 1; !found; ++i) {
        _mm_pause();
        if (wake.load(std::memory_order_relaxed) != seen) found = true;
        else if ((i & 63) == 0) {
          if (std::chrono::steady_clock::now() > until || AssistantsSuffice()) break;
          sched_yield();
        }
      }
      if (found) continue;
      sleepers.fetch_add(1);
      wake.wait(seen);  // returns at once if a job was published since `seen` was read
      sleepers.fetch_sub(1);
    }
  }

  // Polling callers can take the shares the latest job gave helpers: a spinning helper would
  // be one runnable thread more than the budget.
  bool AssistantsSuffice() const {
    return assistants.load(std::memory_order_relaxed) >= last_helpers.load(std::memory_order_relaxed);
  }

  void EnsureHelpers(int wanted) {
    if (helpers.load(std::memory_order_acquire) >= wanted) return;
    std::lock_guard<std::mutex> lock(grow_mutex);
    while (helpers.load() < wanted) {
      std::thread([this] { HelperLoop(); }).detach();
      helpers.fetch_add(1, std::memory_order_release);
    }
  }
};

// Leaked on purpose: helpers are detached and block for the life of the process. After fork()
// the child's copy has no helper threads, so the child handler drops it and starts anew.
std::atomic<Pool*> g_pool{nullptr};
std::once_flag g_atfork;

Pool& GetPool() {
  Pool* pool = g_pool.load(std::memory_order_acquire);
  if (pool) return *pool;
  std::call_once(g_atfork, [] { pthread_atfork(nullptr, nullptr, [] { g_pool.store(nullptr); }); });
  Pool* fresh = new Pool;
  if (g_pool.compare_exchange_strong(pool, fresh)) return *fresh;
  delete fresh;
  return *pool;
}

void RunInline(int num_chunks, void (*body)(void*, int), void* context) {
  for (int chunk = 0; chunk < num_chunks; ++chunk) body(context, chunk);
}

// A caller polling for its iteration (actors/call_wait.h) takes a helper's ticket: the chunks
// of the kernels its own iteration runs, on a thread that is awake already. Off with
// ACTORFLOW_CALLER_ASSIST=0 (then only helper threads take chunks, as before).
void AssistEnter() { GetPool().assistants.fetch_add(1, std::memory_order_relaxed); }
void AssistLeave() { GetPool().assistants.fetch_sub(1, std::memory_order_relaxed); }
bool AssistPoll() {
  Pool& pool = GetPool();
  if (!pool.TryJoin()) return false;
  const int caller_threads = omp_get_max_threads();
  omp_set_num_threads(1);  // as on the helpers
  pool.Work();
  omp_set_num_threads(caller_threads);
  return true;
}
const CallWaitAssist kAssist{AssistEnter, AssistPoll, AssistLeave};
const bool assist_installed = [] {
  const char* off = std::getenv("ACTORFLOW_CALLER_ASSIST");
  if (off != nullptr && std::strcmp(off, "0") == 0) return false;
  SetCallWaitAssist(&kAssist);
  return true;
}();

}  // namespace

void ParallelChunks(int num_chunks, int threads, void (*body)(void* context, int chunk), void* context,
                    WakeHelpers wake) {
  if (threads <= 1 || num_chunks <= 1 || num_chunks > kMaxChunks) return RunInline(num_chunks, body, context);
  Pool& pool = GetPool();
  std::unique_lock<std::mutex> lock(pool.job_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return RunInline(num_chunks, body, context);
  const int helpers = std::min({threads - 1, num_chunks - 1, kMaxHelpers});
  pool.EnsureHelpers(helpers);
  const int caller_threads = omp_get_max_threads();
  omp_set_num_threads(1);  // a chunk's oneDNN call stays on this thread, as on the helpers
  pool.body.store(body, std::memory_order_relaxed);
  pool.context.store(context, std::memory_order_relaxed);
  pool.completed.store(0, std::memory_order_relaxed);
  pool.tickets.store(helpers);
  pool.last_helpers.store(helpers, std::memory_order_relaxed);
  pool.state.store(Pack(++pool.generation, static_cast<uint32_t>(num_chunks), 0), std::memory_order_release);
  pool.wake.fetch_add(1);  // spinning helpers see it; sleeping ones only if notified
  if (pool.sleepers.load() > 0 && !pool.AssistantsSuffice() &&
      (wake == WakeHelpers::kAlways || std::chrono::steady_clock::now() - pool.last_job_end < kSpinTime)) {
    pool.wake.notify_all();
    pool.wake_ups.fetch_add(1, std::memory_order_relaxed);
  }
  const int caller_ran = pool.Work();
  // Only chunks a helper claimed are still running; wait for those alone.
  for (int i = 1; pool.completed.load(std::memory_order_acquire) < num_chunks; ++i) {
    _mm_pause();
    if ((i & 255) == 0) sched_yield();  // a descheduled helper may need this core
  }
  pool.last_job_end = std::chrono::steady_clock::now();
  // Owner-only writes (job_mutex); readers elsewhere load them.
  pool.jobs.store(pool.jobs.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (caller_ran == num_chunks)
    pool.caller_only_jobs.store(pool.caller_only_jobs.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  omp_set_num_threads(caller_threads);
}

int ParallelChunksHelpers() { return GetPool().helpers.load(); }
int ParallelChunksSleepingHelpers() { return GetPool().sleepers.load(); }
int64_t ParallelChunksWakeUps() { return GetPool().wake_ups.load(std::memory_order_relaxed); }

ParallelChunksCounters ParallelChunksCounts() {
  Pool& pool = GetPool();
  return {pool.jobs.load(std::memory_order_relaxed), pool.caller_only_jobs.load(std::memory_order_relaxed),
          pool.wake_ups.load(std::memory_order_relaxed)};
}

}  // namespace actorflow

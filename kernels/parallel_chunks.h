// ParallelChunks: a kernel's work split into independent chunks, claimed one at a time by the
// calling thread and up to `threads - 1` helper threads of one process-wide pool.
//
// Why not an OpenMP team: a team partitions statically and its join waits for every member. On
// a host where other processes compete for the cores, a member that is descheduled holds the
// whole team, and members spinning at the barrier take the cores the descheduled one needs:
// a 0.4 ms two-thread sgemm measured 6.5 ms (median) that way on this 2-core VM under a load of
// ~4, 1.0 ms with OMP_WAIT_POLICY=passive. Here a helper that wakes late finds the chunks taken
// and does nothing; the caller waits only for chunks a helper has claimed and not finished, and
// it never waits for a helper that has not started.
//
// Helpers spin briefly after a job (back-to-back kernels find them awake), then sleep on a
// futex. One job runs at a time: a caller that finds the pool busy (another actor's kernel on
// another worker) runs its chunks alone, so the thread budget is never exceeded.
// Thread-safe. The body must not throw and must not call ParallelChunks itself (it would run
// inline). After fork() the child starts a fresh pool on first use.
#pragma once

#include <cstdint>

namespace actorflow {

// Whether a job wakes helpers that went to sleep (their spin after the previous job ran out).
// Waking one costs the caller ~9 us on a VM whose idle vCPU halts (the wake-up is synchronous
// for the waker: measured 9.3 us median around the futex wake) and the helper claims its first
// chunk ~17 us after the job was published: a job of ~20 us (the batch-1 MLP's 784x512 GEMV
// on one core) took 28-35 us that way against 19-23 us on the caller alone.
enum class WakeHelpers {
  kAlways,    // long jobs: a helper arriving late still takes a share
  kInStream,  // short jobs: only while jobs keep coming (the previous one ended less than the
              // helpers' spin time ago), since then the woken helper, still spinning, takes
              // half of each following job; a job that comes alone leaves them asleep and its
              // chunks run on the caller and on helpers still spinning
};

// Calls body(context, chunk) once for every chunk in [0, num_chunks), on the calling thread and
// up to `threads - 1` helpers, and returns when all have returned. threads <= 1 or
// num_chunks <= 1 runs inline. Each helper runs with one OpenMP thread (oneDNN inside a chunk
// stays serial). A plain function and context, so a call allocates nothing.
void ParallelChunks(int num_chunks, int threads, void (*body)(void* context, int chunk), void* context,
                    WakeHelpers wake = WakeHelpers::kAlways);

// The same with any callable `body(int chunk)`, passed by reference.
template <typename Body>
void ParallelChunks(int num_chunks, int threads, Body& body, WakeHelpers wake = WakeHelpers::kAlways) {
  ParallelChunks(num_chunks, threads, [](void* context, int chunk) { (*static_cast<Body*>(context))(chunk); }, &body,
                 wake);
}

// Helper threads started so far, those asleep now, and the jobs so far that woke sleeping
// helpers (each cost its caller a futex wake) (tests, benchmarks).
int ParallelChunksHelpers();
int ParallelChunksSleepingHelpers();
int64_t ParallelChunksWakeUps();

// Since the process started: jobs split over the pool, those whose chunks all ran on the caller
// (no helper came in time: the job took as long as on one thread), and jobs that woke sleeping
// helpers. Where a short kernel's time is bimodal, these say which mode a call was in.
struct ParallelChunksCounters {
  int64_t jobs = 0, caller_only_jobs = 0, wake_ups = 0;
};
ParallelChunksCounters ParallelChunksCounts();

}  // namespace actorflow

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

namespace actorflow {

// Calls body(context, chunk) once for every chunk in [0, num_chunks), on the calling thread and
// up to `threads - 1` helpers, and returns when all have returned. threads <= 1 or
// num_chunks <= 1 runs inline. Each helper runs with one OpenMP thread (oneDNN inside a chunk
// stays serial). A plain function and context, so a call allocates nothing.
void ParallelChunks(int num_chunks, int threads, void (*body)(void* context, int chunk), void* context);

// The same with any callable `body(int chunk)`, passed by reference.
template <typename Body>
void ParallelChunks(int num_chunks, int threads, Body& body) {
  ParallelChunks(num_chunks, threads, [](void* context, int chunk) { (*static_cast<Body*>(context))(chunk); }, &body);
}

// Helper threads started so far (tests).
int ParallelChunksHelpers();

}  // namespace actorflow

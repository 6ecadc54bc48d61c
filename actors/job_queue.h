// JobQueue: one scheduler worker's queue of runnable jobs (actors), for the work-stealing
// policy in environment.cc. The owner takes and puts at the head (the newest job first, as CAF
// runs the actors a handler woke); other threads append at the tail and thieves take from the
// tail (the oldest job).
//
// Why not CAF's own queue (detail::double_ended_queue): it allocates a node per push and frees
// one per pop, and its take_tail holds both of its locks while it walks the list from the head
// to find the new tail, one cache miss per node written by the owner; an owner that needs a
// lock meanwhile calls sched_yield. A polling thief calls take_tail every few polls, also on an
// empty queue, so the owner of a chain of short acts kept meeting the thief's locks. Here the
// jobs sit in a ring (grown, never shrunk: no allocation once it has held the most jobs it
// will), every operation is O(1) under one short lock, and empty() reads the size without the
// lock, so a thief looks at an empty queue without writing to it.
//
// Thread-safety: every member may be called from any thread. empty() and size() are exact at some
// moment during the call (the size is written under the lock) but may be stale when they return.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace actorflow {

template <class Job>
class JobQueue {
 public:
  explicit JobQueue(size_t initial_capacity = 64) {
    size_t capacity = 1;
    while (capacity < initial_capacity) capacity <<= 1;
    ring_.reset(new Job*[capacity]);
    mask_ = capacity - 1;
  }
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  bool empty() const { return size_.load(std::memory_order_acquire) == 0; }
  size_t size() const { return size_.load(std::memory_order_acquire); }

  // At the head: the next take_head returns it.
  void prepend(Job* job) {
    Guard guard(lock_);
    GrowIfFull();
    ring_[--head_ & mask_] = job;
    size_.store(tail_ - head_, std::memory_order_release);
  }

  // At the tail: the next take_tail returns it; the owner reaches it last.
  void append(Job* job) {
    Guard guard(lock_);
    GrowIfFull();
    ring_[tail_++ & mask_] = job;
    size_.store(tail_ - head_, std::memory_order_release);
  }

  Job* take_head() {
    if (empty()) return nullptr;
    Guard guard(lock_);
    if (head_ == tail_) return nullptr;
    Job* job = ring_[head_++ & mask_];
    size_.store(tail_ - head_, std::memory_order_release);
    return job;
  }

  Job* take_tail() {
    if (empty()) return nullptr;
    Guard guard(lock_);
    if (head_ == tail_) return nullptr;
    Job* job = ring_[--tail_ & mask_];
    size_.store(tail_ - head_, std::memory_order_release);
    return job;
  }

 private:
  // Test-and-test-and-set; after a few spins it yields the core, as the holder may have been
  // descheduled on a loaded host (every critical section here is a few loads and stores).
  class Guard {
   public:
    explicit Guard(std::atomic<bool>& lock) : lock_(lock) {
      for (int spins = 0; lock_.exchange(true, std::memory_order_acquire); ) {
        while (lock_.load(std::memory_order_relaxed)) {
          if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
            _mm_pause();
#endif
          } else {
            std::this_thread::yield();
          }
        }
      }
    }
    ~Guard() { lock_.store(false, std::memory_order_release); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    std::atomic<bool>& lock_;
  };

  // Under the lock. The counters keep their values; the jobs move to their places in the new ring.
  void GrowIfFull() {
    if (tail_ - head_ <= mask_) return;
    const size_t capacity = (mask_ + 1) * 2;
    std::unique_ptr<Job*[]> ring(new Job*[capacity]);
    for (uint64_t i = head_; i != tail_; ++i) ring[i & (capacity - 1)] = ring_[i & mask_];
    ring_ = std::move(ring);
    mask_ = capacity - 1;
  }

  // The lock and the size share a cache line, which the owner writes anyway; a thief's empty()
  // reads only that line. The jobs are ring_[head_ & mask_] ... ring_[(tail_ - 1) & mask_]
  // (counters that wrap), all under the lock.
  alignas(64) std::atomic<bool> lock_{false};
  std::atomic<size_t> size_{0};
  alignas(64) uint64_t head_ = 0;
  uint64_t tail_ = 0;
  std::unique_ptr<Job*[]> ring_;
  size_t mask_ = 0;
};

}  // namespace actorflow

// TraceLane: one actor's acts and waits, appended by that actor alone (no lock, no virtual
// call, no search) in a compact encoding, decoded once when the trace is written.
//
// Cost model (bench/runtime_bench RecorderPerAct): an observed act costs two trace-clock reads
// and one 16-byte slot. A slot stores times as differences from the end of the lane's previous
// event, which is where an actor's wait starts in the common case (it acted, then waited):
//   tag     = (iteration - previous iteration) << 5 | flags
//   payload = gap << 32 | duration      (gap: previous end -> start, both < 2^32 ticks)
// Anything else (a wait that started later, times that do not fit, an iteration far away)
// takes a long form of three slots with absolute values.
// Thread-safety: one writer (the actor). Readers (ForEach, num_events) may run at any time,
// also while the actor records: they see the events published so far (a release store of the
// slot count after each event), so a trace can be written from a live runtime.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace actorflow {

// Why an actor did not act. kWorkerBusy: it could act (inputs ready, an output register free)
// but had not run yet, because every worker thread was running other actors.
enum class WaitReason { kInputNotReady = 0, kOutputRegistersFull = 1, kWorkerBusy = 2 };
const char* WaitReasonName(WaitReason reason);  // "input not ready" / "output registers full" / "worker busy"

class alignas(64) TraceLane {  // its own cache line: actors on different workers share none
 public:
  TraceLane() = default;
  TraceLane(const TraceLane&) = delete;
  TraceLane& operator=(const TraceLane&) = delete;
  ~TraceLane() {
    for (Chunk* c = head_.load(std::memory_order_acquire); c != nullptr;) {
      Chunk* next = c->next.load(std::memory_order_acquire);
      delete c;
      c = next;
    }
  }

  // An act from `start` to `end` (trace clock ticks). `waited`: the actor waited from
  // `wait_start` to `start` for `reason` (otherwise it was busy, or not observed, before).
  void Act(int64_t iteration, bool waited, int64_t wait_start, WaitReason reason, int64_t start, int64_t end) {
    Put(iteration, kAct | (waited ? kWaited | ReasonFlags(reason) : 0), waited ? wait_start : last_end_, start, end);
  }
  // A wait that ended without an act (its reason changed, or the actor finished).
  void Wait(int64_t iteration, WaitReason reason, int64_t wait_start, int64_t end) {
    Put(iteration, kWaited | ReasonFlags(reason), wait_start, end, end);
  }

  struct Event {
    int64_t iteration;
    bool is_act, waited;
    WaitReason reason;
    int64_t wait_start, start, end;  // a wait alone: wait_start -> start (== end)
  };
  template <typename F> void ForEach(F&& f) const;  // in recorded order
  size_t num_events() const;

 private:
  static constexpr uint64_t kAct = 1, kWaited = 2, kBackpressure = 4, kLong = 8, kWorker = 16;
  static constexpr int kFlagBits = 5;
  static constexpr uint64_t ReasonFlags(WaitReason reason) {
    return reason == WaitReason::kOutputRegistersFull ? kBackpressure : reason == WaitReason::kWorkerBusy ? kWorker : 0;
  }
  static constexpr size_t kChunk = 8192;  // slots: 128 KiB
  struct Slot {
    uint64_t tag, payload;
  };
  struct Chunk {
    Slot slots[kChunk];
    std::atomic<Chunk*> next{nullptr};
  };

  void Put(int64_t iteration, uint64_t flags, int64_t wait_start, int64_t start, int64_t end) {
    const uint64_t gap = static_cast<uint64_t>(start - last_end_), duration = static_cast<uint64_t>(end - start);
    const int64_t step = iteration - last_iteration_;
    if (wait_start == last_end_ && (gap | duration) >> 32 == 0 && step >= -(int64_t{1} << 57) &&
        step < (int64_t{1} << 57)) {
      Append({static_cast<uint64_t>(step) << kFlagBits | flags, gap << 32 | duration});
    } else {  // long form
      Append({kLong | flags, static_cast<uint64_t>(iteration)});
      Append({static_cast<uint64_t>(wait_start), static_cast<uint64_t>(start)});
      Append({static_cast<uint64_t>(end), 0});
    }
    published_.store(written_, std::memory_order_release);
    last_end_ = end;
    last_iteration_ = iteration;
  }
  void Append(Slot slot) {
    if (next_ == end_) NewChunk();
    *next_++ = slot;
    ++written_;
  }
  void NewChunk() {
    Chunk* chunk = new Chunk;
    if (tail_ == nullptr)
      head_.store(chunk, std::memory_order_release);
    else
      tail_->next.store(chunk, std::memory_order_release);
    tail_ = chunk;
    next_ = chunk->slots;
    end_ = next_ + kChunk;
  }

  // Writer's state.
  Slot *next_ = nullptr, *end_ = nullptr;  // free slots of the last chunk
  Chunk* tail_ = nullptr;
  size_t written_ = 0;
  int64_t last_end_ = 0, last_iteration_ = -1;
  // Shared with readers.
  std::atomic<size_t> published_{0};
  std::atomic<Chunk*> head_{nullptr};
};

template <typename F> void TraceLane::ForEach(F&& f) const {
  const size_t slots = published_.load(std::memory_order_acquire);
  const Chunk* chunk = head_.load(std::memory_order_acquire);
  size_t in_chunk = 0;
  auto next_slot = [&]() -> const Slot& {
    if (in_chunk == kChunk) {
      chunk = chunk->next.load(std::memory_order_acquire);
      in_chunk = 0;
    }
    return chunk->slots[in_chunk++];
  };
  int64_t last_end = 0, last_iteration = -1;
  for (size_t i = 0; i < slots;) {
    const Slot& s = next_slot();
    ++i;
    Event e;
    uint64_t flags;
    if (s.tag & kLong) {
      flags = s.tag;
      e.iteration = static_cast<int64_t>(s.payload);
      const Slot& times = next_slot();
      e.wait_start = static_cast<int64_t>(times.tag);
      e.start = static_cast<int64_t>(times.payload);
      e.end = static_cast<int64_t>(next_slot().tag);
      i += 2;
    } else {
      flags = s.tag & ((1u << kFlagBits) - 1);
      e.iteration = last_iteration + (static_cast<int64_t>(s.tag) >> kFlagBits);
      e.wait_start = last_end;
      e.start = last_end + static_cast<int64_t>(s.payload >> 32);
      e.end = e.start + static_cast<int64_t>(s.payload & 0xffffffffu);
    }
    e.is_act = flags & kAct;
    e.waited = flags & kWaited;
    e.reason = (flags & kBackpressure) ? WaitReason::kOutputRegistersFull
               : (flags & kWorker)     ? WaitReason::kWorkerBusy
                                       : WaitReason::kInputNotReady;
    last_end = e.end;
    last_iteration = e.iteration;
    f(static_cast<const Event&>(e));
  }
}

inline size_t TraceLane::num_events() const {
  size_t n = 0;
  ForEach([&](const Event&) { ++n; });
  return n;
}

}  // namespace actorflow

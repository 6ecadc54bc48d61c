// IterationRing: the records of a runtime's iterations in flight, which always form one run of
// consecutive iteration numbers [front_iteration(), front_iteration() + size()): Push appends
// the next one and completions leave from the front, in order.
//
// Why not a map: a map node (and its record's buffers) per iteration is an allocation and a free
// on every call, on the caller's path. Here the slots are made once and reused, and a record's
// buffers keep their capacity from one use of its slot to the next: once the ring has grown to
// the most iterations ever in flight at once, appending allocates nothing.
//
// A record keeps its address while it is in the ring, also when the ring grows (slots are
// separate objects; growing moves only the pointers to them), so a sink may hold a pointer to
// its iteration's record while other iterations come and go.
//
// Not thread-safe: the runtime guards it with its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "actors/check.h"

namespace actorflow {

template <typename Record>
class IterationRing {
 public:
  explicit IterationRing(size_t initial_slots = 8) { Grow(initial_slots == 0 ? 1 : initial_slots); }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  size_t capacity() const { return slots_.size(); }
  int64_t front_iteration() const { return first_; }

  // The slot of `iteration`, which must follow the last record (any number when empty). The
  // record is the slot's previous one, as it was left: the caller sets every field it uses.
  Record& Append(int64_t iteration) {
    if (size_ == 0) {
      first_ = iteration;
    } else {
      AF_CHECK_EQ(iteration, first_ + static_cast<int64_t>(size_)) << "iterations enter the ring in order";
    }
    if (size_ == slots_.size()) Grow(2 * slots_.size());
    Record& record = *slots_[Index(size_)];
    ++size_;
    return record;
  }

  // The record of `iteration`, or null when it is not in the ring.
  Record* Find(int64_t iteration) {
    if (size_ == 0 || iteration < first_ || iteration - first_ >= static_cast<int64_t>(size_)) return nullptr;
    return slots_[Index(static_cast<size_t>(iteration - first_))].get();
  }

  Record& Front() {
    AF_CHECK_GT(size_, size_t{0}) << "front of an empty iteration ring";
    return *slots_[head_];
  }

  // Ends the front record's stay; its slot (and what its buffers hold) is reused later.
  void PopFront() {
    AF_CHECK_GT(size_, size_t{0}) << "pop from an empty iteration ring";
    head_ = head_ + 1 == slots_.size() ? 0 : head_ + 1;
    ++first_;
    --size_;
  }

 private:
  size_t Index(size_t offset) const {
    const size_t i = head_ + offset;
    return i >= slots_.size() ? i - slots_.size() : i;
  }

  // Keeps the records in order from index 0; adds fresh slots after them.
  void Grow(size_t slots) {
    std::vector<std::unique_ptr<Record>> grown;
    grown.reserve(slots);
    for (size_t k = 0; k < slots_.size(); ++k) grown.push_back(std::move(slots_[Index(k)]));
    while (grown.size() < slots) grown.push_back(std::make_unique<Record>());
    slots_ = std::move(grown);
    head_ = 0;
  }

  std::vector<std::unique_ptr<Record>> slots_;
  size_t head_ = 0;  // the front record's slot
  size_t size_ = 0;
  int64_t first_ = 0;  // the front record's iteration
};

}  // namespace actorflow

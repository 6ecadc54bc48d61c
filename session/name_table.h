// Storage for the names a job binds to a cached compile (session/job_cache.h): thousands of
// short strings made once per job and read as views, without an allocation per string.
//
// Thread-safety: none; a table is filled by one thread and read-only afterwards.
#pragma once

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

namespace actorflow {

// Strings appended once and read as views for as long as the arena lives: chunks that never
// move, one allocation per 64 KiB instead of one per name.
class NameArena {
 public:
  NameArena() = default;
  NameArena(const NameArena&) = delete;
  NameArena& operator=(const NameArena&) = delete;

  // `a` followed by `b`, stored here.
  std::string_view Concat(std::string_view a, std::string_view b = {}) {
    const size_t size = a.size() + b.size();
    if (size > left_) Grow(size);
    char* out = next_;
    if (!a.empty()) std::memcpy(out, a.data(), a.size());
    if (!b.empty()) std::memcpy(out + a.size(), b.data(), b.size());
    next_ += size;
    left_ -= size;
    return std::string_view(out, size);
  }

 private:
  void Grow(size_t at_least) {
    const size_t size = std::max<size_t>(at_least, size_t{64} << 10);
    chunks_.emplace_back(new char[size]);  // not zeroed: every byte handed out is written first
    next_ = chunks_.back().get();
    left_ = size;
  }

  std::vector<std::unique_ptr<char[]>> chunks_;
  char* next_ = nullptr;
  size_t left_ = 0;
};

// A set of views compared by content, in one table (open addressing, linear probing): Insert
// allocates only when the table grows. The viewed characters must outlive the set.
class ViewSet {
 public:
  explicit ViewSet(size_t expected = 0) { Rehash(Capacity(expected)); }

  // False when an equal view is already in.
  bool Insert(std::string_view view) {
    if (2 * (size_ + 1) > slots_.size()) Rehash(2 * slots_.size());
    const size_t hash = std::hash<std::string_view>()(view);
    for (size_t i = hash & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      Slot& slot = slots_[i];
      if (!slot.used) {
        slot = Slot{hash, view, true};
        ++size_;
        return true;
      }
      if (slot.hash == hash && slot.view == view) return false;
    }
  }

 private:
  struct Slot {
    size_t hash = 0;
    std::string_view view;
    bool used = false;
  };
  static size_t Capacity(size_t expected) {
    size_t capacity = 16;
    while (capacity < 2 * expected + 2) capacity *= 2;
    return capacity;
  }
  void Rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    size_ = 0;
    for (const Slot& slot : old)
      if (slot.used) {
        size_t i = slot.hash & (capacity - 1);
        while (slots_[i].used) i = (i + 1) & (capacity - 1);
        slots_[i] = slot;
        ++size_;
      }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace actorflow

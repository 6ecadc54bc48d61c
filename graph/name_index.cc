#include "graph/name_index.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace actorflow {
namespace graph {

NameIndex& NameIndex::operator=(const NameIndex& other) {
  if (this == &other) return *this;
  slots_.clear();
  mask_ = 0;
  size_ = erased_ = 0;
  chunks_.clear();
  chunk_used_ = chunk_size_ = 0;
  Rehash(other.size_);
  for (const Slot& slot : other.slots_)
    if (slot.data != nullptr) Put(std::string_view(slot.data, slot.size), slot.position, /*overwrite=*/false);
  return *this;
}

uint64_t NameIndex::Hash(std::string_view name) { return std::hash<std::string_view>{}(name); }

void NameIndex::Reserve(size_t count) {
  if (2 * count > slots_.size()) Rehash(count);
}

void NameIndex::Rehash(size_t count) {
  size_t capacity = 16;
  while (capacity < 2 * std::max(count, size_)) capacity *= 2;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  erased_ = 0;
  for (const Slot& slot : old) {
    if (slot.data == nullptr) continue;
    size_t i = slot.hash & mask_;
    while (slots_[i].data != nullptr) i = (i + 1) & mask_;
    slots_[i] = slot;  // the characters stay where they are
  }
}

const char* NameIndex::CopyKey(std::string_view name) {
  if (name.empty()) return "";  // not null: null marks a free slot
  if (chunk_used_ + name.size() > chunk_size_) {
    chunk_size_ = std::max<size_t>(size_t{64} << 10, name.size());
    chunks_.push_back(std::make_unique<char[]>(chunk_size_));
    chunk_used_ = 0;
  }
  char* copy = chunks_.back().get() + chunk_used_;
  std::memcpy(copy, name.data(), name.size());
  chunk_used_ += name.size();
  return copy;
}

bool NameIndex::Put(std::string_view name, size_t position, bool overwrite) {
  if (2 * (size_ + erased_ + 1) > slots_.size()) Rehash(size_ + 1);
  const uint64_t hash = Hash(name);
  size_t free = kNone;  // the first erased slot on the way: reused for a new entry
  size_t i = hash & mask_;
  for (;; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.data == nullptr && !slot.erased) break;
    if (slot.erased) {
      if (free == kNone) free = i;
      continue;
    }
    if (slot.hash == hash && Equal(slot, name)) {
      if (overwrite) slot.position = position;
      return false;
    }
  }
  if (free != kNone) {
    i = free;
    --erased_;
  }
  Slot& slot = slots_[i];
  slot.hash = hash;
  slot.data = CopyKey(name);
  slot.size = static_cast<uint32_t>(name.size());
  slot.erased = false;
  slot.position = position;
  ++size_;
  return true;
}

}  // namespace graph
}  // namespace actorflow

#include "graph/name_index.h"

#include <algorithm>

namespace actorflow {
namespace graph {

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
    if (slot.size >= kErased) continue;
    size_t i = slot.hash & mask_;
    while (slots_[i].size != kEmpty) i = (i + 1) & mask_;
    slots_[i] = slot;  // the characters stay where they are
  }
}

bool NameIndex::Put(std::string_view name, size_t position, bool overwrite) {
  if (2 * (size_ + erased_ + 1) > slots_.size()) Rehash(size_ + 1);
  const uint32_t hash = Hash(name);
  size_t free = kNone;  // the first tombstone on the way: reused for a new entry
  size_t i = hash & mask_;
  for (;; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.size == kEmpty) break;
    if (slot.size == kErased) {
      if (free == kNone) free = i;
      continue;
    }
    if (slot.hash == hash && slot.size == name.size() && keys_.compare(slot.offset, slot.size, name) == 0) {
      if (overwrite) slot.position = static_cast<uint32_t>(position);
      return false;
    }
  }
  if (free != kNone) {
    i = free;
    --erased_;
  }
  Slot& slot = slots_[i];
  slot.hash = hash;
  slot.offset = static_cast<uint32_t>(keys_.size());
  slot.size = static_cast<uint32_t>(name.size());
  slot.position = static_cast<uint32_t>(position);
  keys_.append(name);
  ++size_;
  return true;
}

}  // namespace graph
}  // namespace actorflow

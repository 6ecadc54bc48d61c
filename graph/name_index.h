// The graph's name -> node position index: one open-addressing table of (hash, key, position)
// slots, the keys' characters packed in one buffer. Every pass looks thousands of names up;
// a lookup here reads one slot (its full hash rules out other names without reading their
// characters) and the key's characters, where a node-based hash map reads a bucket, a node
// and a separately allocated key string, each in another place of the heap: in a graph of
// tens of thousands of nodes those are cache misses, and their number per lookup is what grew
// per op from 1000 to 3000 traced ops.
//
// Keys are the index's own copies (a node renamed in place keeps its entry under the old name
// until Graph::Retain corrects it, as before). Erased entries leave tombstones until the table
// grows; the key buffer only grows (a compile inserts each name once or a few times).
// Positions and the keys' characters in all stay below 4 GiB. Not synchronized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace actorflow {
namespace graph {

class NameIndex {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  // The position of `name`, kNone if absent.
  size_t Find(std::string_view name) const {
    if (slots_.empty()) return kNone;
    const uint32_t hash = Hash(name);
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.size == kEmpty) return kNone;
      if (slot.hash == hash && slot.size == name.size() &&
          std::char_traits<char>::compare(keys_.data() + slot.offset, name.data(), name.size()) == 0)
        return slot.position;
    }
  }
  bool Contains(std::string_view name) const { return Find(name) != kNone; }
  // Adds `name` at `position` unless present (then false, nothing changes).
  bool Insert(std::string_view name, size_t position) { return Put(name, position, /*overwrite=*/false); }
  // Adds `name` or moves it to `position`.
  void Assign(std::string_view name, size_t position) { Put(name, position, /*overwrite=*/true); }
  // Calls keep(name, position&) for every entry, in no particular order; entries it answers
  // false for are erased, the others keep what it wrote to their position.
  template <typename Keep>
  void RetainIf(Keep keep) {
    for (Slot& slot : slots_) {
      if (slot.size >= kErased) continue;
      size_t position = slot.position;
      if (keep(std::string_view(keys_.data() + slot.offset, slot.size), position)) {
        slot.position = static_cast<uint32_t>(position);
      } else {
        slot.size = kErased;
        --size_;
        ++erased_;
      }
    }
  }
  void Reserve(size_t count);
  size_t size() const { return size_; }

 private:
  // 16 bytes: four slots a cache line (a graph of 30 k names takes 1 MiB at most half full).
  // `size` kEmpty: never used (ends a probe); kErased: a tombstone (probes go on).
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu, kErased = 0xFFFFFFFEu;
  struct Slot {
    uint32_t hash = 0;      // the low half of the name's hash
    uint32_t position = 0;
    uint32_t offset = 0;    // of the key's characters in keys_
    uint32_t size = kEmpty;
  };
  static uint32_t Hash(std::string_view name) {
    return static_cast<uint32_t>(std::hash<std::string_view>{}(name));
  }
  bool Put(std::string_view name, size_t position, bool overwrite);
  // Rebuilds the table with room for `count` entries at most half full (drops tombstones).
  void Rehash(size_t count);

  std::vector<Slot> slots_;  // a power of two, or empty
  size_t mask_ = 0;
  size_t size_ = 0, erased_ = 0;
  std::string keys_;  // every key's characters, appended (erased ones stay until copied)
};

}  // namespace graph
}  // namespace actorflow

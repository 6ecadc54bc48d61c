// The graph's name -> node position index: one open-addressing table of (hash, key, position)
// slots, the keys' characters packed in large chunks. Every pass looks thousands of names up;
// a lookup here reads one slot (its full hash rules out other names without reading their
// characters) and the key's characters, where a node-based hash map reads a bucket, a node
// and a separately allocated key string, each in another place of the heap: in a graph of
// tens of thousands of nodes those are cache misses, and their number per lookup is what grew
// per op from 1000 to 3000 traced ops.
//
// Keys are the index's own copies (a node renamed in place keeps its entry under the old name
// until Graph::Retain corrects it, as before). Erased entries leave tombstones and their
// characters in the chunks until the table grows or is copied. Not synchronized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace actorflow {
namespace graph {

class NameIndex {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  NameIndex() = default;
  NameIndex(const NameIndex& other) { *this = other; }
  NameIndex& operator=(const NameIndex& other);
  NameIndex(NameIndex&&) noexcept = default;
  NameIndex& operator=(NameIndex&&) noexcept = default;

  // The position of `name`, kNone if absent.
  size_t Find(std::string_view name) const {
    if (slots_.empty()) return kNone;
    const uint64_t hash = Hash(name);
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.data == nullptr && !slot.erased) return kNone;
      if (!slot.erased && slot.hash == hash && Equal(slot, name)) return slot.position;
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
      if (slot.data == nullptr) continue;
      size_t position = slot.position;
      if (keep(std::string_view(slot.data, slot.size), position)) {
        slot.position = position;
      } else {
        slot.data = nullptr;
        slot.erased = true;
        --size_;
        ++erased_;
      }
    }
  }
  void Reserve(size_t count);
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    const char* data = nullptr;  // null: empty or erased
    uint32_t size = 0;
    bool erased = false;
    size_t position = 0;
  };
  static uint64_t Hash(std::string_view name);
  static bool Equal(const Slot& slot, std::string_view name) {
    return slot.size == name.size() && std::char_traits<char>::compare(slot.data, name.data(), name.size()) == 0;
  }
  bool Put(std::string_view name, size_t position, bool overwrite);
  // Rebuilds the table with room for `count` entries at most half full (drops tombstones).
  void Rehash(size_t count);
  const char* CopyKey(std::string_view name);

  std::vector<Slot> slots_;  // a power of two, or empty
  size_t mask_ = 0;
  size_t size_ = 0, erased_ = 0;
  std::vector<std::unique_ptr<char[]>> chunks_;  // key characters; a chunk never moves
  size_t chunk_used_ = 0, chunk_size_ = 0;
};

}  // namespace graph
}  // namespace actorflow

// Storage for the names a job binds to a cached compile (session/job_cache.h): thousands of
// short strings made once per job and read as views, without an allocation per string.
//
// Thread-safety: none; a table is filled by one thread and read-only afterwards.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>
#include <unordered_map>
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

// Distinct strings (source lines) stored once in an arena and numbered in the order first
// seen. Neighbouring nodes mostly share a line: one equal to the last asked skips the hash.
class InternedLines {
 public:
  explicit InternedLines(NameArena& text) : text_(text) {}
  InternedLines(const InternedLines&) = delete;
  InternedLines& operator=(const InternedLines&) = delete;

  uint32_t Id(std::string_view line) {
    if (lines_.empty() || line != last_) {
      auto it = ids_.find(line);
      if (it == ids_.end()) {
        const std::string_view stored = text_.Concat(line);
        it = ids_.emplace(stored, static_cast<uint32_t>(lines_.size())).first;
        lines_.push_back(stored);
      }
      last_id_ = it->second;
      last_ = lines_[last_id_];
    }
    return last_id_;
  }
  // The stored copy of `line`.
  std::string_view Store(std::string_view line) { return lines_[Id(line)]; }
  // The distinct lines by id (the table is empty afterwards).
  std::vector<std::string_view> TakeLines() {
    ids_.clear();
    return std::move(lines_);
  }

 private:
  NameArena& text_;
  std::unordered_map<std::string_view, uint32_t> ids_;
  std::vector<std::string_view> lines_;
  std::string_view last_;
  uint32_t last_id_ = 0;
};

}  // namespace actorflow

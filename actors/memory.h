// Where register memory lives, and who allocates and copies it.
//
// A register has a memory case (plan RegisterDesc.memory_case): host, pinned host, or device
// memory of one device id. The runtime allocates each register once, at instantiation, from
// the allocator registered for its memory kind (one block per register, aligned; small host
// registers share slabs, see RegisterMemory), and frees it through the same allocator when the
// runtime and every handle that may still touch it (asynchronous completions) are gone. A plan whose memory case has no allocator is rejected
// by Runtime::Create, naming the task and the memory case.
//
// Copies between memory cases go through CopyBytes, which knows both ends: host-accessible
// memory on both sides is a memcpy; otherwise the allocator of the device side copies. This
// is how sources fill registers from the caller's host buffers and sinks deliver registers
// to the caller, so a device allocator (CUDA) plugs in without touching the actors.
//
// Thread-safety: AllocatorRegistry is thread-safe. An allocator's Allocate/Free run at
// instantiation and teardown; its Copy runs on the host thread (Push) and on actor threads,
// concurrently for different registers: it must be thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/status.h"

namespace actorflow {

enum class MemoryKind : int32_t { kHost = 0, kPinnedHost = 1, kDevice = 2 };

struct MemoryCase {
  MemoryKind kind = MemoryKind::kHost;
  int32_t device_id = 0;  // kDevice only
  std::string ToString() const;  // "host", "pinned_host", "device:0"
  bool operator==(const MemoryCase& o) const {
    return kind == o.kind && (kind != MemoryKind::kDevice || device_id == o.device_id);
  }
  bool operator!=(const MemoryCase& o) const { return !(*this == o); }
};

class RegisterAllocator {
 public:
  virtual ~RegisterAllocator() = default;
  // `bytes` > 0, `alignment` a power of two. The block need not be zeroed.
  virtual StatusOr<void*> Allocate(const MemoryCase& memory_case, size_t bytes, size_t alignment) = 0;
  virtual void Free(const MemoryCase& memory_case, void* block) = 0;
  // Whether the CPU may read and write this memory directly (host, pinned host).
  virtual bool host_accessible() const = 0;
  // Copies `bytes` between this allocator's memory and another memory case (either end may be
  // this allocator's). Only called where one end is not host-accessible.
  virtual Status Copy(void* dst, const MemoryCase& dst_case, const void* src, const MemoryCase& src_case,
                      size_t bytes);
  // Fills this allocator's memory with zero bytes (registers start zeroed).
  virtual Status Zero(const MemoryCase& memory_case, void* block, size_t bytes);
};

// Plain host memory: std::aligned_alloc.
class HostAllocator : public RegisterAllocator {
 public:
  StatusOr<void*> Allocate(const MemoryCase& memory_case, size_t bytes, size_t alignment) override;
  void Free(const MemoryCase& memory_case, void* block) override;
  bool host_accessible() const override { return true; }
};

// Allocators by memory kind (one allocator serves every device id of its kind).
class AllocatorRegistry {
 public:
  // The process-wide registry Runtime uses unless RuntimeOptions names another; holds the
  // HostAllocator for kHost. A CUDA build registers pinned host and device allocators here.
  static AllocatorRegistry& Global();

  // Replaces what was registered for `kind` (runtimes already created keep theirs).
  void Register(MemoryKind kind, std::shared_ptr<RegisterAllocator> allocator);
  // NotFound naming the memory case when none is registered.
  StatusOr<std::shared_ptr<RegisterAllocator>> Find(const MemoryCase& memory_case) const;

 private:
  mutable std::mutex mu_;
  std::map<MemoryKind, std::shared_ptr<RegisterAllocator>> allocators_;
};

// One end of a copy: the memory case and the allocator of that memory (null for the caller's
// host buffers). Whether the CPU can reach it is asked once, here, not per copy.
struct MemoryPlace {
  MemoryPlace() = default;
  MemoryPlace(MemoryCase memory_case, RegisterAllocator* allocator)
      : memory_case(memory_case), allocator(allocator), cpu_accessible(allocator == nullptr || allocator->host_accessible()) {}
  MemoryCase memory_case;
  RegisterAllocator* allocator = nullptr;
  bool cpu_accessible = true;
  bool host_accessible() const { return cpu_accessible; }
};
const MemoryPlace& HostPlace();  // the caller's host memory

// The one copy between memory cases (see above).
Status CopyBytes(void* dst, const MemoryPlace& dst_place, const void* src, const MemoryPlace& src_place, size_t bytes);

// Register blocks allocated at instantiation, freed together through their allocators when
// the last owner lets go (the runtime, and asynchronous completions still outstanding).
// Small blocks of plain host memory (HostAllocator itself, not an allocator derived from it)
// are carved in order from shared slabs: a plan of thousands of small registers then makes a
// few allocations instead of one aligned allocation (and free) per register, and its
// registers sit together in the order the plan runs them. Under AddressSanitizer every block
// keeps its own allocation, so a kernel writing past its register is still caught.
class RegisterMemory {
 public:
  RegisterMemory() = default;
  RegisterMemory(const RegisterMemory&) = delete;
  RegisterMemory& operator=(const RegisterMemory&) = delete;
  ~RegisterMemory();
  // A zeroed block of `bytes` (> 0) aligned to `alignment`.
  StatusOr<void*> Allocate(std::shared_ptr<RegisterAllocator> allocator, const MemoryCase& memory_case, size_t bytes,
                           size_t alignment);
  size_t num_blocks() const { return blocks_.size(); }

 private:
  struct Block {
    std::shared_ptr<RegisterAllocator> allocator;
    MemoryCase memory_case;
    void* data;
  };
  std::vector<Block> blocks_;
  // The slab small host blocks are carved from (blocks_.back() once made), and its fill.
  char* slab_ = nullptr;
  size_t slab_used_ = 0;
};

}  // namespace actorflow

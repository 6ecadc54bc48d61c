#include "actors/memory.h"

#include <cstdlib>
#include <cstring>
#include <typeinfo>

#include "actors/cuda_device.h"

namespace actorflow {

std::string MemoryCase::ToString() const {
  switch (kind) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kPinnedHost: return "pinned_host";
    case MemoryKind::kDevice: return "device:" + std::to_string(device_id);
  }
  return "memory kind " + std::to_string(static_cast<int32_t>(kind));
}

Status RegisterAllocator::Copy(void*, const MemoryCase& dst_case, const void*, const MemoryCase& src_case, size_t) {
  return Unimplemented("no copy from " + src_case.ToString() + " to " + dst_case.ToString() + " memory");
}

Status RegisterAllocator::Zero(const MemoryCase& memory_case, void* block, size_t bytes) {
  if (!host_accessible()) return Unimplemented("the allocator of " + memory_case.ToString() + " memory cannot zero it");
  std::memset(block, 0, bytes);
  return Status::Ok();
}

StatusOr<void*> HostAllocator::Allocate(const MemoryCase& memory_case, size_t bytes, size_t alignment) {
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* block = std::aligned_alloc(alignment, rounded);
  if (block == nullptr)
    return Internal("out of " + memory_case.ToString() + " memory allocating " + std::to_string(bytes) + " bytes");
  return block;
}

void HostAllocator::Free(const MemoryCase&, void* block) { std::free(block); }

AllocatorRegistry& AllocatorRegistry::Global() {
  static AllocatorRegistry* registry = [] {
    auto* r = new AllocatorRegistry;  // never destroyed: runtimes may end during static teardown
    r->Register(MemoryKind::kHost, std::make_shared<HostAllocator>());
#ifdef ACTORFLOW_WITH_CUDA
    RegisterCudaAllocators(*r);
#endif
    return r;
  }();
  return *registry;
}

void AllocatorRegistry::Register(MemoryKind kind, std::shared_ptr<RegisterAllocator> allocator) {
  std::lock_guard<std::mutex> lock(mu_);
  allocators_[kind] = std::move(allocator);
}

StatusOr<std::shared_ptr<RegisterAllocator>> AllocatorRegistry::Find(const MemoryCase& memory_case) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocators_.find(memory_case.kind);
  if (it == allocators_.end() || it->second == nullptr)
    return NotFound("no allocator is registered for " + memory_case.ToString() + " memory");
  return it->second;
}

const MemoryPlace& HostPlace() {
  static const MemoryPlace host;
  return host;
}

Status CopyBytes(void* dst, const MemoryPlace& dst_place, const void* src, const MemoryPlace& src_place, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  if (dst_place.host_accessible() && src_place.host_accessible()) {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  RegisterAllocator* copier = dst_place.host_accessible() ? src_place.allocator : dst_place.allocator;
  return copier->Copy(dst, dst_place.memory_case, src, src_place.memory_case, bytes);
}

RegisterMemory::~RegisterMemory() {
  for (Block& block : blocks_) block.allocator->Free(block.memory_case, block.data);
}

namespace {

// Host blocks up to kSmallBlock bytes come from slabs of kSlabBytes (RegisterMemory).
constexpr size_t kSmallBlock = size_t{4} << 10;
constexpr size_t kSlabBytes = size_t{64} << 10;
constexpr size_t kSlabAlignment = 64;

bool CarvedFromSlabs(const RegisterAllocator& allocator, const MemoryCase& memory_case, size_t bytes,
                     size_t alignment) {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#else
  return typeid(allocator) == typeid(HostAllocator) && memory_case.kind == MemoryKind::kHost && bytes <= kSmallBlock &&
         alignment <= kSlabAlignment;
#endif
}

}  // namespace

StatusOr<void*> RegisterMemory::Allocate(std::shared_ptr<RegisterAllocator> allocator, const MemoryCase& memory_case,
                                         size_t bytes, size_t alignment) {
  if (CarvedFromSlabs(*allocator, memory_case, bytes, alignment)) {
    size_t offset = (slab_used_ + alignment - 1) / alignment * alignment;
    if (slab_ == nullptr || offset + bytes > kSlabBytes) {
      AF_ASSIGN_OR_RETURN(void* slab, allocator->Allocate(memory_case, kSlabBytes, kSlabAlignment));
      if (slab == nullptr) return Internal("the allocator of " + memory_case.ToString() + " memory returned null");
      blocks_.push_back(Block{std::move(allocator), memory_case, slab});
      slab_ = static_cast<char*>(slab);
      offset = 0;
    }
    slab_used_ = offset + bytes;
    std::memset(slab_ + offset, 0, bytes);
    return static_cast<void*>(slab_ + offset);
  }
  AF_ASSIGN_OR_RETURN(void* data, allocator->Allocate(memory_case, bytes, alignment));
  if (data == nullptr) return Internal("the allocator of " + memory_case.ToString() + " memory returned null");
  blocks_.push_back(Block{allocator, memory_case, data});
  AF_RETURN_IF_ERROR(allocator->Zero(memory_case, data, bytes));
  return data;
}

}  // namespace actorflow

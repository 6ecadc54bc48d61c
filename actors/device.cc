#include "actors/device.h"

#include <condition_variable>

#include "actors/cuda_device.h"

namespace actorflow {

Status DeviceStream::Synchronize() {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status result;
  AF_RETURN_IF_ERROR(OnComplete([&](Status status) {
    std::lock_guard<std::mutex> lock(mu);
    result = std::move(status);
    done = true;
    cv.notify_all();
  }));
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return result;
}

DeviceRegistry& DeviceRegistry::Global() {
  static DeviceRegistry* registry = [] {
    auto* r = new DeviceRegistry;  // never destroyed: streams outlive static teardown
#ifdef ACTORFLOW_WITH_CUDA
    RegisterCudaDevice(*r);
#endif
    return r;
  }();
  return *registry;
}

void DeviceRegistry::Register(const std::string& device_type, std::shared_ptr<DeviceBackend> backend) {
  std::lock_guard<std::mutex> lock(mu_);
  backends_[device_type] = std::move(backend);
}

StatusOr<std::shared_ptr<DeviceBackend>> DeviceRegistry::Find(const std::string& device_type) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = backends_.find(device_type);
  if (it != backends_.end() && it->second != nullptr) return it->second;
  std::string known;
  for (const auto& [type, backend] : backends_) known += (known.empty() ? "" : ", ") + type;
  return NotFound("no device backend '" + device_type + "' in this process (registered: " +
                  (known.empty() ? std::string("none") : known) + ")" +
                  (device_type == "cuda" ? "; this build of actorflow has no CUDA support or did not register it" : ""));
}

size_t CachingAllocator::SizeClass(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t{1} << 20;
  if (bytes <= kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  size_t power = kLarge;
  while (power * 2 <= bytes) power *= 2;
  const size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

namespace {
int DeviceKey(const MemoryCase& memory_case) {
  return memory_case.kind == MemoryKind::kDevice ? memory_case.device_id : -1;
}
}  // namespace

CachingAllocator::~CachingAllocator() { ReleaseCached(); }

StatusOr<void*> CachingAllocator::Allocate(const MemoryCase& memory_case, size_t bytes, size_t alignment) {
  if (alignment > 256)
    return InvalidArgument("the caching allocator of " + memory_case.ToString() + " memory aligns to 256 bytes, " +
                           std::to_string(alignment) + " asked");
  const size_t size_class = SizeClass(bytes);
  const int device = DeviceKey(memory_case);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cached_.find({device, size_class});
    if (it != cached_.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      in_use_[block] = size_class;
      ++stats_.cache_hits;
      stats_.bytes_cached -= static_cast<int64_t>(size_class);
      stats_.bytes_in_use += static_cast<int64_t>(size_class);
      return block;
    }
  }
  auto block = raw_->Allocate(device < 0 ? 0 : device, size_class);
  if (!block.ok()) {
    // Out of memory with blocks of other sizes cached: give them back and try once more.
    ReleaseCached();
    block = raw_->Allocate(device < 0 ? 0 : device, size_class);
    if (!block.ok()) return block.status().WithContext("allocating " + std::to_string(bytes) + " bytes of " +
                                                       memory_case.ToString() + " memory");
  }
  std::lock_guard<std::mutex> lock(mu_);
  in_use_[block.value()] = size_class;
  ++stats_.raw_allocations;
  stats_.bytes_in_use += static_cast<int64_t>(size_class);
  return block.value();
}

void CachingAllocator::Free(const MemoryCase& memory_case, void* block) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(block);
  AF_CHECK(it != in_use_.end()) << "freeing a block this allocator did not hand out (" << memory_case.ToString() << ")";
  const size_t size_class = it->second;
  in_use_.erase(it);
  cached_[{DeviceKey(memory_case), size_class}].push_back(block);
  stats_.bytes_in_use -= static_cast<int64_t>(size_class);
  stats_.bytes_cached += static_cast<int64_t>(size_class);
}

Status CachingAllocator::Copy(void* dst, const MemoryCase& dst_case, const void* src, const MemoryCase& src_case,
                              size_t bytes) {
  return raw_->Copy(dst, dst_case, src, src_case, bytes);
}

Status CachingAllocator::Zero(const MemoryCase& memory_case, void* block, size_t bytes) {
  return raw_->Zero(DeviceKey(memory_case) < 0 ? 0 : memory_case.device_id, block, bytes);
}

void CachingAllocator::ReleaseCached() {
  std::map<std::pair<int, size_t>, std::vector<void*>> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    released.swap(cached_);
    stats_.bytes_cached = 0;
  }
  for (auto& [key, blocks] : released)
    for (void* block : blocks) raw_->Free(key.first < 0 ? 0 : key.first, block);
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace actorflow

namespace actorflow {

KernelFn StreamKernel(DeviceStream* stream, KernelFn launch, std::function<Status(int64_t iteration)> check_after) {
  // Shared, so a completion still pending when the kernel is dropped keeps its check alive.
  auto check = check_after ? std::make_shared<const std::function<Status(int64_t)>>(std::move(check_after)) : nullptr;
  return [stream, launch = std::move(launch), check](KernelContext& context) -> Status {
    const int64_t iteration = context.iteration;
    if (!context.asynchronous()) {
      Status launched = launch(context);
      Status finished = stream->Synchronize();
      if (!launched.ok()) return launched;
      if (!finished.ok() || !check) return finished;
      return (*check)(iteration);
    }
    if (context.stream_ordered && !check) return launch(context);  // the stream orders the rest
    KernelCompletion completion = context.TakeCompletion();
    Status launched = launch(context);
    Status enqueued = stream->OnComplete([completion, launched, check, iteration](Status finished) mutable {
      if (!launched.ok()) finished = launched;
      else if (finished.ok() && check) finished = (*check)(iteration);
      completion.Complete(std::move(finished));
    });
    // Not enqueued: nothing will call back; the act ends here (a dropped handle would too).
    if (!enqueued.ok()) completion.Complete(launched.ok() ? enqueued : launched);
    return Status::Ok();
  };
}

}  // namespace actorflow

namespace actorflow {
bool BuiltWithCuda() {
#ifdef ACTORFLOW_WITH_CUDA
  return true;
#else
  return false;
#endif
}
}  // namespace actorflow

namespace actorflow {

KernelFn DeviceCopyKernel(DeviceStream* stream, CopyDirection direction, size_t bytes) {
  return StreamKernel(stream, [stream, direction, bytes](KernelContext& context) -> Status {
    return stream->CopyAsync(context.output(0).data, context.input(0).data, bytes, direction);
  });
}

}  // namespace actorflow

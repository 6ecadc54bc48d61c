// Devices beside the CPU (CUDA GPUs, and the test device of actors/host_test_device.h): their
// streams, the caching allocator of their memory, and the registry the compiler, the session and
// the kernels find them in.
//
// A stream is one ordered queue of device work (a cudaStream_t). Kernels of a device enqueue on
// the stream their KernelInit names and complete their act from DeviceStream::OnComplete, which
// calls back from the stream's own completion thread once everything enqueued before it has
// finished: no CAF worker ever waits for a device (actors/kernel.h, asynchronous acts). Each
// device has a compute stream and a copy stream, so host<->device copies overlap compute; the
// runtime orders work across them (a consumer is launched only after its producer's completion
// announced the register), so no stream ever waits for another.
//
// Device memory comes from a CachingAllocator: blocks freed by a runtime go back to a cache per
// (device, size class) and the next runtime's registers reuse them, so instantiating plans (a
// new job, a re-created runtime) does not call the device's allocation function (cudaMalloc
// synchronizes the device) once the cache holds enough; nothing allocates per iteration anyway.
//
// Thread-safety: everything here is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/kernel.h"
#include "actors/memory.h"
#include "actors/status.h"

namespace actorflow {

enum class CopyDirection { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// One ordered queue of a device's work.
class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  // "cuda:0/compute": for errors.
  virtual const std::string& name() const = 0;
  // The handle kernels enqueue on (a cudaStream_t for CUDA).
  virtual void* native_handle() = 0;
  // Enqueues a copy of `bytes` (asynchronous; the host end should be pinned for real overlap).
  virtual Status CopyAsync(void* dst, const void* src, size_t bytes, CopyDirection direction) = 0;
  // Calls `done` once everything enqueued so far has finished, with the first error the device
  // reported for it (a failed kernel, an illegal address), on the stream's completion thread,
  // never on the caller's. `done` must not block for long: it runs the stream's completions in
  // order. An error here means `done` will not be called (it was not enqueued).
  virtual Status OnComplete(std::function<void(Status)> done) = 0;
  // Blocks the calling thread until the stream's work finished; for tests, setup and teardown,
  // never for actors (they use OnComplete).
  Status Synchronize();
};

// One kind of device: its device count and the streams of each device.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // Devices present. 0 with `why` saying why not (no driver, no device, probe error).
  virtual int device_count(std::string* why) = 0;
  // The device's compute and copy streams, created on first use and kept for the process
  // (InvalidArgument naming the device and the count when `device_id` is out of range).
  virtual StatusOr<DeviceStream*> ComputeStream(int device_id) = 0;
  virtual StatusOr<DeviceStream*> CopyStream(int device_id) = 0;
};

// Device backends by kernel device type ("cuda"). A CUDA build registers "cuda" at start-up
// (actors/cuda_device.cc); tests register their own types.
class DeviceRegistry {
 public:
  static DeviceRegistry& Global();
  void Register(const std::string& device_type, std::shared_ptr<DeviceBackend> backend);
  // NotFound naming the type and what is registered (a CPU-only build has no "cuda").
  StatusOr<std::shared_ptr<DeviceBackend>> Find(const std::string& device_type) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<DeviceBackend>> backends_;
};

// The memory behind a CachingAllocator: the device's own allocation, free, copy and fill.
class RawDeviceMemory {
 public:
  virtual ~RawDeviceMemory() = default;
  virtual StatusOr<void*> Allocate(int device_id, size_t bytes) = 0;
  virtual void Free(int device_id, void* block) = 0;
  virtual bool host_accessible() const = 0;
  // Synchronous copy between this memory and another memory case (RegisterAllocator::Copy).
  virtual Status Copy(void* dst, const MemoryCase& dst_case, const void* src, const MemoryCase& src_case,
                      size_t bytes) = 0;
  virtual Status Zero(int device_id, void* block, size_t bytes) = 0;
};

// A RegisterAllocator that keeps freed blocks for reuse. Sizes are rounded up to a size class
// (multiples of 512 bytes up to 1 MiB, then of 1/8 of the power of two below), and a request is
// served by a cached block of its exact class and device; alignment up to 256 bytes is the raw
// memory's (cudaMalloc and cudaHostAlloc give 256 at least). Blocks stay cached until
// ReleaseCached or the allocator's end.
class CachingAllocator : public RegisterAllocator {
 public:
  explicit CachingAllocator(std::shared_ptr<RawDeviceMemory> raw) : raw_(std::move(raw)) {}
  ~CachingAllocator() override;
  StatusOr<void*> Allocate(const MemoryCase& memory_case, size_t bytes, size_t alignment) override;
  void Free(const MemoryCase& memory_case, void* block) override;
  bool host_accessible() const override { return raw_->host_accessible(); }
  Status Copy(void* dst, const MemoryCase& dst_case, const void* src, const MemoryCase& src_case,
              size_t bytes) override;
  Status Zero(const MemoryCase& memory_case, void* block, size_t bytes) override;

  // Returns every cached block to the raw memory (e.g. before a large allocation fails).
  void ReleaseCached();
  struct Stats {
    int64_t raw_allocations = 0;  // calls of RawDeviceMemory::Allocate so far
    int64_t cache_hits = 0;       // requests served from the cache
    int64_t bytes_in_use = 0;     // handed out and not freed
    int64_t bytes_cached = 0;     // freed, kept for reuse
  };
  Stats stats() const;
  static size_t SizeClass(size_t bytes);

 private:
  std::shared_ptr<RawDeviceMemory> raw_;
  mutable std::mutex mu_;
  std::map<std::pair<int, size_t>, std::vector<void*>> cached_;  // (device, class) -> free blocks
  std::map<void*, size_t> in_use_;                               // block -> its class
  Stats stats_;
};

}  // namespace actorflow

namespace actorflow {

// A device kernel from the function that enqueues its work on `stream` (`launch`, called on
// the actor's thread, returns once the work is enqueued). In an asynchronous act the act
// completes from the stream's OnComplete with the device's status (a launch error still waits
// for what was enqueued before failing the act), except in a stream-ordered act (plan
// Task.stream_ordered, KernelContext::stream_ordered) without `check_after`, which ends as soon
// as the work is enqueued: its readers and the next writers of its registers enqueue on the
// same stream after it, so the stream keeps their order, and a device error surfaces at the
// next completion on the stream. Called outside the runtime (a synchronous context: tests,
// eager calls) it waits for the stream instead. `check_after`, when set, runs
// once the act's device work finished (on the stream's completion thread, or the caller's in a
// synchronous context) with the act's iteration, and may fail the act (e.g. a bad input the
// device work recorded).
KernelFn StreamKernel(DeviceStream* stream, KernelFn launch, std::function<Status(int64_t iteration)> check_after = nullptr);

}  // namespace actorflow

namespace actorflow {

// The kernel of a copy task between host and device memory: one blob of `bytes`, input 0 to
// output 0, enqueued on `stream` (a device's copy stream) and completed as StreamKernel does.
KernelFn DeviceCopyKernel(DeviceStream* stream, CopyDirection direction, size_t bytes);

}  // namespace actorflow

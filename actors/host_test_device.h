// A device for tests on machines without a GPU: its "device memory" is host memory that the
// runtime must treat as unreachable (host_accessible() is false, so every copy goes through the
// allocator, as with CUDA), and each stream is a worker thread that runs enqueued work in order
// and calls OnComplete callbacks from that thread, as CUDA's completion thread does. The runtime
// paths of a GPU (device registers, caching allocation, copy tasks, asynchronous acts completed
// off the CAF workers) run on it unchanged.
//
// Thread-safety: thread-safe. Streams live as long as the backend.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/device.h"

namespace actorflow {

class HostTestStream : public DeviceStream {
 public:
  explicit HostTestStream(std::string name);
  ~HostTestStream() override;  // runs what is queued, then ends the worker
  const std::string& name() const override { return name_; }
  // The stream itself: test kernels cast it back and Enqueue.
  void* native_handle() override { return this; }
  Status CopyAsync(void* dst, const void* src, size_t bytes, CopyDirection direction) override;
  Status OnComplete(std::function<void(Status)> done) override;
  // Runs `work` on the stream's thread after what was enqueued before; its error is reported to
  // the next OnComplete (then cleared: each completion reports the errors since the last one).
  void Enqueue(std::function<Status()> work);
  // Each item waits this long before it runs (tests: make device work outlast the launch).
  void set_delay(std::chrono::microseconds delay) { delay_us_ = delay.count(); }
  int64_t items_run() const { return items_run_.load(); }
  // Whether the caller is this stream's worker thread.
  bool on_stream_thread() const { return std::this_thread::get_id() == worker_.get_id(); }

 private:
  void Loop();
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  Status pending_error_;  // the stream thread's only
  std::atomic<int64_t> delay_us_{0};
  std::atomic<int64_t> items_run_{0};
  std::thread worker_;
};

// Host memory posing as device memory (see above); counts raw allocations through its
// CachingAllocator's stats.
class HostTestMemory : public RawDeviceMemory {
 public:
  StatusOr<void*> Allocate(int device_id, size_t bytes) override;
  void Free(int device_id, void* block) override;
  bool host_accessible() const override { return false; }
  Status Copy(void* dst, const MemoryCase& dst_case, const void* src, const MemoryCase& src_case,
              size_t bytes) override;
  Status Zero(int device_id, void* block, size_t bytes) override;
};

class HostTestBackend : public DeviceBackend {
 public:
  explicit HostTestBackend(std::string device_type, int devices);
  int device_count(std::string* why) override;
  StatusOr<DeviceStream*> ComputeStream(int device_id) override;
  StatusOr<DeviceStream*> CopyStream(int device_id) override;
  HostTestStream* compute(int device_id) { return compute_[device_id].get(); }
  HostTestStream* copy(int device_id) { return copy_[device_id].get(); }

 private:
  StatusOr<int> Check(int device_id) const;
  std::string device_type_;
  std::vector<std::unique_ptr<HostTestStream>> compute_, copy_;
};

}  // namespace actorflow

// The CUDA device: streams completed by an event-waiting thread, device memory (cudaMalloc) and
// pinned host memory (cudaHostAlloc) behind caching allocators. Host code against the CUDA
// runtime only (no nvcc); built when CUDA is enabled.
#include "actors/cuda_device.h"

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <thread>

#include "actors/device.h"

namespace actorflow {
namespace {

Status CudaStatus(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return Status::Ok();
  return Internal(what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
}

// A non-blocking stream of one device and the thread that waits for its events: OnComplete
// records an event (from a pool: no event is created per act once warm) and this thread waits
// for it with a blocking-sync event (it sleeps, it does not spin), then calls back in order.
class CudaStream : public DeviceStream {
 public:
  static StatusOr<std::unique_ptr<CudaStream>> Create(int device, const std::string& name) {
    AF_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), name + ": cudaSetDevice(" + std::to_string(device) + ")"));
    cudaStream_t stream = nullptr;
    AF_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), name + ": cudaStreamCreate"));
    return std::unique_ptr<CudaStream>(new CudaStream(device, stream, name));
  }
  ~CudaStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    waiter_.join();
    cudaSetDevice(device_);
    for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
    cudaStreamDestroy(stream_);
  }
  const std::string& name() const override { return name_; }
  void* native_handle() override { return stream_; }

  Status CopyAsync(void* dst, const void* src, size_t bytes, CopyDirection direction) override {
    const cudaMemcpyKind kind = direction == CopyDirection::kHostToDevice   ? cudaMemcpyHostToDevice
                                : direction == CopyDirection::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                                            : cudaMemcpyDeviceToDevice;
    AF_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), name_ + ": cudaSetDevice"));
    return CudaStatus(cudaMemcpyAsync(dst, src, bytes, kind, stream_), name_ + ": cudaMemcpyAsync of " +
                                                                          std::to_string(bytes) + " bytes");
  }

  Status OnComplete(std::function<void(Status)> done) override {
    AF_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), name_ + ": cudaSetDevice"));
    cudaEvent_t event = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return FailedPrecondition(name_ + ": the stream is shutting down");
      if (!free_events_.empty()) {
        event = free_events_.back();
        free_events_.pop_back();
      }
    }
    if (event == nullptr)
      AF_RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&event, cudaEventBlockingSync | cudaEventDisableTiming),
                                    name_ + ": cudaEventCreate"));
    Status recorded = CudaStatus(cudaEventRecord(event, stream_), name_ + ": cudaEventRecord");
    std::lock_guard<std::mutex> lock(mu_);
    if (!recorded.ok()) {
      free_events_.push_back(event);
      return recorded;
    }
    pending_.push_back(Pending{event, std::move(done)});
    cv_.notify_one();
    return Status::Ok();
  }

 private:
  struct Pending {
    cudaEvent_t event;
    std::function<void(Status)> done;
  };
  CudaStream(int device, cudaStream_t stream, std::string name)
      : device_(device), stream_(stream), name_(std::move(name)) {
    waiter_ = std::thread([this] { Wait(); });
  }
  void Wait() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;
      Pending next = std::move(pending_.front());
      pending_.pop_front();
      lock.unlock();
      // A kernel's fault surfaces here (sticky errors make every later wait fail too).
      Status status = CudaStatus(cudaEventSynchronize(next.event), name_ + ": device work failed");
      next.done(std::move(status));
      lock.lock();
      free_events_.push_back(next.event);
    }
  }

  const int device_;
  cudaStream_t stream_;
  const std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  bool stopping_ = false;
  std::thread waiter_;
};

cudaMemcpyKind KindOf(const MemoryCase& dst, const MemoryCase& src) {
  const bool dst_device = dst.kind == MemoryKind::kDevice, src_device = src.kind == MemoryKind::kDevice;
  if (dst_device && src_device) return cudaMemcpyDeviceToDevice;
  if (dst_device) return cudaMemcpyHostToDevice;
  if (src_device) return cudaMemcpyDeviceToHost;
  return cudaMemcpyHostToHost;
}

class CudaDeviceMemory : public RawDeviceMemory {
 public:
  StatusOr<void*> Allocate(int device_id, size_t bytes) override {
    AF_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_id), "cudaSetDevice(" + std::to_string(device_id) + ")"));
    void* block = nullptr;
    AF_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&block, bytes), "cudaMalloc of " + std::to_string(bytes) +
                                                                  " bytes on device " + std::to_string(device_id)));
    return block;
  }
  void Free(int device_id, void* block) override {
    cudaSetDevice(device_id);
    cudaFree(block);
  }
  bool host_accessible() const override { return false; }
  // Synchronous (sources, sinks and setup; copy tasks use their stream).
  Status Copy(void* dst, const MemoryCase& dst_case, const void* src, const MemoryCase& src_case,
              size_t bytes) override {
    return CudaStatus(cudaMemcpy(dst, src, bytes, KindOf(dst_case, src_case)),
                      "cudaMemcpy from " + src_case.ToString() + " to " + dst_case.ToString());
  }
  Status Zero(int device_id, void* block, size_t bytes) override {
    AF_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_id), "cudaSetDevice(" + std::to_string(device_id) + ")"));
    AF_RETURN_IF_ERROR(CudaStatus(cudaMemset(block, 0, bytes), "cudaMemset on device " + std::to_string(device_id)));
    // The memset runs on the legacy default stream, which the runtime's non-blocking streams do
    // not wait for: finish it here (instantiation only, never per iteration).
    return CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemset");
  }
};

// Page-locked host memory, portable (usable with every device's streams).
class CudaPinnedMemory : public RawDeviceMemory {
 public:
  StatusOr<void*> Allocate(int, size_t bytes) override {
    void* block = nullptr;
    AF_RETURN_IF_ERROR(CudaStatus(cudaHostAlloc(&block, bytes, cudaHostAllocPortable),
                                  "cudaHostAlloc of " + std::to_string(bytes) + " bytes"));
    return block;
  }
  void Free(int, void* block) override { cudaFreeHost(block); }
  bool host_accessible() const override { return true; }
  Status Copy(void*, const MemoryCase& dst_case, const void*, const MemoryCase& src_case, size_t) override {
    return Unimplemented("pinned host memory copies as host memory (from " + src_case.ToString() + " to " +
                         dst_case.ToString() + ")");
  }
  Status Zero(int, void* block, size_t bytes) override {
    std::memset(block, 0, bytes);
    return Status::Ok();
  }
};

class CudaBackend : public DeviceBackend {
 public:
  int device_count(std::string* why) override {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      if (why != nullptr) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(error) + " (" +
                                 cudaGetErrorString(error) + ")";
      return 0;
    }
    if (count == 0 && why != nullptr) *why = "cudaGetDeviceCount found 0 devices";
    return count;
  }
  StatusOr<DeviceStream*> ComputeStream(int device_id) override { return Stream(device_id, 0); }
  StatusOr<DeviceStream*> CopyStream(int device_id) override { return Stream(device_id, 1); }

 private:
  StatusOr<DeviceStream*> Stream(int device_id, int which) {
    std::lock_guard<std::mutex> lock(mu_);
    auto key = std::make_pair(device_id, which);
    auto it = streams_.find(key);
    if (it != streams_.end()) return static_cast<DeviceStream*>(it->second.get());
    std::string why;
    const int count = device_count(&why);
    if (device_id < 0 || device_id >= count)
      return InvalidArgument("cuda device " + std::to_string(device_id) + " does not exist: " + std::to_string(count) +
                             " device(s)" + (why.empty() ? "" : " (" + why + ")"));
    AF_ASSIGN_OR_RETURN(auto stream, CudaStream::Create(device_id, "cuda:" + std::to_string(device_id) +
                                                                       (which == 0 ? "/compute" : "/copy")));
    DeviceStream* raw = stream.get();
    streams_.emplace(key, std::move(stream));
    return raw;
  }
  std::mutex mu_;
  std::map<std::pair<int, int>, std::unique_ptr<CudaStream>> streams_;
};

}  // namespace

void RegisterCudaDevice(DeviceRegistry& devices) { devices.Register("cuda", std::make_shared<CudaBackend>()); }

void RegisterCudaAllocators(AllocatorRegistry& allocators) {
  allocators.Register(MemoryKind::kDevice, std::make_shared<CachingAllocator>(std::make_shared<CudaDeviceMemory>()));
  allocators.Register(MemoryKind::kPinnedHost, std::make_shared<CachingAllocator>(std::make_shared<CudaPinnedMemory>()));
}

}  // namespace actorflow

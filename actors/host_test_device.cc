#include "actors/host_test_device.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace actorflow {

HostTestStream::HostTestStream(std::string name) : name_(std::move(name)) { worker_ = std::thread([this] { Loop(); }); }

HostTestStream::~HostTestStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void HostTestStream::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued ran
    std::function<void()> item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    if (const int64_t delay = delay_us_.load(); delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
    item();
    items_run_.fetch_add(1);
    lock.lock();
  }
}

void HostTestStream::Enqueue(std::function<Status()> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back([this, work = std::move(work)] {
      Status status = work();
      if (!status.ok() && pending_error_.ok()) pending_error_ = status.WithContext(name_);
    });
  }
  cv_.notify_one();
}

Status HostTestStream::CopyAsync(void* dst, const void* src, size_t bytes, CopyDirection) {
  Enqueue([dst, src, bytes] {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  });
  return Status::Ok();
}

Status HostTestStream::OnComplete(std::function<void(Status)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return FailedPrecondition(name_ + ": the stream is shutting down");
    queue_.push_back([this, done = std::move(done)] {
      Status status = std::move(pending_error_);
      pending_error_ = Status::Ok();
      done(std::move(status));
    });
  }
  cv_.notify_one();
  return Status::Ok();
}

StatusOr<void*> HostTestMemory::Allocate(int, size_t bytes) {
  void* block = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (block == nullptr) return Internal("host test device: out of memory for " + std::to_string(bytes) + " bytes");
  return block;
}

void HostTestMemory::Free(int, void* block) { std::free(block); }

Status HostTestMemory::Copy(void* dst, const MemoryCase&, const void* src, const MemoryCase&, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return Status::Ok();
}

Status HostTestMemory::Zero(int, void* block, size_t bytes) {
  std::memset(block, 0, bytes);
  return Status::Ok();
}

HostTestBackend::HostTestBackend(std::string device_type, int devices) : device_type_(std::move(device_type)) {
  for (int d = 0; d < devices; ++d) {
    compute_.push_back(std::make_unique<HostTestStream>(device_type_ + ":" + std::to_string(d) + "/compute"));
    copy_.push_back(std::make_unique<HostTestStream>(device_type_ + ":" + std::to_string(d) + "/copy"));
  }
}

int HostTestBackend::device_count(std::string* why) {
  if (compute_.empty() && why != nullptr) *why = device_type_ + ": the test backend was made with 0 devices";
  return static_cast<int>(compute_.size());
}

StatusOr<int> HostTestBackend::Check(int device_id) const {
  if (device_id < 0 || device_id >= static_cast<int>(compute_.size()))
    return InvalidArgument(device_type_ + " device " + std::to_string(device_id) + " does not exist: " +
                           std::to_string(compute_.size()) + " device(s)");
  return device_id;
}

StatusOr<DeviceStream*> HostTestBackend::ComputeStream(int device_id) {
  AF_ASSIGN_OR_RETURN(int d, Check(device_id));
  return static_cast<DeviceStream*>(compute_[d].get());
}

StatusOr<DeviceStream*> HostTestBackend::CopyStream(int device_id) {
  AF_ASSIGN_OR_RETURN(int d, Check(device_id));
  return static_cast<DeviceStream*>(copy_[d].get());
}

}  // namespace actorflow

// Devices (actors/device.h) on the host test device: the caching allocator, stream kernels that
// complete off the actor threads, and a whole plan of the shape the compiler emits for a GPU
// (pinned source -> host-to-device copy -> device compute -> device-to-host copy -> sink) run by
// the Runtime with registers in "device" memory the CPU must not touch directly.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "actors/cuda_device.h"
#include "actors/device.h"
#include "actors/host_test_device.h"
#include "actors/runtime.h"
#include "actors/runtime_testing.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace {

using testing_support::FinishesWithin;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class CountingMemory : public HostTestMemory {
 public:
  StatusOr<void*> Allocate(int device_id, size_t bytes) override {
    ++allocations;
    if (fail_next) {
      fail_next = false;
      return Internal("test memory is full");
    }
    return HostTestMemory::Allocate(device_id, bytes);
  }
  void Free(int device_id, void* block) override {
    ++frees;
    HostTestMemory::Free(device_id, block);
  }
  std::atomic<int> allocations{0}, frees{0};
  bool fail_next = false;
};

TEST(CachingAllocator, SizeClassesRoundUpAndStayWithinAnEighth) {
  EXPECT_EQ(CachingAllocator::SizeClass(1), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(512), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(513), 1024u);
  EXPECT_EQ(CachingAllocator::SizeClass(1 << 20), size_t{1} << 20);
  for (size_t bytes : {size_t{(1 << 20) + 1}, size_t{3'000'001}, size_t{100'000'007}}) {
    const size_t c = CachingAllocator::SizeClass(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(c - bytes, bytes / 8) << bytes;
  }
}

TEST(CachingAllocator, FreedBlocksAreReusedPerDeviceAndSizeClassWithoutRawAllocation) {
  auto raw = std::make_shared<CountingMemory>();
  {
    CachingAllocator allocator(raw);
    const MemoryCase device0{MemoryKind::kDevice, 0}, device1{MemoryKind::kDevice, 1};
    void* a = allocator.Allocate(device0, 1000, 64).value();
    void* b = allocator.Allocate(device0, 1000, 64).value();
    EXPECT_NE(a, b);
    EXPECT_EQ(raw->allocations.load(), 2);
    allocator.Free(device0, a);
    EXPECT_EQ(allocator.stats().bytes_cached, 1024);
    // Same class (1000 and 700 round to 1024) on the same device: the cached block, no raw call.
    EXPECT_EQ(allocator.Allocate(device0, 700, 64).value(), a);
    EXPECT_EQ(raw->allocations.load(), 2);
    EXPECT_EQ(allocator.stats().cache_hits, 1);
    // Another device never gets device 0's block.
    allocator.Free(device0, b);
    void* c = allocator.Allocate(device1, 1000, 64).value();
    EXPECT_NE(c, b);
    EXPECT_EQ(raw->allocations.load(), 3);
    EXPECT_FALSE(allocator.Allocate(device0, 8, 4096).ok()) << "alignment above 256 must be refused";
    allocator.Free(device0, a);
    allocator.Free(device1, c);
    EXPECT_EQ(allocator.stats().bytes_in_use, 0);
    allocator.ReleaseCached();
    EXPECT_EQ(raw->frees.load(), 3);
    EXPECT_EQ(allocator.stats().bytes_cached, 0);
  }
  EXPECT_EQ(raw->frees.load(), raw->allocations.load());
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  auto raw = std::make_shared<CountingMemory>();
  CachingAllocator allocator(raw);
  const MemoryCase device0{MemoryKind::kDevice, 0};
  allocator.Free(device0, allocator.Allocate(device0, 4096, 64).value());
  raw->fail_next = true;
  auto block = allocator.Allocate(device0, 100000, 64);  // another class: raw fails, cache released, retried
  ASSERT_TRUE(block.ok()) << block.status().ToString();
  EXPECT_EQ(raw->frees.load(), 1);
  allocator.Free(device0, block.value());
  // Both tries fail: the error names the size and the memory case.
  class AlwaysFull : public CountingMemory {
   public:
    StatusOr<void*> Allocate(int, size_t) override { return Internal("test memory is full"); }
  };
  CachingAllocator full(std::make_shared<AlwaysFull>());
  auto failed = full.Allocate(MemoryCase{MemoryKind::kDevice, 2}, 123, 64);
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(Contains(failed.status().message(), "123 bytes of device:2 memory")) << failed.status().message();
  EXPECT_TRUE(Contains(failed.status().message(), "test memory is full")) << failed.status().message();
}

TEST(DeviceRegistry, UnknownTypeNamesWhatIsRegistered) {
  DeviceRegistry registry;
  registry.Register("test_device", std::make_shared<HostTestBackend>("test_device", 1));
  auto missing = registry.Find("cuda");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Contains(missing.status().message(), "registered: test_device")) << missing.status().message();
  // The global registry has "cuda" exactly when the build has CUDA.
  EXPECT_EQ(DeviceRegistry::Global().Find("cuda").ok(), BuiltWithCuda());
  EXPECT_EQ(AllocatorRegistry::Global().Find(MemoryCase{MemoryKind::kDevice, 0}).ok(), BuiltWithCuda());
}

TEST(HostTestDevice, StreamsRunInOrderAndCompleteOnTheirOwnThread) {
  HostTestBackend backend("test_device", 2);
  std::string why;
  EXPECT_EQ(backend.device_count(&why), 2);
  auto bad = backend.ComputeStream(2);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), "test_device device 2 does not exist: 2 device(s)"));
  HostTestStream* stream = backend.compute(0);
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) stream->Enqueue([&order, i] { order.push_back(i); return Status::Ok(); });
  stream->Enqueue([] { return Internal("kernel fault"); });
  stream->Enqueue([] { return Internal("second fault"); });
  std::atomic<bool> on_stream{false};
  Status first = stream->Synchronize();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(Contains(first.message(), "test_device:0/compute: kernel fault")) << first.message();
  // Errors are reported once: the next completion is clean.
  ASSERT_TRUE(stream->OnComplete([&](Status s) { on_stream = stream->on_stream_thread() && s.ok(); }).ok());
  EXPECT_TRUE(stream->Synchronize().ok());
  EXPECT_TRUE(on_stream.load());
}

TEST(StreamKernel, SynchronousCallWaitsForTheStreamAndReportsItsError) {
  HostTestBackend backend("test_device", 1);
  HostTestStream* stream = backend.compute(0);
  stream->set_delay(std::chrono::milliseconds(20));
  std::atomic<int> ran{0};
  KernelFn kernel = StreamKernel(stream, [&](KernelContext&) {
    stream->Enqueue([&] { ++ran; return Status::Ok(); });
    return Status::Ok();
  });
  std::vector<TensorView> none;
  KernelContext context{&none, &none, 0};
  ASSERT_TRUE(kernel(context).ok());
  EXPECT_EQ(ran.load(), 1) << "a synchronous call returned before its device work ran";
  KernelFn failing = StreamKernel(stream, [&](KernelContext&) {
    stream->Enqueue([] { return Internal("illegal address"); });
    return Status::Ok();
  });
  Status failed = failing(context);
  EXPECT_TRUE(Contains(failed.message(), "illegal address")) << failed.message();
}

// pinned source x -> h2d (device 0 copy stream) -> scale (device 0 compute stream) -> d2h -> sink.
constexpr int64_t kN = 1000;
void AddBlob(plan::RegisterDesc* reg) {
  plan::BlobDesc* b = reg->add_blobs();
  b->add_shape(kN);
  b->set_dtype(plan::DT_FLOAT32);
  b->set_byte_size(kN * 4);
}
plan::Task* AddTask(plan::Plan& plan, const std::string& name, plan::TaskKind kind, plan::MemoryKind memory,
                    bool on_device) {
  plan::Task* t = plan.add_tasks();
  t->set_id(plan.tasks_size() - 1);
  t->set_name(name);
  t->set_kind(kind);
  t->set_device_type(on_device ? "gpu" : "cpu");
  if (kind == plan::COMPUTE) {
    t->set_op_type(name);
    t->set_asynchronous(on_device);
  }
  if (t->id() > 0) t->add_inputs()->set_producer_task_id(t->id() - 1);
  if (kind != plan::SINK) {
    plan::RegisterDesc* r = t->add_registers();
    r->set_name(name + "/out");
    r->set_register_num(2);
    r->mutable_memory_case()->set_kind(memory);
    AddBlob(r);
    if (kind != plan::SINK) r->add_consumer_task_ids(t->id() + 1);
  }
  return t;
}
plan::Plan DevicePlan() {
  plan::Plan plan;
  plan.set_job_name("device");
  AddTask(plan, "x", plan::SOURCE, plan::MEMORY_PINNED_HOST, false);
  AddTask(plan, "h2d", plan::COMPUTE, plan::MEMORY_DEVICE, true);
  AddTask(plan, "scale", plan::COMPUTE, plan::MEMORY_DEVICE, true);
  AddTask(plan, "d2h", plan::COMPUTE, plan::MEMORY_PINNED_HOST, true);
  AddTask(plan, "out", plan::SINK, plan::MEMORY_HOST, false);
  return plan;
}

struct DeviceFixture {
  std::shared_ptr<HostTestBackend> backend = std::make_shared<HostTestBackend>("test_device", 1);
  std::shared_ptr<CountingMemory> raw = std::make_shared<CountingMemory>();
  std::shared_ptr<CachingAllocator> device_memory = std::make_shared<CachingAllocator>(raw);
  AllocatorRegistry allocators;
  std::atomic<int> scale_on_stream{0}, scale_elsewhere{0};
  std::atomic<bool> fail_iteration_3{false};
  DeviceFixture() {
    allocators.Register(MemoryKind::kHost, std::make_shared<HostAllocator>());
    allocators.Register(MemoryKind::kPinnedHost, std::make_shared<HostAllocator>());
    allocators.Register(MemoryKind::kDevice, device_memory);
  }
  RuntimeHooks Hooks() {
    RuntimeHooks hooks;
    hooks.make_kernel = [this](const plan::Task& task) -> StatusOr<KernelFn> {
      HostTestStream* compute = backend->compute(0);
      if (task.op_type() == "h2d") return DeviceCopyKernel(backend->copy(0), CopyDirection::kHostToDevice, kN * 4);
      if (task.op_type() == "d2h") return DeviceCopyKernel(backend->copy(0), CopyDirection::kDeviceToHost, kN * 4);
      return StreamKernel(compute, [this, compute](KernelContext& c) -> Status {
        const float* in = c.input(0).as<float>();
        float* out = c.output(0).as<float>();
        const int64_t iteration = c.iteration;
        compute->Enqueue([=, this] {
          (compute->on_stream_thread() ? scale_on_stream : scale_elsewhere)++;
          if (iteration == 3 && fail_iteration_3) return Internal("device fault in scale");
          for (int64_t i = 0; i < kN; ++i) out[i] = 3 * in[i] + 1;
          return Status::Ok();
        });
        return Status::Ok();
      });
    };
    return hooks;
  }
  RuntimeOptions Options() {
    RuntimeOptions options;
    options.allocators = &allocators;
    options.num_workers = 2;
    options.shutdown_timeout = std::chrono::milliseconds(20000);
    return options;
  }
};

TEST(DeviceRuntime, CopiesAndDeviceComputeCompleteAsynchronouslyInIterationOrder) {
  FinishesWithin(std::chrono::seconds(60), "device plan", [] {
    DeviceFixture fixture;
    fixture.backend->compute(0)->set_delay(std::chrono::microseconds(300));
    fixture.fail_iteration_3 = true;
    auto runtime = Runtime::Create(DevicePlan(), fixture.Hooks(), fixture.Options());
    ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
    // Registers of h2d and scale are device memory (2 + 2 of one class), from the cache's raw memory.
    EXPECT_EQ(fixture.raw->allocations.load(), 4);
    constexpr int kIterations = 8;
    std::vector<std::vector<float>> inputs(kIterations, std::vector<float>(kN)), outputs = inputs;
    std::vector<Status> statuses(kIterations);
    std::vector<int64_t> order;
    std::mutex mu;
    for (int k = 0; k < kIterations; ++k) {
      for (int64_t i = 0; i < kN; ++i) inputs[k][i] = static_cast<float>(k * 1000 + i);
      TensorView in{inputs[k].data(), TensorDesc{{kN}, DType::kFloat32}}, out{outputs[k].data(), in.desc};
      auto pushed = runtime.value()->Push({in}, {out}, [&, k](int64_t iteration, const Status& status) {
        std::lock_guard<std::mutex> lock(mu);
        statuses[k] = status;
        order.push_back(iteration);
      });
      ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
    }
    runtime.value()->Drain();
    std::vector<int64_t> expected_order;
    for (int k = 0; k < kIterations; ++k) expected_order.push_back(k);
    EXPECT_EQ(order, expected_order);
    for (int k = 0; k < kIterations; ++k) {
      if (k == 3) {
        EXPECT_TRUE(Contains(statuses[k].message(), "device fault in scale")) << statuses[k].ToString();
        EXPECT_TRUE(Contains(statuses[k].message(), "test_device:0/compute")) << statuses[k].ToString();
        continue;
      }
      ASSERT_TRUE(statuses[k].ok()) << k << ": " << statuses[k].ToString();
      for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(outputs[k][i], 3 * inputs[k][i] + 1) << k << " " << i;
    }
    EXPECT_EQ(fixture.scale_on_stream.load(), kIterations);
    EXPECT_EQ(fixture.scale_elsewhere.load(), 0);
    ASSERT_TRUE(runtime.value()->Shutdown().ok());
    runtime.value().reset();
    // The registers return to the cache when the last handle on them goes: the stream thread
    // drops its last completion's closure just after running it, which may be after Shutdown
    // returned (1 run in ~40 checked too early). Bounded wait.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (fixture.device_memory->stats().bytes_in_use != 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // A second runtime of the plan reuses the cached device blocks: no raw allocation.
    EXPECT_EQ(fixture.device_memory->stats().bytes_in_use, 0);
    auto again = Runtime::Create(DevicePlan(), fixture.Hooks(), fixture.Options());
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(fixture.raw->allocations.load(), 4);
    EXPECT_EQ(fixture.device_memory->stats().cache_hits, 4);
    std::vector<float> in(kN, 2.0f), out(kN, 0.0f);
    TensorView vin{in.data(), TensorDesc{{kN}, DType::kFloat32}}, vout{out.data(), vin.desc};
    ASSERT_TRUE(again.value()->Run({vin}, {vout}).ok());
    EXPECT_EQ(out[kN - 1], 7.0f);
  });
}

// A source whose register is device memory and a sink reading device memory: the runtime copies
// through the device allocator (host_accessible is false), never by memcpy on the CPU side.
class RecordingMemory : public HostTestMemory {
 public:
  Status Copy(void* dst, const MemoryCase& dst_case, const void* src, const MemoryCase& src_case,
              size_t bytes) override {
    copies.push_back(src_case.ToString() + "->" + dst_case.ToString());
    return HostTestMemory::Copy(dst, dst_case, src, src_case, bytes);
  }
  std::vector<std::string> copies;
};

TEST(DeviceRuntime, SourcesAndSinksCopyDeviceRegistersThroughTheAllocator) {
  FinishesWithin(std::chrono::seconds(60), "device source and sink", [] {
    plan::Plan plan;
    plan.set_job_name("device-source");
    AddTask(plan, "x", plan::SOURCE, plan::MEMORY_DEVICE, true);
    AddTask(plan, "out", plan::SINK, plan::MEMORY_HOST, false);
    auto raw = std::make_shared<RecordingMemory>();
    AllocatorRegistry allocators;
    allocators.Register(MemoryKind::kHost, std::make_shared<HostAllocator>());
    allocators.Register(MemoryKind::kDevice, std::make_shared<CachingAllocator>(raw));
    RuntimeOptions options;
    options.allocators = &allocators;
    auto runtime = Runtime::Create(plan, RuntimeHooks{}, options);
    ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
    std::vector<float> in(kN, 5.0f), out(kN, 0.0f);
    TensorView vin{in.data(), TensorDesc{{kN}, DType::kFloat32}}, vout{out.data(), vin.desc};
    ASSERT_TRUE(runtime.value()->Run({vin}, {vout}).ok());
    EXPECT_EQ(out[0], 5.0f);
    EXPECT_EQ(raw->copies, (std::vector<std::string>{"host->device:0", "device:0->host"}));
  });
}

}  // namespace
}  // namespace actorflow

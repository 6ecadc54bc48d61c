// Registers' memory cases and the allocator interface (actors/memory.h): allocation once at
// instantiation through the registry, copies only through CopyBytes, clear rejection of a
// memory case nobody can allocate.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "actors/memory.h"
#include "actors/runtime.h"
#include "actors/runtime_testing.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace {

const TensorDesc kVector{{4}, DType::kFloat32};

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void AddBlob(plan::RegisterDesc* reg, int64_t n) {
  plan::BlobDesc* b = reg->add_blobs();
  b->add_shape(n);
  b->set_dtype(plan::DT_FLOAT32);
}

// x (source, in `source_memory`) -> double (compute, host) -> main sink; x -> named sink "watch".
plan::Plan SourceComputeSinks(plan::MemoryKind source_memory, int device_id = 0) {
  plan::Plan plan;
  plan.set_job_name("memory");
  plan::Task* x = plan.add_tasks();
  x->set_id(0);
  x->set_name("x");
  x->set_kind(plan::SOURCE);
  plan::RegisterDesc* xr = x->add_registers();
  xr->set_name("x/out");
  xr->set_register_num(2);
  xr->mutable_memory_case()->set_kind(source_memory);
  xr->mutable_memory_case()->set_device_id(device_id);
  AddBlob(xr, 4);
  plan::Task* d = plan.add_tasks();
  d->set_id(1);
  d->set_name("double");
  d->set_kind(plan::COMPUTE);
  d->set_op_type("double");
  d->add_inputs()->set_producer_task_id(0);
  plan::RegisterDesc* dr = d->add_registers();
  dr->set_name("double/out");
  dr->set_register_num(3);
  AddBlob(dr, 4);
  plan::Task* out = plan.add_tasks();
  out->set_id(2);
  out->set_name("out");
  out->set_kind(plan::SINK);
  out->add_inputs()->set_producer_task_id(1);
  plan::Task* watch = plan.add_tasks();
  watch->set_id(3);
  watch->set_name("watch-x");
  watch->set_kind(plan::SINK);
  watch->set_sink_name("watch");
  watch->add_inputs()->set_producer_task_id(0);
  return plan;
}

Status Double(KernelContext& c) {
  for (int i = 0; i < 4; ++i) c.output(0).as<float>()[i] = 2 * c.input(0).as<float>()[i];
  return Status::Ok();
}

RuntimeHooks Hooks(std::function<Status(const std::string&, int64_t, const std::vector<TensorView>&)> watch = nullptr) {
  RuntimeHooks hooks;
  hooks.make_kernel = [](const plan::Task&) -> StatusOr<KernelFn> { return KernelFn(Double); };
  hooks.sink_handler = watch ? watch : [](const std::string&, int64_t, const std::vector<TensorView>&) {
    return Status::Ok();
  };
  return hooks;
}

TEST(Memory, MemoryCaseWithoutAllocatorIsRejectedNamingTaskAndCase) {
  // Host memory only (the global registry of a CUDA build also has device and pinned memory).
  AllocatorRegistry host_only;
  host_only.Register(MemoryKind::kHost, std::make_shared<HostAllocator>());
  RuntimeOptions options;
  options.allocators = &host_only;
  for (auto [kind, name] : {std::pair{plan::MEMORY_DEVICE, "device:3"}, std::pair{plan::MEMORY_PINNED_HOST, "pinned_host"}}) {
    auto runtime = Runtime::Create(SourceComputeSinks(kind, 3), Hooks(), options);
    ASSERT_FALSE(runtime.ok()) << name;
    const std::string& message = runtime.status().message();
    EXPECT_EQ(runtime.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(message, "task 'x'")) << message;
    EXPECT_TRUE(Contains(message, name)) << message;
    EXPECT_TRUE(Contains(message, "no allocator is registered")) << message;
  }
}

// Host memory that counts what the runtime asks of it.
class CountingHostAllocator : public HostAllocator {
 public:
  StatusOr<void*> Allocate(const MemoryCase& memory_case, size_t bytes, size_t alignment) override {
    auto block = HostAllocator::Allocate(memory_case, bytes, alignment);
    std::lock_guard<std::mutex> lock(mu);
    if (block.ok()) {
      blocks.insert(block.value());
      misaligned += reinterpret_cast<uintptr_t>(block.value()) % 64 != 0;
      ++allocations;
    }
    return block;
  }
  void Free(const MemoryCase& memory_case, void* block) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(blocks.erase(block), 1u) << "freed a block it did not allocate";
    }
    HostAllocator::Free(memory_case, block);
  }
  std::mutex mu;
  std::set<void*> blocks;
  int allocations = 0, misaligned = 0;
};

TEST(Memory, RegistersComeFromTheRegistryOnceAtInstantiation) {
  auto host = std::make_shared<CountingHostAllocator>();
  AllocatorRegistry registry;
  registry.Register(MemoryKind::kHost, host);
  RuntimeOptions options;
  options.allocators = &registry;
  auto runtime = Runtime::Create(SourceComputeSinks(plan::MEMORY_HOST), Hooks(), options);
  ASSERT_TRUE(runtime.ok()) << runtime.status().message();
  EXPECT_EQ(host->allocations, 2 + 3) << "one block per register: x has 2, double has 3";
  EXPECT_EQ(host->misaligned, 0);
  for (int i = 0; i < 50; ++i) {
    float in[4] = {1, 2, 3, static_cast<float>(i)}, out[4] = {};
    ASSERT_TRUE(runtime.value()->Run({TensorView{in, kVector}}, {TensorView{out, kVector}}).ok());
    EXPECT_EQ(out[3], 2.0f * i);
  }
  EXPECT_EQ(host->allocations, 5) << "an iteration allocated registers";
  EXPECT_TRUE(runtime.value()->Shutdown().ok());
  runtime.value().reset();
  EXPECT_TRUE(host->blocks.empty()) << host->blocks.size() << " register blocks were not freed";
}

// "Device" memory that is host memory underneath but that the CPU must not touch directly:
// every crossing has to go through its Copy.
class FakeDeviceAllocator : public RegisterAllocator {
 public:
  StatusOr<void*> Allocate(const MemoryCase& memory_case, size_t bytes, size_t alignment) override {
    EXPECT_EQ(memory_case.kind, MemoryKind::kDevice);
    EXPECT_EQ(memory_case.device_id, 1);
    return host_.Allocate(memory_case, bytes, alignment);
  }
  void Free(const MemoryCase& memory_case, void* block) override { host_.Free(memory_case, block); }
  bool host_accessible() const override { return false; }
  Status Zero(const MemoryCase&, void* block, size_t bytes) override {
    std::memset(block, 0, bytes);
    return Status::Ok();
  }
  Status Copy(void* dst, const MemoryCase& dst_case, const void* src, const MemoryCase& src_case, size_t bytes) override {
    if (dst_case.kind == MemoryKind::kDevice && src_case.kind == MemoryKind::kHost)
      to_device++;
    else if (dst_case.kind == MemoryKind::kHost && src_case.kind == MemoryKind::kDevice)
      to_host++;
    else
      return Internal("unexpected copy " + src_case.ToString() + " -> " + dst_case.ToString());
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  std::atomic<int> to_device{0}, to_host{0};

 private:
  HostAllocator host_;
};

TEST(Memory, SourcesAndSinksCopyThroughTheAllocatorWhereMemoryCasesDiffer) {
  auto device = std::make_shared<FakeDeviceAllocator>();
  AllocatorRegistry registry;
  registry.Register(MemoryKind::kHost, std::make_shared<HostAllocator>());
  registry.Register(MemoryKind::kDevice, device);
  RuntimeOptions options;
  options.allocators = &registry;
  std::mutex mu;
  std::vector<float> watched;
  std::set<const void*> watched_pointers;
  auto runtime = Runtime::Create(SourceComputeSinks(plan::MEMORY_DEVICE, 1),
                                 Hooks([&](const std::string&, int64_t, const std::vector<TensorView>& blobs) {
                                   std::lock_guard<std::mutex> lock(mu);
                                   watched.push_back(blobs[0].as<float>()[3]);
                                   watched_pointers.insert(blobs[0].data);
                                   return Status::Ok();
                                 }),
                                 options);
  ASSERT_TRUE(runtime.ok()) << runtime.status().message();
  constexpr int kN = 20;
  for (int i = 0; i < kN; ++i) {
    float in[4] = {1, 2, 3, static_cast<float>(i)}, out[4] = {};
    ASSERT_TRUE(runtime.value()->Run({TensorView{in, kVector}}, {TensorView{out, kVector}}).ok());
    EXPECT_EQ(out[3], 2.0f * i);
  }
  // Push: the caller's host buffer into the device register, once per iteration. The main sink
  // reads the host register of "double" (a memcpy, not the device's copy); the watch of x
  // stages the device register into host memory before calling its handler.
  EXPECT_EQ(device->to_device.load(), kN);
  EXPECT_EQ(device->to_host.load(), kN);
  ASSERT_EQ(watched.size(), static_cast<size_t>(kN));
  for (int i = 0; i < kN; ++i) EXPECT_EQ(watched[i], static_cast<float>(i));
  EXPECT_EQ(watched_pointers.size(), 1u) << "the watch must see one host staging buffer, not the registers";
}

TEST(Memory, CopyBytesBetweenHostPlacesIsAMemcpyAndElsewhereAsksTheAllocator) {
  float a[4] = {1, 2, 3, 4}, b[4] = {};
  ASSERT_TRUE(CopyBytes(b, HostPlace(), a, HostPlace(), sizeof(a)).ok());
  EXPECT_EQ(b[3], 4.0f);
  FakeDeviceAllocator device;
  MemoryPlace on_device{MemoryCase{MemoryKind::kDevice, 1}, &device};
  float c[4] = {};
  ASSERT_TRUE(CopyBytes(c, on_device, a, HostPlace(), sizeof(a)).ok());
  ASSERT_TRUE(CopyBytes(b, HostPlace(), c, on_device, sizeof(a)).ok());
  EXPECT_EQ(device.to_device.load(), 1);
  EXPECT_EQ(device.to_host.load(), 1);
  // An allocator without a copy says so, naming both ends.
  class NoCopy : public HostAllocator {
    bool host_accessible() const override { return false; }
  } no_copy;
  Status s = CopyBytes(b, HostPlace(), c, MemoryPlace{MemoryCase{MemoryKind::kDevice, 2}, &no_copy}, sizeof(a));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(s.message(), "device:2 to host")) << s.message();
  EXPECT_EQ((MemoryCase{MemoryKind::kPinnedHost, 0}).ToString(), "pinned_host");
}

// Small blocks of plain host memory share slabs (RegisterMemory): each block is still aligned,
// zeroed and its own; under AddressSanitizer each keeps its own allocation.
TEST(Memory, SmallHostBlocksAreCarvedFromSlabsAlignedZeroedAndDisjoint) {
  auto host = std::make_shared<HostAllocator>();
  std::vector<std::pair<unsigned char*, size_t>> blocks;
  {
    RegisterMemory memory;
    for (int i = 0; i < 1000; ++i) {
      const size_t bytes = 1 + static_cast<size_t>(i * 37 % 300);
      auto block = memory.Allocate(host, MemoryCase{}, bytes, 64);
      ASSERT_TRUE(block.ok()) << block.status().message();
      auto* data = static_cast<unsigned char*>(block.value());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 64, 0u) << "block " << i;
      for (size_t b = 0; b < bytes; ++b) ASSERT_EQ(data[b], 0) << "block " << i << " byte " << b;
      std::memset(data, i % 251 + 1, bytes);  // what a neighbour overlapping it would overwrite
      blocks.emplace_back(data, bytes);
    }
    for (size_t i = 0; i < blocks.size(); ++i)
      for (size_t b = 0; b < blocks[i].second; ++b)
        ASSERT_EQ(blocks[i].first[b], i % 251 + 1) << "block " << i << " overlaps another at byte " << b;
#if defined(__SANITIZE_ADDRESS__)
    EXPECT_EQ(memory.num_blocks(), blocks.size());
#else
    EXPECT_LT(memory.num_blocks(), blocks.size() / 50) << "small host blocks were not carved from slabs";
#endif
  }
}

}  // namespace
}  // namespace actorflow

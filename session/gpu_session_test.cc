// A GPU job end to end on the CPU machine: the process's "cuda" device is replaced by the host
// test device (actors/host_test_device.h: device memory the runtime must copy through, streams
// that are worker threads) and two test ops get "cuda" kernels that run on its streams. The
// session compiles with gpu_device_num(1), binds the variable on the device, builds the kernels
// on the device's streams, runs the asynchronous acts, and keeps the host value of the variable
// current for GetVariable / SetVariable. What this cannot cover (real CUDA kernels, cudaMalloc,
// events) runs in kernels_cuda_test and tests/python/test_gpu.py on a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "actors/host_test_device.h"
#include "actors/runtime_testing.h"
#include "kernels/op_registry.h"
#include "session/session.h"

namespace actorflow {
namespace {

constexpr int64_t kN = 6;
std::atomic<int> device_acts{0}, off_stream_acts{0}, copy_stream_factories{0};

// out = x * w, and var -= 0.5 * grad (in place): a CPU kernel and a "cuda" one on the test
// device's stream (the work runs on the stream's thread; the act completes from OnComplete).
void RegisterTestOps() {
  static const bool registered = [] {
    RegisterAllOps();
    auto cuda_kernel = [](bool update) {
      return [update](const KernelInit& init) -> StatusOr<KernelFn> {
        if (init.device_type != kCudaDevice || init.device_stream == nullptr)
          return InvalidArgument("test op on cuda without a device stream");
        if (init.device_stream->name().find("/copy") != std::string::npos) ++copy_stream_factories;
        auto* stream = static_cast<HostTestStream*>(init.device_stream->native_handle());
        return StreamKernel(init.device_stream, [stream, update](KernelContext& c) -> Status {
          float* a = c.input(0).as<float>();
          const float* b = c.input(1).as<float>();
          float* out = update ? nullptr : c.output(0).as<float>();
          stream->Enqueue([=] {
            (stream->on_stream_thread() ? device_acts : off_stream_acts)++;
            for (int64_t i = 0; i < kN; ++i) {
              if (update) a[i] -= 0.5f * b[i];
              else out[i] = a[i] * b[i];
            }
            return Status::Ok();
          });
          return Status::Ok();
        });
      };
    };
    OpDef affine;
    affine.type = "test_device_mul";
    affine.input_names = {"x", "w"};
    affine.output_names = {"out"};
    affine.infer = [](InferContext& ctx) {
      ctx.outputs = {ctx.inputs[0]};
      return Status::Ok();
    };
    affine.kernel_factories[kCpuDevice] = [](const KernelInit&) -> StatusOr<KernelFn> {
      return Unimplemented("test_device_mul runs on the test GPU only");
    };
    affine.kernel_factories[kCudaDevice] = cuda_kernel(false);
    OpRegistry::Global().Register(affine);
    OpDef update;
    update.type = "test_device_update";
    update.input_names = {"var", "grad"};
    update.mutable_inputs = {0};
    update.infer = [](InferContext& ctx) {
      ctx.outputs.clear();
      return Status::Ok();
    };
    update.kernel_factories[kCpuDevice] = affine.kernel_factories[kCpuDevice];
    update.kernel_factories[kCudaDevice] = cuda_kernel(true);
    OpRegistry::Global().Register(update);
    return true;
  }();
  (void)registered;
}

// Swaps the process's "cuda" device and its device / pinned allocators for the host test
// device's while a test runs.
class WithTestGpu {
 public:
  WithTestGpu()
      : device_(DeviceRegistry::Global().Find(kCudaDevice)),
        device_memory_(AllocatorRegistry::Global().Find(MemoryCase{MemoryKind::kDevice, 0})),
        pinned_(AllocatorRegistry::Global().Find(MemoryCase{MemoryKind::kPinnedHost, 0})) {
    DeviceRegistry::Global().Register(kCudaDevice, backend);
    AllocatorRegistry::Global().Register(MemoryKind::kDevice, memory);
    AllocatorRegistry::Global().Register(MemoryKind::kPinnedHost, std::make_shared<HostAllocator>());
  }
  ~WithTestGpu() {
    DeviceRegistry::Global().Register(kCudaDevice, device_.ok() ? device_.value() : nullptr);
    AllocatorRegistry::Global().Register(MemoryKind::kDevice, device_memory_.ok() ? device_memory_.value() : nullptr);
    AllocatorRegistry::Global().Register(MemoryKind::kPinnedHost, pinned_.ok() ? pinned_.value() : nullptr);
  }
  std::shared_ptr<HostTestBackend> backend = std::make_shared<HostTestBackend>("test_gpu", 1);
  std::shared_ptr<CachingAllocator> memory = std::make_shared<CachingAllocator>(std::make_shared<HostTestMemory>());

 private:
  StatusOr<std::shared_ptr<DeviceBackend>> device_;
  StatusOr<std::shared_ptr<RegisterAllocator>> device_memory_, pinned_;
};

TEST(GpuSession, VariableLivesOnTheDeviceAndTheHostValueStaysCurrent) {
  testing_support::FinishesWithin(std::chrono::seconds(60), "gpu session", [] {
    RegisterTestOps();
    WithTestGpu gpu;
    gpu.backend->compute(0)->set_delay(std::chrono::microseconds(200));  // device work outlasts the launch
    auto builder = graph::JobBuilder::Create("gpu_job", "predict");
    ASSERT_TRUE(builder.ok()) << builder.status().ToString();
    graph::JobBuilder& b = builder.value();
    ASSERT_TRUE(b.SetDeviceNum(0, 1).ok());
    const std::string x = b.AddInput("x", {kN}, DType::kFloat32, "t.py:1").value();
    const std::string w = b.AddVariable("w", {kN}, DType::kFloat32, "t.py:2").value();
    auto y = b.AddOp("test_device_mul", "y", {x, w}, {}, "t.py:3");
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    const std::string y_ref = y.value()->output_ref(0);
    ASSERT_TRUE(b.AddOp("test_device_update", "update", {w, y_ref}, {}, "t.py:4").ok());
    ASSERT_TRUE(b.SetOutputs({y_ref}).ok());

    Session session;
    std::vector<float> ones(kN, 3.0f);
    ASSERT_TRUE(session.CreateVariable("w", {{kN}, DType::kFloat32}, ones.data()).ok());
    auto job = session.Compile(b, JobOptions{});
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    std::vector<float> xs(kN), out(kN), w_host(kN, 3.0f);
    for (int64_t i = 0; i < kN; ++i) xs[i] = static_cast<float>(i + 1);
    std::vector<TensorView> inputs = {{xs.data(), {{kN}, DType::kFloat32}}}, outputs = {{out.data(), {{kN}, DType::kFloat32}}};
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(job.value()->Run(inputs, outputs).ok());
      for (int64_t i = 0; i < kN; ++i) {
        const float want = xs[i] * w_host[i];
        ASSERT_EQ(out[i], want) << "step " << step << " element " << i;
        w_host[i] -= 0.5f * want;
      }
      std::vector<float> w_read(kN);
      ASSERT_TRUE(session.GetVariable("w", w_read.data(), w_read.size() * sizeof(float)).ok());
      EXPECT_EQ(w_read, w_host) << "GetVariable reads the device value after step " << step;
    }
    // SetVariable writes through to the device buffer the job reads.
    std::vector<float> reset(kN, 1.0f);
    ASSERT_TRUE(session.SetVariable("w", {{kN}, DType::kFloat32}, reset.data()).ok());
    ASSERT_TRUE(job.value()->Run(inputs, outputs).ok());
    EXPECT_EQ(out, xs);
    EXPECT_EQ(device_acts.load(), 8) << "4 steps x (mul + update), each on the stream's thread";
    EXPECT_EQ(off_stream_acts.load(), 0);
    EXPECT_EQ(copy_stream_factories.load(), 0) << "compute ops get the compute stream";
    EXPECT_GT(gpu.backend->copy(0)->items_run(), 0) << "x copied in and y out on the copy stream";
    // The variable's device buffer and the job's registers came from the device allocator.
    EXPECT_GT(gpu.memory->stats().bytes_in_use, 0);
    job.value()->Shutdown();
  });
}

// A GPU op between two GPU ops (and the GPU variable) ends its act at enqueue: the compiler marks
// it stream-ordered, the runtime asks the stream for no completion for it, and the results stay
// exact while the device work lags the launches.
TEST(GpuSession, AnOpBetweenGpuOpsEndsItsActAtEnqueueAndResultsStayExact) {
  testing_support::FinishesWithin(std::chrono::seconds(60), "gpu session", [] {
    RegisterTestOps();
    WithTestGpu gpu;
    gpu.backend->compute(0)->set_delay(std::chrono::microseconds(300));
    auto builder = graph::JobBuilder::Create("gpu_chain", "predict");
    ASSERT_TRUE(builder.ok()) << builder.status().ToString();
    graph::JobBuilder& b = builder.value();
    ASSERT_TRUE(b.SetDeviceNum(0, 1).ok());
    const std::string x = b.AddInput("x", {kN}, DType::kFloat32, "t.py:1").value();
    const std::string w = b.AddVariable("w", {kN}, DType::kFloat32, "t.py:2").value();
    std::string y = x;
    for (const char* name : {"y1", "y2", "y3"}) y = b.AddOp("test_device_mul", name, {y, w}, {}, "t.py:3").value()->output_ref(0);
    ASSERT_TRUE(b.AddOp("test_device_update", "update", {w, y}, {}, "t.py:4").ok());
    ASSERT_TRUE(b.SetOutputs({y}).ok());

    Session session;
    std::vector<float> w_host = {1.0f, 0.5f, -1.0f, 2.0f, 0.25f, 1.5f};
    ASSERT_TRUE(session.CreateVariable("w", {{kN}, DType::kFloat32}, w_host.data()).ok());
    auto job = session.Compile(b, JobOptions{});
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    std::map<std::string, bool> ordered;
    for (const plan::Task& t : job.value()->plan().tasks()) ordered[t.name()] = t.stream_ordered();
    EXPECT_TRUE(ordered.at("y2")) << "reads y1 and the GPU variable, read only by y3";
    EXPECT_FALSE(ordered.at("y1")) << "reads x from the copy stream";
    EXPECT_FALSE(ordered.at("y3")) << "copied out to the host";
    EXPECT_FALSE(ordered.at("update")) << "writes the variable the host reads between calls";
    const int64_t items_before = gpu.backend->compute(0)->items_run();
    std::vector<float> xs = {1, 2, 3, 4, 5, 6}, out(kN);
    std::vector<TensorView> inputs = {{xs.data(), {{kN}, DType::kFloat32}}}, outputs = {{out.data(), {{kN}, DType::kFloat32}}};
    constexpr int kSteps = 5;
    for (int step = 0; step < kSteps; ++step) {
      ASSERT_TRUE(job.value()->Run(inputs, outputs).ok());
      for (int64_t i = 0; i < kN; ++i) {
        const float want = xs[i] * w_host[i] * w_host[i] * w_host[i];
        ASSERT_EQ(out[i], want) << "step " << step << " element " << i;
        w_host[i] -= 0.5f * want;
      }
    }
    std::vector<float> w_read(kN);
    ASSERT_TRUE(session.GetVariable("w", w_read.data(), w_read.size() * sizeof(float)).ok());
    EXPECT_EQ(w_read, w_host);
    // Per step on the compute stream: 4 kernels, and completions for y1, y3 and update only (the
    // stream thread counts an item after running it, so wait for the count, then check it stays).
    auto items = [&] { return gpu.backend->compute(0)->items_run() - items_before; };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (items() < kSteps * 7 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(items(), kSteps * 7);
    job.value()->Shutdown();
  });
}

}  // namespace
}  // namespace actorflow

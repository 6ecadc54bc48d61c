// The CUDA add: registered for "cuda", equal to the CPU add on a GPU, a clear error without one.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

#define EXPECT_CUDA_OK(call)                                                              \
  do {                                                                                    \
    cudaError_t _e = (call);                                                              \
    ASSERT_EQ(_e, cudaSuccess) << #call << ": " << cudaGetErrorName(_e) << " " << cudaGetErrorString(_e); \
  } while (0)

TEST(CudaKernelTest, AddIsRegisteredForCuda) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find("add").value();
  EXPECT_TRUE(def->kernel_factories.count(kCpuDevice));
  EXPECT_TRUE(def->kernel_factories.count(kCudaDevice));
  // Without a stream the factory refuses (it never falls back to the default stream).
  TensorDesc d{{4}, DType::kFloat32};
  KernelInit init{{d, d}, {d}, {}, 1, kCudaDevice, 0, nullptr};
  auto kernel = MakeKernel("add", init);
  ASSERT_FALSE(kernel.ok());
  EXPECT_NE(kernel.status().message().find("stream"), std::string::npos) << kernel.status().message();
  // An op with no CUDA kernel names op and device type.
  auto relu = MakeKernel("relu", KernelInit{{d}, {d}, {}, 1, kCudaDevice, 0, nullptr});
  ASSERT_FALSE(relu.ok());
  EXPECT_NE(relu.status().message().find("'relu' has no kernel for device type 'cuda'"), std::string::npos)
      << relu.status().message();
}

// With a device: the CUDA add equals the CPU add. Without one (CI): running the kernel is a clear
// error naming the CUDA call, never a crash or a silent success; ACTORFLOW_REQUIRE_GPU=1 (set on
// GPU machines) makes a missing device a failure instead, so the comparison cannot go unrun there.
TEST(CudaKernelTest, AddMatchesTheCpuKernelOrFailsClearlyWithoutADevice) {
  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    const char* required = std::getenv("ACTORFLOW_REQUIRE_GPU");
    ASSERT_FALSE(required != nullptr && std::string(required) == "1")
        << "ACTORFLOW_REQUIRE_GPU=1 but no CUDA device: "
        << (probe != cudaSuccess ? cudaGetErrorString(probe) : "cudaGetDeviceCount is 0");
    TensorDesc d{{4}, DType::kFloat32};
    // The legacy default stream handle: a valid non-null stream that needs no device to name.
    auto kernel = MakeKernel("add", KernelInit{{d, d}, {d}, {}, 1, kCudaDevice, 0, cudaStreamLegacy});
    ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
    std::vector<TensorView> in = {TensorView{nullptr, d}, TensorView{nullptr, d}}, out = {TensorView{nullptr, d}};
    KernelContext ctx{&in, &out, 0};
    Status ran = kernel.value()(ctx);
    ASSERT_FALSE(ran.ok());
    EXPECT_NE(ran.message().find("add on cuda: cudaSetDevice(0): cudaError"), std::string::npos) << ran.message();
    return;
  }
  const int64_t n = 100003;  // not a multiple of the block size
  TensorDesc d{{n}, DType::kFloat32};
  HostTensor a = F32({n}), b = F32({n}, Ramp(n, 1.1));
  HostTensor want = Run1("add", {a, b});

  cudaStream_t stream = nullptr;
  EXPECT_CUDA_OK(cudaSetDevice(0));
  EXPECT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float *da = nullptr, *db = nullptr, *dout = nullptr;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  EXPECT_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&da), bytes));
  EXPECT_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&db), bytes));
  EXPECT_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dout), bytes));
  EXPECT_CUDA_OK(cudaMemcpyAsync(da, a.bytes.data(), bytes, cudaMemcpyHostToDevice, stream));
  EXPECT_CUDA_OK(cudaMemcpyAsync(db, b.bytes.data(), bytes, cudaMemcpyHostToDevice, stream));

  auto kernel = MakeKernel("add", KernelInit{{d, d}, {d}, {}, 1, kCudaDevice, 0, stream});
  ASSERT_TRUE(kernel.ok()) << kernel.status().ToString();
  std::vector<TensorView> in = {TensorView{da, d}, TensorView{db, d}}, out = {TensorView{dout, d}};
  KernelContext ctx{&in, &out, 0};
  Status ran = kernel.value()(ctx);
  ASSERT_TRUE(ran.ok()) << ran.ToString();
  HostTensor got = HostTensor::Of({n}, DType::kFloat32, {});
  EXPECT_CUDA_OK(cudaMemcpyAsync(got.bytes.data(), dout, bytes, cudaMemcpyDeviceToHost, stream));
  EXPECT_CUDA_OK(cudaStreamSynchronize(stream));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got.at(i), want.at(i)) << "element " << i;
  EXPECT_CUDA_OK(cudaFree(da));
  EXPECT_CUDA_OK(cudaFree(db));
  EXPECT_CUDA_OK(cudaFree(dout));
  EXPECT_CUDA_OK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace actorflow::testing

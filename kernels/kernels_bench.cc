// Microbenchmark of the kernels on the MLP (784-512-10, batch 100) and LeNet shapes:
// microseconds per call and GFLOP/s where FLOPs are well defined.
// Usage: kernels_bench [threads] [text]: only the cases whose label contains `text`.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kernels/op_registry.h"

namespace actorflow {
namespace {

struct Case {
  std::string label, type;
  std::vector<TensorDesc> inputs;
  Attrs attrs;
  double flops = 0;
  bool versioned = false;  // input 1 has a version counter (a predict job's weights)
};

// User + system CPU time of the whole process (the kernel's helper threads included): less
// sensitive to other processes on a busy host than the wall time.
double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

void Run(const Case& c, int threads) {
  auto def = OpRegistry::Global().Find(c.type);
  InferContext ic{c.inputs, c.attrs, {}};
  Status s = def.ok() ? def.value()->infer(ic) : def.status();
  KernelInit init{c.inputs, ic.outputs, c.attrs, threads};
  if (c.versioned) init.SetInputVersion(1, std::make_shared<const std::atomic<int64_t>>(0));
  auto kernel = s.ok() ? def.value()->kernel_factories.at(kCpuDevice)(init) : StatusOr<KernelFn>(s);
  if (!kernel.ok()) {
    std::printf("%-40s error: %s\n", c.label.c_str(), kernel.status().message().c_str());
    return;
  }
  std::vector<std::vector<double>> storage;  // double-sized elements: aligned and large enough
  std::vector<TensorView> in, out;
  for (const TensorDesc& d : c.inputs) {
    storage.emplace_back(d.num_elements() + 1, 0.0);
    // Float inputs 0.01 (a learning rate of 0 could let a GEMM library skip the product);
    // integer inputs (labels) 0.
    if (d.dtype == DType::kFloat32) {
      float* values = reinterpret_cast<float*>(storage.back().data());
      std::fill(values, values + d.num_elements(), 0.01f);
    }
    in.push_back(TensorView{storage.back().data(), d});
  }
  for (const TensorDesc& d : ic.outputs) {
    storage.emplace_back(d.num_elements() + 1, 0.0);
    out.push_back(TensorView{storage.back().data(), d});
  }
  KernelContext ctx{&in, &out, 0};
  for (int i = 0; i < 3; ++i) (void)kernel.value()(ctx);
  int iterations = 0;
  const double cpu_start = ProcessCpuSeconds();
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0, fastest = 1e30;
  while (elapsed < 0.3 || iterations < 5) {
    const auto call = std::chrono::steady_clock::now();
    (void)kernel.value()(ctx);
    const auto end = std::chrono::steady_clock::now();
    fastest = std::min(fastest, std::chrono::duration<double>(end - call).count());
    ++iterations;
    elapsed = std::chrono::duration<double>(end - start).count();
  }
  // The mean, the fastest call (on a shared host it escapes the preemptions) and the process
  // CPU time per call (readable on a busy host).
  double us = elapsed / iterations * 1e6, fastest_us = fastest * 1e6;
  const double cpu_us = (ProcessCpuSeconds() - cpu_start) / iterations * 1e6;
  if (c.flops > 0)
    std::printf("%-44s %10.1f us (fastest %8.1f) %10.1f us CPU %8.1f GFLOP/s (fastest)\n", c.label.c_str(), us,
                fastest_us, cpu_us, c.flops / fastest_us / 1e3);
  else std::printf("%-44s %10.1f us (fastest %8.1f) %10.1f us CPU\n", c.label.c_str(), us, fastest_us, cpu_us);
}

}  // namespace
}  // namespace actorflow

int main(int argc, char** argv) {
  using namespace actorflow;
  RegisterAllOps();
  int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  auto f = [](Shape s) { return TensorDesc{std::move(s), DType::kFloat32}; };
  Attrs same{{"padding", std::string("SAME")}};
  Attrs nhwc{{"padding", std::string("SAME")}, {"data_format", std::string("NHWC")}};
  Attrs nhwc1{{"padding", std::string("VALID")}, {"data_format", std::string("NHWC")}};
  Attrs pool{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}};
  double mm = 2.0 * 100 * 784 * 512, c2 = 2.0 * 100 * 64 * 14 * 14 * 32 * 25;
  std::vector<Case> cases = {
      {"matmul (100,784)x(784,512)", "matmul", {f({100, 784}), f({784, 512})}, {}, mm},
      // The seed MLP train step's two large GEMMs as its plan runs them (weights (units, in)).
      {"step: x W1^T + bias, relu (100,784)x(512,784)^T", "matmul", {f({100, 784}), f({512, 784}), f({512})},
       Attrs{{"transpose_b", true}, {"fuse_bias", true}, {"fuse_relu", true}}, mm},
      {"step: W1 -= lr dh^T x (512,784) from (100,512),(100,784)", "matmul_sgd_update",
       {f({512, 784}), f({100, 512}), f({100, 784}), f({1})}, Attrs{{"transpose_a", true}}, mm},
      {"matmul dW: a^T (784,100)x(100,512)", "matmul", {f({100, 784}), f({100, 512})}, Attrs{{"transpose_a", true}}, mm},
      {"matmul dX: (100,512)x b^T", "matmul", {f({100, 512}), f({784, 512})}, Attrs{{"transpose_b", true}}, mm},
      {"bias_add+relu (100,512)", "bias_add", {f({100, 512}), f({512})}, Attrs{{"fuse_relu", true}}},
      {"matmul dh: (100,10)x(512,10)^T", "matmul", {f({100, 10}), f({512, 10})}, Attrs{{"transpose_b", true}}, 2.0 * 100 * 10 * 512},
      {"  + fuse_relu_grad (matmul_relu_grad)", "matmul", {f({100, 10}), f({512, 10}), f({100, 512})},
       Attrs{{"transpose_b", true}, {"fuse_relu_grad", true}}, 2.0 * 100 * 10 * 512},
      // The seed MLP's output layer with weights stored (units, in) as flow.layers.dense makes
      // them: the kernels' narrow loops (kernels/matmul_narrow.h) and oneDNN (narrow_gemm=false).
      {"logits (100,512)x(10,512)^T + bias, narrow", "matmul", {f({100, 512}), f({10, 512}), f({10})},
       Attrs{{"transpose_b", true}, {"fuse_bias", true}}, 2.0 * 100 * 10 * 512},
      {"  the same, oneDNN", "matmul", {f({100, 512}), f({10, 512}), f({10})},
       Attrs{{"transpose_b", true}, {"fuse_bias", true}, {"narrow_gemm", false}}, 2.0 * 100 * 10 * 512},
      {"dh (100,10)x(10,512) + relu mask, narrow", "matmul", {f({100, 10}), f({10, 512}), f({100, 512})},
       Attrs{{"fuse_relu_grad", true}}, 2.0 * 100 * 10 * 512},
      {"  the same, oneDNN", "matmul", {f({100, 10}), f({10, 512}), f({100, 512})},
       Attrs{{"fuse_relu_grad", true}, {"narrow_gemm", false}}, 2.0 * 100 * 10 * 512},
      {"  + the bias gradient's column sums (fuse_bias_grad)", "matmul", {f({100, 10}), f({10, 512}), f({100, 512})},
       Attrs{{"fuse_relu_grad", true}, {"fuse_bias_grad", true}}, 2.0 * 100 * 10 * 512},
      {"dW2 (100,10)^T(100,512) + SGD, narrow", "matmul_sgd_update", {f({10, 512}), f({100, 10}), f({100, 512}), f({1})},
       Attrs{{"transpose_a", true}}, 2.0 * 100 * 10 * 512},
      {"  the same, oneDNN", "matmul_sgd_update", {f({10, 512}), f({100, 10}), f({100, 512}), f({1})},
       Attrs{{"transpose_a", true}, {"narrow_gemm", false}}, 2.0 * 100 * 10 * 512},
      {"relu_grad (100,512)", "relu_grad", {f({100, 512}), f({100, 512})}, {}},
      {"bias_add_grad_sgd_update (512) dy (100,512)", "bias_add_grad_sgd_update", {f({512}), f({100, 512}), f({1})}, {}},
      {"bias_add_grad (100,512)", "bias_add_grad", {f({100, 512})}, {}},
      {"sparse_softmax_cross_entropy (100,10)", "sparse_softmax_cross_entropy", {TensorDesc{{100}, DType::kInt32}, f({100, 10})}, {}},
      {"sgd_update (784,512)", "sgd_update", {f({784, 512}), f({784, 512}), f({1})}, {}},
      {"adam_update (784,512)", "adam_update", {f({784, 512}), f({784, 512}), f({784, 512}), f({784, 512}), f({1})}, {}},
      {"conv2d (100,1,28,28)*(32,1,5,5)", "conv2d", {f({100, 1, 28, 28}), f({32, 1, 5, 5})}, same, 2.0 * 100 * 32 * 28 * 28 * 25},
      {"conv2d (100,32,14,14)*(64,32,5,5)", "conv2d", {f({100, 32, 14, 14}), f({64, 32, 5, 5})}, same, c2},
      // A predict job's conv: the filter's bytes compared with the last reorder's, or its version.
      {"  the same, versioned filter", "conv2d", {f({100, 32, 14, 14}), f({64, 32, 5, 5})}, same, c2, true},
      {"conv2d batch 1 (1,32,14,14)*(64,32,5,5)", "conv2d", {f({1, 32, 14, 14}), f({64, 32, 5, 5})}, same, c2 / 100},
      {"  the same, versioned filter", "conv2d", {f({1, 32, 14, 14}), f({64, 32, 5, 5})}, same, c2 / 100, true},
      {"conv2d batch 1 (1,1,28,28)*(32,1,5,5)", "conv2d", {f({1, 1, 28, 28}), f({32, 1, 5, 5})}, same, 2.0 * 32 * 28 * 28 * 25},
      {"  the same, versioned filter", "conv2d", {f({1, 1, 28, 28}), f({32, 1, 5, 5})}, same, 2.0 * 32 * 28 * 28 * 25, true},
      // MobileNetV2's 1x1 convolutions on 32x32 inputs at batch 64, channels-last (one GEMM): the
      // filter packed by dnnl_sgemm in every call, or kept packed with a version (PackedGemm).
      {"1x1 NHWC (64,1,1,320)*(1280,320)", "conv2d", {f({64, 1, 1, 320}), f({1280, 320, 1, 1})}, nhwc1, 2.0 * 64 * 320 * 1280},
      {"  the same, versioned filter", "conv2d", {f({64, 1, 1, 320}), f({1280, 320, 1, 1})}, nhwc1, 2.0 * 64 * 320 * 1280, true},
      {"1x1 NHWC (64,4,4,96)*(576,96)", "conv2d", {f({64, 4, 4, 96}), f({576, 96, 1, 1})}, nhwc1, 2.0 * 1024 * 96 * 576},
      {"  the same, versioned filter", "conv2d", {f({64, 4, 4, 96}), f({576, 96, 1, 1})}, nhwc1, 2.0 * 1024 * 96 * 576, true},
      {"conv2d_grad_data (same)", "conv2d_grad_data", {f({100, 64, 14, 14}), f({64, 32, 5, 5}), f({100, 32, 14, 14})}, same, c2},
      {"conv2d_grad_filter (same)", "conv2d_grad_filter", {f({100, 64, 14, 14}), f({100, 32, 14, 14}), f({64, 32, 5, 5})}, same, c2},
      {"conv2d_grad_filter (100,1,28,28)*(32,1,5,5)", "conv2d_grad_filter", {f({100, 32, 28, 28}), f({100, 1, 28, 28}), f({32, 1, 5, 5})},
       same, 2.0 * 100 * 32 * 28 * 28 * 25},
      {"NHWC conv2d (100,28,28,1)*(32,1,5,5)", "conv2d", {f({100, 28, 28, 1}), f({32, 1, 5, 5})}, nhwc, 2.0 * 100 * 32 * 28 * 28 * 25},
      {"NHWC conv2d_grad_filter conv1", "conv2d_grad_filter", {f({100, 28, 28, 32}), f({100, 28, 28, 1}), f({32, 1, 5, 5})}, nhwc,
       2.0 * 100 * 32 * 28 * 28 * 25},
      {"NHWC conv2d (100,14,14,32)*(64,32,5,5)", "conv2d", {f({100, 14, 14, 32}), f({64, 32, 5, 5})}, nhwc, c2},
      {"NHWC conv2d_grad_data", "conv2d_grad_data", {f({100, 14, 14, 64}), f({64, 32, 5, 5}), f({100, 14, 14, 32})}, nhwc, c2},
      {"NHWC conv2d_grad_filter", "conv2d_grad_filter", {f({100, 14, 14, 64}), f({100, 14, 14, 32}), f({64, 32, 5, 5})}, nhwc, c2},
      {"max_pool2d 2x2 (100,32,28,28)", "max_pool2d", {f({100, 32, 28, 28})}, pool},
      {"max_pool2d_grad 2x2 (100,32,28,28)", "max_pool2d_grad", {f({100, 32, 28, 28}), f({100, 32, 14, 14}), f({100, 32, 14, 14})}, pool},
      {"bias_add (100,32,28,28) axis 1", "bias_add", {f({100, 32, 28, 28}), f({32})}, {}},
      {"bias_add_grad (100,32,28,28) axis 1", "bias_add_grad", {f({100, 32, 28, 28})}, {}},
  };
  std::printf("kernels_bench, %d thread(s)\n", threads);
  const std::string only = argc > 2 ? argv[2] : "";
  for (const Case& c : cases)
    if (c.label.find(only) != std::string::npos) Run(c, threads);
  return 0;
}

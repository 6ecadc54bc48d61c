// The pieces of batch-1 MLP inference (784-512-10) timed alone, in one run, so that the
// end-to-end time from Python (bench/bench_mlp.py) can be split and each piece set against the
// machine's limit:
//   - a plain read of the first layer's weights (784x512 floats, 1.6 MB) on one core and split
//     in two halves over the kernels' pool: the bandwidth limit of the GEMV;
//   - the GEMV itself (oneDNN's sgemm on one thread, kernels' Sgemm on two, the matmul kernel
//     with its bias+relu epilogue as the plan runs it), and the second layer (512x10);
//   - the kernels' pool round trip (two trivial chunks) back to back and after the helper slept.
// Usage: latency_bench [rounds] [threads]. Prints the median and 10th percentile of single calls.
#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/op_registry.h"
#include "kernels/parallel_chunks.h"

namespace actorflow {
namespace {

constexpr int64_t kIn = 784, kHidden = 512, kOut = 10;

// Sum of n floats with four AVX-512 accumulators: what streaming the weights once costs.
__attribute__((target("avx512f"))) float ReadAll(const float* p, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i));
    s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
  }
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  for (; i < n; ++i) sum += p[i];
  return sum;
}

struct Stats {
  double median = 0, low = 0;
};

// `rounds` x `calls` calls, each timed alone, every call after `gap_us` of sleep when > 0. The
// median and the 10th percentile of the single calls: on a shared host the low percentile is
// what the code costs when nothing else ran on its cores meanwhile.
Stats Time(const std::function<void()>& fn, int rounds, int calls, int gap_us = 0) {
  for (int i = 0; i < 10; ++i) fn();
  std::vector<double> per_call;
  per_call.reserve(static_cast<size_t>(rounds) * calls);
  for (int r = 0; r < rounds; ++r)
    for (int c = 0; c < calls; ++c) {
      if (gap_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
      const auto start = std::chrono::steady_clock::now();
      fn();
      per_call.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
  std::sort(per_call.begin(), per_call.end());
  return {per_call[per_call.size() / 2], per_call[per_call.size() / 10]};
}

void Print(const std::string& label, Stats s, double bytes = 0) {
  if (bytes > 0)
    std::printf("%-56s %8.2f us (p10 %6.2f)  %6.1f GB/s at the median, %6.1f at p10\n", label.c_str(), s.median,
                s.low, bytes / s.median / 1e3, bytes / s.low / 1e3);
  else
    std::printf("%-56s %8.2f us (p10 %6.2f)\n", label.c_str(), s.median, s.low);
}

float* Aligned(int64_t n, float value) {
  float* p = static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
  for (int64_t i = 0; i < n; ++i) p[i] = value * static_cast<float>((i % 7) - 3);
  return p;
}

// The matmul kernel (with the bias+relu epilogue the fusion pass gives the first layer) as
// the plan builds it for `threads` threads.
// The weights are stored (n, k) with transpose_b, as flow.layers.dense makes them. `gemv`: the
// kernel's GEMV (attr gemv), or oneDNN.
KernelFn MatmulKernel(int64_t k, int64_t n, bool relu, int threads, bool gemv) {
  Attrs attrs;
  attrs.Set("transpose_b", true);
  attrs.Set("fuse_bias", true);
  attrs.Set("fuse_relu", relu);
  attrs.Set("gemv", gemv);
  std::vector<TensorDesc> inputs{TensorDesc{{1, k}, DType::kFloat32}, TensorDesc{{n, k}, DType::kFloat32},
                                 TensorDesc{{n}, DType::kFloat32}};
  auto def = OpRegistry::Global().Find("matmul");
  if (!def.ok()) std::abort();
  InferContext ic{inputs, attrs, {}};
  if (!def.value()->infer(ic).ok()) std::abort();
  auto kernel = def.value()->kernel_factories.at(kCpuDevice)(KernelInit{inputs, ic.outputs, attrs, threads});
  if (!kernel.ok()) {
    std::fprintf(stderr, "matmul kernel: %s\n", kernel.status().message().c_str());
    std::abort();
  }
  return kernel.value();
}

}  // namespace
}  // namespace actorflow

int main(int argc, char** argv) {
  using namespace actorflow;
  RegisterAllOps();
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 30;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const int calls = 200;
  const int64_t weights = kIn * kHidden;
  const double weight_bytes = static_cast<double>(weights) * sizeof(float);
  float* w1 = Aligned(weights, 0.01f);
  float* w2 = Aligned(kHidden * kOut, 0.01f);
  float* x = Aligned(kIn, 0.5f);
  float* b1 = Aligned(kHidden, 0.1f);
  float* b2 = Aligned(kOut, 0.1f);
  float* h = Aligned(kHidden, 0);
  float* y = Aligned(kOut, 0);
  volatile float sink = 0;
  std::printf("batch-1 MLP pieces, %d rounds of %d calls, %d threads\n", rounds, calls, threads);

  Print("read 1.6 MB of weights, one core", Time([&] { sink = ReadAll(w1, weights); }, rounds, calls), weight_bytes);
  struct Halves {
    const float* w;
    int64_t half;
    float sums[2];
  } halves{w1, weights / 2, {0, 0}};
  auto read_half = [&](int chunk) { halves.sums[chunk] = ReadAll(halves.w + chunk * halves.half, halves.half); };
  Print("read 1.6 MB in two halves on the kernels' pool",
        Time([&] { ParallelChunks(2, threads, read_half); }, rounds, calls), weight_bytes);

  omp_set_num_threads(1);
  Print("GEMV 784x512, oneDNN sgemm, one thread", Time([&] {
          dnnl_sgemm('N', 'T', 1, kHidden, kIn, 1.f, x, kIn, w1, kIn, 0.f, h, kHidden);
        }, rounds, calls), weight_bytes);
  Print("GEMV 784x512, kernels' Sgemm (blocks on the pool)", Time([&] {
          (void)Sgemm(false, true, 1, kHidden, kIn, 1.f, x, w1, 0.f, h, threads, false);
        }, rounds, calls), weight_bytes);

  if (GemvAvailable()) {
    const GemvArgs gemv{true, 1, kHidden, kIn, x, w1, b1, true, h};
    Print("GEMV loop (kernels/gemv.h) + bias + relu, one thread", Time([&] { GemvColumns(gemv, 0, kHidden); }, rounds, calls),
          weight_bytes);
    const int64_t step = GemvColumnStep(kHidden, threads);
    auto gemv_block = [&](int i) { GemvColumns(gemv, i * step, std::min(kHidden, (i + 1) * step)); };
    Print("GEMV loop, column blocks on the kernels' pool",
          Time([&] { ParallelChunks(static_cast<int>((kHidden + step - 1) / step), threads, gemv_block); }, rounds, calls),
          weight_bytes);
  }
  std::vector<TensorView> in1{{x, {{1, kIn}, DType::kFloat32}}, {w1, {{kHidden, kIn}, DType::kFloat32}},
                              {b1, {{kHidden}, DType::kFloat32}}};
  std::vector<TensorView> out1{{h, {{1, kHidden}, DType::kFloat32}}};
  std::vector<TensorView> in2{{h, {{1, kHidden}, DType::kFloat32}}, {w2, {{kOut, kHidden}, DType::kFloat32}},
                              {b2, {{kOut}, DType::kFloat32}}};
  std::vector<TensorView> out2{{y, {{1, kOut}, DType::kFloat32}}};
  KernelContext c1{&in1, &out1, 0}, c2{&in2, &out2, 0};
  for (bool gemv : {true, false}) {
    const std::string how = gemv ? " [gemv]" : " [oneDNN]";
    KernelFn layer1 = MatmulKernel(kIn, kHidden, true, threads, gemv);
    KernelFn layer2 = MatmulKernel(kHidden, kOut, false, threads, gemv);
    Print("layer 1: matmul kernel + bias + relu" + how, Time([&] { (void)layer1(c1); }, rounds, calls), weight_bytes);
    Print("layer 2: matmul kernel 512x10 + bias" + how, Time([&] { (void)layer2(c2); }, rounds, calls));
    Print("both layers" + how, Time([&] {
            (void)layer1(c1);
            (void)layer2(c2);
          }, rounds, calls));
    Print("both layers, each call after 1 ms idle" + how, Time([&] {
            (void)layer1(c1);
            (void)layer2(c2);
          }, rounds, 20, 1000));
  }

  auto nothing = [&](int chunk) { halves.sums[chunk] += 1; };
  Print("pool round trip, 2 trivial chunks, back to back", Time([&] { ParallelChunks(2, threads, nothing); }, rounds, calls));
  // A chunk long enough that the caller cannot take both before a helper that is awake joins.
  auto spin = [&](int chunk) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(5);
    while (std::chrono::steady_clock::now() < until) halves.sums[chunk] += 1;
  };
  Print("pool, 2 chunks of 5 us, back to back (5 us = both ran at once)",
        Time([&] { ParallelChunks(2, threads, spin); }, rounds, calls));
  Print("pool, 2 chunks of 5 us, each call after 1 ms idle", Time([&] { ParallelChunks(2, threads, spin); }, rounds, 20, 1000));
  return sink == 12345.f ? 1 : 0;
}

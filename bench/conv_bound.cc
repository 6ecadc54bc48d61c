// The LeNet train step's lower bound from oneDNN's own primitives (bench/bench_lenet.py runs it
// in the same run as the step): each convolution pass of the step (conv1 forward and filter
// gradient, conv2 forward, data and filter gradient) timed alone at its best algorithm
// (direct, Winograd where oneDNN offers it, auto), in the layouts oneDNN chooses (no reorder
// counted), plus the dense layers' GEMM FLOPs at the fastest 1024^3 sgemm call. Times are the
// fastest call of many: the bound is what the library reaches at its best on this host.
//
//   conv_bound [threads] [seconds per case]   -> one JSON object on stdout
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using dnnl::memory;
using Clock = std::chrono::steady_clock;

// Fastest single call of `run` over `seconds` (after two warm-up calls).
double Fastest(const std::function<void()>& run, double seconds) {
  run();
  run();
  double best = 1e30;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  do {
    const auto start = Clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  } while (Clock::now() < end);
  return best;
}

enum class Pass { kForward, kData, kFilter };

struct Conv {
  const char* name;
  Pass pass;
  memory::dim n, c, hw, o, k;  // SAME padding, stride 1
};

// One pass at one algorithm; returns seconds, or a negative value when oneDNN has no
// implementation of that algorithm for the shape.
double TimeConv(const Conv& conv, dnnl::algorithm algorithm, double seconds) {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const auto f32 = memory::data_type::f32;
  const auto any = memory::format_tag::any;
  const memory::dim pad = conv.k / 2;
  memory::desc x({conv.n, conv.c, conv.hw, conv.hw}, f32, any), w({conv.o, conv.c, conv.k, conv.k}, f32, any),
      y({conv.n, conv.o, conv.hw, conv.hw}, f32, any);
  const memory::dims strides = {1, 1}, padding = {pad, pad};
  try {
    dnnl::convolution_forward::desc forward_desc(dnnl::prop_kind::forward_training, algorithm, x, w, y, strides, padding,
                                                 padding);
    dnnl::convolution_forward::primitive_desc forward(forward_desc, engine);
    dnnl::primitive primitive;
    std::vector<memory> held;
    std::unordered_map<int, memory> args;
    auto bind = [&](int arg, const memory::desc& md) {
      held.emplace_back(md, engine);
      args[arg] = held.back();
    };
    switch (conv.pass) {
      case Pass::kForward:
        primitive = dnnl::convolution_forward(forward);
        bind(DNNL_ARG_SRC, forward.src_desc()), bind(DNNL_ARG_WEIGHTS, forward.weights_desc());
        bind(DNNL_ARG_DST, forward.dst_desc()), bind(DNNL_ARG_SCRATCHPAD, forward.scratchpad_desc());
        break;
      case Pass::kData: {
        dnnl::convolution_backward_data::desc d(algorithm, x, w, y, strides, padding, padding);
        dnnl::convolution_backward_data::primitive_desc pd(d, engine, forward);
        primitive = dnnl::convolution_backward_data(pd);
        bind(DNNL_ARG_DIFF_SRC, pd.diff_src_desc()), bind(DNNL_ARG_WEIGHTS, pd.weights_desc());
        bind(DNNL_ARG_DIFF_DST, pd.diff_dst_desc()), bind(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc());
        break;
      }
      case Pass::kFilter: {
        dnnl::convolution_backward_weights::desc d(algorithm, x, w, y, strides, padding, padding);
        dnnl::convolution_backward_weights::primitive_desc pd(d, engine, forward);
        primitive = dnnl::convolution_backward_weights(pd);
        bind(DNNL_ARG_SRC, pd.src_desc()), bind(DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc());
        bind(DNNL_ARG_DIFF_DST, pd.diff_dst_desc()), bind(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc());
        break;
      }
    }
    for (memory& m : held) std::fill_n(static_cast<float*>(m.get_data_handle()), m.get_desc().get_size() / 4, 0.5f);
    return Fastest([&] {
      primitive.execute(stream, args);
      stream.wait();
    }, seconds);
  } catch (const dnnl::error&) {
    return -1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 0.3;
  omp_set_num_threads(threads);
  const std::vector<Conv> convs = {{"conv1 forward", Pass::kForward, 100, 1, 28, 32, 5},
                                   {"conv1 filter gradient", Pass::kFilter, 100, 1, 28, 32, 5},
                                   {"conv2 forward", Pass::kForward, 100, 32, 14, 64, 5},
                                   {"conv2 data gradient", Pass::kData, 100, 32, 14, 64, 5},
                                   {"conv2 filter gradient", Pass::kFilter, 100, 32, 14, 64, 5}};
  const std::pair<const char*, dnnl::algorithm> algorithms[] = {{"direct", dnnl::algorithm::convolution_direct},
                                                                {"winograd", dnnl::algorithm::convolution_winograd},
                                                                {"auto", dnnl::algorithm::convolution_auto}};
  std::printf("{\"threads\": %d, \"convolutions\": [", threads);
  double conv_total = 0;
  for (size_t i = 0; i < convs.size(); ++i) {
    double best = 1e30;
    std::string best_name;
    for (const auto& [name, algorithm] : algorithms) {
      const double t = TimeConv(convs[i], algorithm, seconds);
      if (t > 0 && t < best) best = t, best_name = name;
    }
    conv_total += best;
    std::printf("%s{\"pass\": \"%s\", \"seconds\": %.6e, \"algorithm\": \"%s\"}", i ? ", " : "", convs[i].name, best,
                best_name.c_str());
  }
  // Dense layers (3136 -> 512 -> 10, batch 100): forward, weight and input gradients of the
  // first (its input gradient feeds the pooling), forward, weight and input gradients of the second.
  const double dense_flops = 2.0 * 100 * (3 * 3136.0 * 512 + 3 * 512.0 * 10);
  const int size = 1024;
  std::vector<float> a(size * size, 0.5f), b(size * size, 0.25f), c(size * size);
  const double sgemm = Fastest([&] {
    dnnl_sgemm('N', 'N', size, size, size, 1.0f, a.data(), size, b.data(), size, 0.0f, c.data(), size);
  }, seconds);
  const double rate = 2.0 * size * size * size / sgemm;
  std::printf("], \"conv_seconds\": %.6e, \"dense_flops\": %.6e, \"sgemm_gflops\": %.3f, \"dense_seconds\": %.6e, "
              "\"bound_seconds\": %.6e}\n",
              conv_total, dense_flops, rate / 1e9, dense_flops / rate, conv_total + dense_flops / rate);
  return 0;
}

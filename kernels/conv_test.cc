#include <dirent.h>
#include <omp.h>

#include <thread>

#include "kernels/parallel_chunks.h"
#include "kernels/testing/test_util.h"
#include "kernels/testing/with_timeout.h"

namespace actorflow::testing {
namespace {

using Ints = std::vector<int64_t>;

struct ConvCase {
  Shape x, w;
  Attrs attrs;
  Shape expected_out;
  int64_t groups, sh, sw, dh, dw, top, left;
};

// Naive double reference: out[n,o,oh,ow] = sum x[n, g*Cg+c, oh*s-top+kh*d, ...] * w[o,c,kh,kw].
double Ref(const ConvCase& k, const HostTensor& x, const HostTensor& w, int64_t n, int64_t o, int64_t oh, int64_t ow) {
  int64_t c_in = k.x[1], h = k.x[2], wd = k.x[3], cg = k.w[1], og = k.w[0] / k.groups;
  double acc = 0;
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t kh = 0; kh < k.w[2]; ++kh)
      for (int64_t kw = 0; kw < k.w[3]; ++kw) {
        int64_t ih = oh * k.sh - k.top + kh * k.dh, iw = ow * k.sw - k.left + kw * k.dw;
        if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
        acc += x.at(((n * c_in + (o / og) * cg + c) * h + ih) * wd + iw) * w.at(((o * cg + c) * k.w[2] + kh) * k.w[3] + kw);
      }
  return acc;
}

std::vector<ConvCase> Cases() {
  return {
      {{2, 3, 7, 7}, {4, 3, 3, 3}, Attrs{{"padding", std::string("VALID")}}, {2, 4, 5, 5}, 1, 1, 1, 1, 1, 0, 0},
      {{1, 3, 8, 8}, {2, 3, 3, 3}, Attrs{{"padding", std::string("SAME")}, {"strides", Ints{2, 2}}}, {1, 2, 4, 4}, 1, 2, 2, 1, 1, 0, 0},
      {{1, 2, 7, 6}, {2, 2, 3, 2}, Attrs{{"padding", std::string("same")}, {"strides", int64_t{2}}}, {1, 2, 4, 3}, 1, 2, 2, 1, 1, 1, 0},
      {{1, 4, 9, 9}, {6, 2, 3, 3}, Attrs{{"padding", Ints{1, 2, 0, 1}}, {"groups", int64_t{2}}, {"dilation_rate", Ints{2, 1}}},
       {1, 6, 8, 8}, 2, 1, 1, 2, 1, 1, 0},
      {{2, 2, 6, 6}, {3, 2, 2, 2}, Attrs{{"padding", Ints{0, 0, 0, 0, 1, 1, 1, 1}}, {"strides", Ints{1, 2}}, {"dilation_rate", int64_t{2}}},
       {2, 3, 6, 3}, 1, 1, 2, 2, 2, 1, 1},
      // 1x1, stride 1, unpadded: channels-last runs it as one GEMM.
      {{2, 5, 4, 3}, {6, 5, 1, 1}, Attrs{{"padding", std::string("VALID")}}, {2, 6, 4, 3}, 1, 1, 1, 1, 1, 0, 0},
  };
}

TEST(Conv, ForwardFloat32MatchesReference) {
  for (const ConvCase& k : Cases()) {
    HostTensor x = F32(k.x), w = F32(k.w, Ramp(NumElements(k.w), 1.3));
    HostTensor y = Run1("conv2d", {x, w}, k.attrs);
    ASSERT_EQ(y.desc.shape, k.expected_out);
    for (int64_t n = 0; n < k.expected_out[0]; ++n)
      for (int64_t o = 0; o < k.expected_out[1]; ++o)
        for (int64_t oh = 0; oh < k.expected_out[2]; ++oh)
          for (int64_t ow = 0; ow < k.expected_out[3]; ++ow)
            ASSERT_NEAR(y.at(((n * k.expected_out[1] + o) * k.expected_out[2] + oh) * k.expected_out[3] + ow),
                        Ref(k, x, w, n, o, oh, ow), 1e-4);
  }
}

// The float32 (oneDNN) backward kernels agree with the float64 loops, which the gradient test
// below checks against finite differences.
TEST(Conv, BackwardFloat32MatchesFloat64) {
  for (const ConvCase& k : Cases()) {
    for (const std::string type : {"conv2d_grad_data", "conv2d_grad_filter"}) {
      bool data = type == "conv2d_grad_data";
      std::vector<double> dy = Ramp(NumElements(k.expected_out), 0.9), x = Ramp(NumElements(k.x)), w = Ramp(NumElements(k.w), 1.3);
      auto run = [&](DType t) {
        HostTensor dyt = HostTensor::Of(k.expected_out, t, dy), xt = HostTensor::Of(k.x, t, x), wt = HostTensor::Of(k.w, t, w);
        return Run1(type, data ? std::vector<HostTensor>{dyt, wt, xt} : std::vector<HostTensor>{dyt, xt, wt}, k.attrs);
      };
      HostTensor a = run(DType::kFloat32), b = run(DType::kFloat64);
      ASSERT_EQ(a.desc.shape, b.desc.shape);
      for (int64_t i = 0; i < a.desc.num_elements(); ++i) ASSERT_NEAR(a.at(i), b.at(i), 1e-4) << type;
    }
  }
}

// Depthwise filter gradients (their own direct kernel for NCHW float32) against the float64
// loops, on MobileNetV2's small planes (1x1 and 2x2 with padding 1: most taps fall outside),
// strides, dilation, asymmetric padding and a channel multiplier of 2 (oneDNN's path).
TEST(Conv, DepthwiseFilterGradientMatchesFloat64) {
  struct Depthwise {
    Shape x;
    int64_t multiplier, kernel;
    Attrs attrs;
  };
  const std::vector<Depthwise> cases = {
      {{3, 5, 1, 1}, 1, 3, Attrs{{"padding", Ints{1, 1}}}},
      {{2, 4, 2, 2}, 1, 3, Attrs{{"padding", Ints{1, 1}}}},
      {{2, 4, 2, 2}, 1, 3, Attrs{{"padding", Ints{1, 1}}, {"strides", int64_t{2}}}},
      {{2, 3, 7, 6}, 1, 3, Attrs{{"padding", Ints{1, 2, 0, 1}}, {"strides", Ints{2, 1}}, {"dilation_rate", Ints{1, 2}}}},
      {{1, 2, 9, 9}, 1, 5, Attrs{{"padding", std::string("SAME")}, {"dilation_rate", int64_t{2}}}},
      {{2, 3, 5, 5}, 2, 3, Attrs{{"padding", Ints{1, 1}}}},
  };
  for (const Depthwise& k : cases) {
    Attrs attrs = k.attrs;
    attrs.Set("groups", k.x[1]);
    const Shape w_shape{k.x[1] * k.multiplier, 1, k.kernel, k.kernel};
    std::vector<double> x = Ramp(NumElements(k.x)), w = Ramp(NumElements(w_shape), 1.3);
    const Shape y_shape = Run1("conv2d", {HostTensor::Of(k.x, DType::kFloat64, x), HostTensor::Of(w_shape, DType::kFloat64, w)},
                               attrs).desc.shape;
    std::vector<double> dy = Ramp(NumElements(y_shape), 0.9);
    auto run = [&](DType t) {
      return Run1("conv2d_grad_filter", {HostTensor::Of(y_shape, t, dy), HostTensor::Of(k.x, t, x), HostTensor::Of(w_shape, t, w)},
                  attrs);
    };
    HostTensor a = run(DType::kFloat32), b = run(DType::kFloat64);
    ASSERT_EQ(a.desc.shape, w_shape);
    for (int64_t i = 0; i < a.desc.num_elements(); ++i)
      ASSERT_NEAR(a.at(i), b.at(i), 1e-4 * (1 + std::abs(b.at(i)))) << ShapeToString(k.x) << " element " << i;
  }
}

TEST(Conv, Errors) {
  std::string e = ErrorOf("conv2d", {F32({1, 3, 8, 8}), F32({2, 4, 3, 3})});
  EXPECT_NE(e.find("filter dimension 1 must be 3"), std::string::npos) << e;
  e = ErrorOf("conv2d", {F32({1, 3, 8, 8}), F32({2, 3, 3, 3})}, Attrs{{"padding", std::string("FOO")}});
  EXPECT_NE(e.find("\"SAME\", \"VALID\""), std::string::npos) << e;
  e = ErrorOf("conv2d", {F32({1, 3, 8, 8}), F32({2, 3, 3, 3})}, Attrs{{"data_format", std::string("NDHWC")}});
  EXPECT_NE(e.find("data_format"), std::string::npos) << e;
  e = ErrorOf("conv2d", {F32({1, 3, 8, 8}), F32({2, 3, 3, 3}), F32({3})}, Attrs{{"fuse_bias", true}});
  EXPECT_NE(e.find("epilogue input 2 must be float32(2,)"), std::string::npos) << e;
  e = ErrorOf("conv2d", {F32({1, 3, 8, 8}), F32({2, 3, 3, 3}), F32({2})}, Attrs{{"fuse_batch_norm", true}});
  EXPECT_NE(e.find("expected 6 inputs (x, filter, gamma, beta, moving_mean, moving_variance), got 3"), std::string::npos) << e;
  e = ErrorOf("conv2d", {F32({1, 3, 8, 8}), F32({2, 3, 3, 3})}, Attrs{{"activation", std::string("gelu")}});
  EXPECT_NE(e.find("activation"), std::string::npos) << e;
  e = ErrorOf("conv2d", {F64({1, 3, 8, 8}), F64({2, 3, 3, 3})}, Attrs{{"activation", std::string("relu")}});
  EXPECT_NE(e.find("float32 only"), std::string::npos) << e;
  e = ErrorOf("conv2d", {F32({1, 3, 2, 2}), F32({2, 3, 3, 3})});
  EXPECT_NE(e.find("does not fit"), std::string::npos) << e;
  e = ErrorOf("conv2d", {F32({1, 3, 8, 8}), F32({2, 1, 3, 3})}, Attrs{{"groups", int64_t{2}}});
  EXPECT_NE(e.find("groups=2 must divide"), std::string::npos) << e;
}

// x (N,C,H,W) <-> (N,H,W,C).
HostTensor ToChannelsLast(const HostTensor& t) { return Run1("transpose", {t}, Attrs{{"perm", Ints{0, 2, 3, 1}}}); }

// data_format NHWC computes the NCHW convolution on channels-last tensors: every pass, both
// dtypes (oneDNN for float32, the loops for float64), every geometry of Cases().
TEST(Conv, ChannelsLastMatchesChannelsFirst) {
  for (const ConvCase& k : Cases()) {
    Attrs nhwc = k.attrs;
    nhwc.Set("data_format", std::string("NHWC"));
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      HostTensor x = HostTensor::Of(k.x, t, Ramp(NumElements(k.x))), w = HostTensor::Of(k.w, t, Ramp(NumElements(k.w), 1.3));
      HostTensor dy = HostTensor::Of(k.expected_out, t, Ramp(NumElements(k.expected_out), 0.9));
      HostTensor y = Run1("conv2d", {x, w}, k.attrs), y_last = Run1("conv2d", {ToChannelsLast(x), w}, nhwc);
      HostTensor dx = Run1("conv2d_grad_data", {dy, w, x}, k.attrs);
      HostTensor dx_last = Run1("conv2d_grad_data", {ToChannelsLast(dy), w, ToChannelsLast(x)}, nhwc);
      HostTensor dw = Run1("conv2d_grad_filter", {dy, x, w}, k.attrs);
      HostTensor dw_last = Run1("conv2d_grad_filter", {ToChannelsLast(dy), ToChannelsLast(x), w}, nhwc);
      const std::pair<HostTensor, HostTensor> pairs[] = {{ToChannelsLast(y), y_last}, {ToChannelsLast(dx), dx_last}, {dw, dw_last}};
      for (const auto& [expected, got] : pairs) {
        ASSERT_EQ(got.desc.shape, expected.desc.shape);
        for (int64_t i = 0; i < got.desc.num_elements(); ++i) ASSERT_NEAR(got.at(i), expected.at(i), 1e-4) << DTypeName(t);
      }
    }
  }
}

// The fused epilogues equal the ops they replace, run one after the other: conv2d, bias_add,
// inference batch_normalization, then relu or clamp (relu6), in both layouts and for a
// depthwise and a dense geometry.
TEST(Conv, FusedEpilogueMatchesUnfusedOps) {
  struct Geometry {
    Shape x, w;
    Attrs attrs;
  };
  const Geometry geometries[] = {
      {{2, 8, 9, 9}, {8, 1, 3, 3}, Attrs{{"padding", Ints{1, 1}}, {"groups", int64_t{8}}, {"strides", int64_t{2}}}},
      {{2, 5, 6, 6}, {7, 5, 1, 1}, Attrs{{"padding", std::string("VALID")}}},
  };
  for (const Geometry& k : geometries) {
    const int64_t o = k.w[0];
    HostTensor x = F32(k.x, Ramp(NumElements(k.x))), w = F32(k.w, Ramp(NumElements(k.w), 1.3));
    std::vector<double> scaled = Ramp(o, 0.2);
    for (double& v : scaled) v *= 3;  // outputs beyond [0, 6] so that the clip bounds bite
    HostTensor bias = F32({o}, Ramp(o, 2.1)), gamma = F32({o}, scaled), beta = F32({o}, Ramp(o, 0.7));
    HostTensor mean = F32({o}, Ramp(o, 1.1)), var = F32({o}, Positive(o));
    for (bool last : {false, true})
      for (bool with_bias : {false, true})
        for (const std::string activation : {"", "relu", "clip"}) {
          Attrs conv = k.attrs;
          if (last) conv.Set("data_format", std::string("NHWC"));
          HostTensor in = last ? ToChannelsLast(x) : x;
          HostTensor y = Run1("conv2d", {in, w}, conv);
          if (with_bias) y = Run1("bias_add", {y, bias}, Attrs{{"axis", int64_t{last ? 3 : 1}}});
          auto bn = RunOp("batch_normalization", {y, gamma, beta, mean, var},
                          Attrs{{"axis", int64_t{last ? 3 : 1}}, {"epsilon", 1e-3}, {"training", false}});
          ASSERT_TRUE(bn.ok()) << bn.status().ToString();
          y = bn.value()[0];
          if (activation == "relu") y = Run1("relu", {y});
          if (activation == "clip") y = Run1("clamp", {y}, Attrs{{"min", 0.0}, {"max", 6.0}, {"inclusive", false}});

          Attrs fused = conv;
          fused.Set("fuse_bias", with_bias);
          fused.Set("fuse_batch_norm", true);
          fused.Set("batch_norm_epsilon", 1e-3);
          if (!activation.empty()) fused.Set("activation", activation);
          if (activation == "clip") fused.Set("activation_min", 0.0), fused.Set("activation_max", 6.0);
          std::vector<HostTensor> inputs = {in, w};
          if (with_bias) inputs.push_back(bias);
          for (const HostTensor& t : {gamma, beta, mean, var}) inputs.push_back(t);
          HostTensor z = Run1("conv2d", inputs, fused);
          ASSERT_EQ(z.desc.shape, y.desc.shape);
          int clipped = 0;
          for (int64_t i = 0; i < y.desc.num_elements(); ++i) {
            ASSERT_NEAR(z.at(i), y.at(i), 1e-4 * (1 + std::abs(y.at(i)))) << "last " << last << " bias " << with_bias << " " << activation;
            clipped += y.at(i) == 6.0 || y.at(i) == 0.0;
          }
          if (activation == "clip") EXPECT_GT(clipped, 0);
        }
  }
}

// A NaN reaching the fused activation stays NaN, as through the relu and clamp ops (oneDNN's own
// relu/clip would turn it into a bound): the oneDNN path (3x3 depthwise) and the GEMM path (1x1).
TEST(Conv, FusedActivationKeepsNaN) {
  for (const bool pointwise : {false, true}) {
    const Shape x_shape = {1, 4, 4, 4}, w_shape = pointwise ? Shape{4, 4, 1, 1} : Shape{4, 1, 3, 3};
    Attrs conv{{"padding", Ints{1, 1}}, {"groups", int64_t{pointwise ? 1 : 4}}, {"data_format", std::string("NHWC")}};
    if (pointwise) conv.Set("padding", std::string("VALID"));
    std::vector<double> values = Ramp(NumElements(x_shape));
    values[5] = std::nan("");
    HostTensor x = F32(x_shape, values), w = F32(w_shape, Ramp(NumElements(w_shape), 1.3));
    for (const std::string activation : {"relu", "clip"}) {
      Attrs fused = conv;
      fused.Set("activation", activation);
      fused.Set("activation_min", 0.0), fused.Set("activation_max", 6.0);
      HostTensor z = Run1("conv2d", {x, w}, fused), y = Run1("conv2d", {x, w}, conv);
      y = activation == "relu" ? Run1("relu", {y}) : Run1("clamp", {y}, Attrs{{"min", 0.0}, {"max", 6.0}});
      int nans = 0;
      for (int64_t i = 0; i < y.desc.num_elements(); ++i) {
        ASSERT_EQ(std::isnan(z.at(i)), std::isnan(y.at(i))) << activation << " pointwise " << pointwise << " at " << i;
        nans += std::isnan(y.at(i));
        if (!std::isnan(y.at(i))) ASSERT_NEAR(z.at(i), y.at(i), 1e-5);
      }
      EXPECT_GT(nans, 0);
    }
  }
}

TEST(Conv, Gradients) {
  EXPECT_LT(Grad("conv2d", {F64({1, 2, 5, 5}), F64({3, 2, 3, 3})}, Attrs{{"padding", std::string("SAME")}}, {0, 1}), kGradTol);
  EXPECT_LT(Grad("conv2d", {F64({2, 4, 6, 5}), F64({2, 2, 2, 3})},
                 Attrs{{"padding", Ints{1, 0, 2, 1}}, {"strides", Ints{2, 1}}, {"dilation_rate", Ints{1, 2}}, {"groups", int64_t{2}}},
                 {0, 1}), kGradTol);
}

// Threads of this process (/proc/self/task).
int ProcessThreads() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(dir))
      if (entry->d_name[0] != '.') ++count;
    closedir(dir);
  }
  return count;
}

// A convolution split over the batch runs each chunk on one thread: its oneDNN primitives are
// made for one thread even when the building thread's OpenMP team is larger (oneDNN sizes a
// primitive's work split, and the threads it starts, by the team at creation). Counted on a
// fresh thread, which has no OpenMP team yet: running the chunks there must start no thread
// but the kernel helpers (ParallelChunksHelpers). LeNet's conv1 filter gradient is the shape
// where oneDNN split the work over two threads.
TEST(BatchChunkedConv, ChunksStartNoOpenMpThreads) {
  WithTimeout([] {
    RegisterAllOps();
    const Attrs attrs{{"padding", std::string("SAME")}};
    for (const std::string type : {"conv2d", "conv2d_grad_filter", "conv2d_grad_data"}) {
      const Shape x_shape = {8, 1, 28, 28}, w_shape = {32, 1, 5, 5}, y_shape = {8, 32, 28, 28};
      HostTensor x = F32(x_shape), w = F32(w_shape), dy = F32(y_shape);
      std::vector<HostTensor> inputs = type == "conv2d"               ? std::vector<HostTensor>{x, w}
                                       : type == "conv2d_grad_filter" ? std::vector<HostTensor>{dy, x, w}
                                                                      : std::vector<HostTensor>{dy, w, x};
      const OpDef* def = OpRegistry::Global().Find(type).value();
      InferContext ic;
      for (const HostTensor& t : inputs) ic.inputs.push_back(t.desc);
      ic.attrs = attrs;
      ASSERT_TRUE(def->infer(ic).ok()) << type;
      const int previous = omp_get_max_threads();
      omp_set_num_threads(2);  // the team a kernel factory may run under
      auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, ic.outputs, attrs, 2});
      omp_set_num_threads(previous);
      ASSERT_TRUE(kernel.ok()) << type << ": " << kernel.status().ToString();
      HostTensor out = HostTensor::Of(ic.outputs[0].shape, DType::kFloat32, {});
      std::vector<TensorView> in_views, out_views = {out.view()};
      for (HostTensor& t : inputs) in_views.push_back(t.view());
      int started = -1, helpers_started = -1;
      std::thread fresh([&] {
        const int threads = ProcessThreads(), helpers = ParallelChunksHelpers();
        KernelContext ctx{&in_views, &out_views, 0};
        ctx.threads = 2;
        EXPECT_TRUE(kernel.value()(ctx).ok()) << type;
        started = ProcessThreads() - threads;
        helpers_started = ParallelChunksHelpers() - helpers;
      });
      fresh.join();
      EXPECT_EQ(started, helpers_started) << type << ": the chunks started threads of their own";
    }
  });
}

// All outputs of one CPU kernel call on `threads` threads.
std::vector<HostTensor> RunOnThreads(const std::string& type, std::vector<HostTensor> inputs, const Attrs& attrs, int threads) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find(type).value();
  InferContext ic;
  for (const HostTensor& t : inputs) ic.inputs.push_back(t.desc);
  ic.attrs = attrs;
  Status inferred = def->infer(ic);
  EXPECT_TRUE(inferred.ok()) << type << ": " << inferred.ToString();
  if (!inferred.ok()) return {};
  auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, ic.outputs, attrs, threads});
  EXPECT_TRUE(kernel.ok()) << type << ": " << kernel.status().ToString();
  if (!kernel.ok()) return {};
  std::vector<HostTensor> outputs;
  for (const TensorDesc& d : ic.outputs) outputs.push_back(HostTensor::Of(d.shape, d.dtype, {}));
  std::vector<TensorView> in, out;
  for (HostTensor& t : inputs) in.push_back(t.view());
  for (HostTensor& t : outputs) out.push_back(t.view());
  KernelContext ctx{&in, &out, 0};
  Status ran = kernel.value()(ctx);
  EXPECT_TRUE(ran.ok()) << type << ": " << ran.ToString();
  return outputs;
}

// fuse_bias_grad (graph/conv_fusion.cc's "conv_bias_grad"): conv2d_grad_filter's second output
// equals bias_add_grad of dy on the channel axis, and its filter gradient the unfused one; one
// call and batch chunks (2 threads: partial sums per chunk), NCHW and NHWC, a bias from the
// LeNet-like 5x5 shape and a strided, grouped one. float64 (no fused path) is a clear error.
TEST(Conv, FusedBiasGradientEqualsBiasAddGrad) {
  WithTimeout([] {
    struct Case {
      Shape x, w;
      Attrs attrs;
    };
    const std::vector<Case> cases = {
        {{9, 3, 10, 10}, {8, 3, 5, 5}, Attrs{{"padding", std::string("SAME")}}},
        {{6, 4, 9, 9}, {6, 2, 3, 3}, Attrs{{"padding", std::string("VALID")}, {"strides", int64_t{2}}, {"groups", int64_t{2}}}},
    };
    for (const Case& k : cases)
      for (bool nhwc : {false, true})
        for (int threads : {1, 2}) {
          Attrs attrs = k.attrs;
          const Shape x_shape = nhwc ? Shape{k.x[0], k.x[2], k.x[3], k.x[1]} : k.x;
          if (nhwc) attrs.Set("data_format", std::string("NHWC"));
          HostTensor x = F32(x_shape, Ramp(NumElements(x_shape), 0.3)), w = F32(k.w, Ramp(NumElements(k.w), 1.1));
          const Shape y_shape = RunOnThreads("conv2d", {x, w}, attrs, 1).at(0).desc.shape;
          HostTensor dy = F32(y_shape, Ramp(NumElements(y_shape), 0.8));
          Attrs fused_attrs = attrs;
          fused_attrs.Set("fuse_bias_grad", true);
          std::vector<HostTensor> fused = RunOnThreads("conv2d_grad_filter", {dy, x, w}, fused_attrs, threads);
          HostTensor plain = RunOnThreads("conv2d_grad_filter", {dy, x, w}, attrs, threads).at(0);
          HostTensor bias = RunOnThreads("bias_add_grad", {dy}, Attrs{{"axis", int64_t{nhwc ? 3 : 1}}}, 1).at(0);
          ASSERT_EQ(fused.size(), 2u);
          ASSERT_EQ(fused[1].desc.shape, (Shape{k.w[0]}));
          for (int64_t i = 0; i < plain.desc.num_elements(); ++i)
            ASSERT_NEAR(fused[0].at(i), plain.at(i), 1e-4 * (1 + std::abs(plain.at(i)))) << "dfilter " << i;
          for (int64_t o = 0; o < k.w[0]; ++o) {
            ASSERT_NEAR(fused[1].at(o), bias.at(o), 1e-4 * (1 + std::abs(bias.at(o)))) << "dbias " << o << " nhwc " << nhwc
                                                                                         << " threads " << threads;
            ASSERT_NE(bias.at(o), 0.0);
          }
        }
    Attrs fused{{"padding", std::string("SAME")}, {"fuse_bias_grad", true}};
    EXPECT_NE(ErrorOf("conv2d_grad_filter", {F64({2, 4, 5, 5}), F64({2, 3, 5, 5}), F64({4, 3, 3, 3})}, fused).find("float32 only"),
              std::string::npos);
  });
}

}  // namespace
}  // namespace actorflow::testing

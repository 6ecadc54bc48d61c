// The narrow GEMM loops (kernels/matmul_narrow.h) against a double reference, alone (every
// layout they take, tails, alpha/beta, each epilogue, parts that write only their share) and
// through the matmul and matmul_sgd_update kernels with the loops on and off (attr
// narrow_gemm=false: oneDNN).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/gemv.h"
#include "kernels/matmul_narrow.h"
#include "kernels/testing/test_util.h"
#include "kernels/testing/with_timeout.h"

namespace actorflow::testing {
namespace {

struct Case {
  bool transpose_a, transpose_b;
  int64_t m, n, k;
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false, relu = false, mask = false;
};

struct Operands {
  std::vector<float> a, b, bias, y, c0;
  explicit Operands(const Case& c) : a(c.m * c.k), b(c.k * c.n), bias(c.n), y(c.m * c.n), c0(c.m * c.n) {
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 37 % 101) / 50.0 - 1.0);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 53 % 97) / 48.0 - 1.0);
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>((i % 13) / 6.0 - 1.0);
    // The relu's output: zero (masked) for about a third of the elements, positive elsewhere.
    for (size_t i = 0; i < y.size(); ++i) y[i] = i % 3 == 1 ? 0.0f : static_cast<float>(1 + i % 7);
    for (size_t i = 0; i < c0.size(); ++i) c0[i] = static_cast<float>((i * 29 % 89) / 44.0 - 1.0);
  }
  float OpA(const Case& c, int64_t i, int64_t p) const { return c.transpose_a ? a[p * c.m + i] : a[i * c.k + p]; }
  float OpB(const Case& c, int64_t p, int64_t j) const { return c.transpose_b ? b[j * c.k + p] : b[p * c.n + j]; }
  // Element (i, j) in double, and the size of its terms (float32 rounding scales with it).
  double Want(const Case& c, int64_t i, int64_t j, double* magnitude) const {
    double acc = 0, size = 0;
    for (int64_t p = 0; p < c.k; ++p) {
      const double term = static_cast<double>(OpA(c, i, p)) * OpB(c, p, j);
      acc += term;
      size += std::abs(term);
    }
    acc *= c.alpha;
    size *= std::abs(c.alpha);
    if (c.beta != 0.0f) {
      acc += static_cast<double>(c.beta) * c0[i * c.n + j];
      size += std::abs(static_cast<double>(c.beta) * c0[i * c.n + j]);
    }
    if (c.bias) {
      acc += bias[j];
      size += std::abs(bias[j]);
    }
    if (c.relu && acc < 0) acc = 0;
    if (c.mask && !(y[i * c.n + j] > 0)) acc = 0;
    *magnitude = size;
    return acc;
  }
  NarrowGemmArgs Args(const Case& c, float* out) const {
    NarrowGemmArgs g;
    g.transpose_a = c.transpose_a;
    g.transpose_b = c.transpose_b;
    g.m = c.m;
    g.n = c.n;
    g.k = c.k;
    g.alpha = c.alpha;
    g.beta = c.beta;
    g.a = a.data();
    g.b = b.data();
    g.bias = c.bias ? bias.data() : nullptr;
    g.relu = c.relu;
    g.relu_output = c.mask ? y.data() : nullptr;
    g.c = out;
    return g;
  }
};

// Every layout the loops take: rows with k small (either transpose of A), rows with m small and
// a cached B, dots with n small; sizes below, at and past a vector and tile, with masked tails.
std::vector<Case> Cases() {
  std::vector<Case> cases;
  int variant = 0;
  auto add = [&](Case c) {
    // Epilogues in turn: none, bias, bias + relu, mask, alpha/beta (the SGD form).
    switch (variant++ % 5) {
      case 1: c.bias = true; break;
      case 2: c.bias = c.relu = true; break;
      case 3: c.mask = true; break;
      case 4: c.alpha = -0.25f; c.beta = 0.75f; break;
      default: break;
    }
    cases.push_back(c);
  };
  for (bool ta : {false, true}) {
    for (int64_t m : {1, 5, 13, 100})
      for (int64_t n : {1, 10, 33, 512})
        for (int64_t k : {1, 3, 10, 16}) add({ta, false, m, n, k});
    for (int64_t m : {2, 10, 12, 16})
      for (int64_t n : {10, 70, 512})
        for (int64_t k : {17, 100}) add({ta, false, m, n, k});
  }
  for (int64_t m : {1, 3, 100})
    for (int64_t n : {1, 5, 10, 13, 16})
      for (int64_t k : {5, 16, 37, 512}) add({false, true, m, n, k});
  return cases;
}

std::string Describe(const Case& c) {
  return "transpose_a " + std::to_string(c.transpose_a) + " transpose_b " + std::to_string(c.transpose_b) + " m " +
         std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) + " alpha " +
         std::to_string(c.alpha) + " beta " + std::to_string(c.beta) + " bias " + std::to_string(c.bias) + " relu " +
         std::to_string(c.relu) + " mask " + std::to_string(c.mask);
}

void ExpectNear(const Case& c, const Operands& o, const float* got, const std::string& what) {
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double magnitude;
      const double want = o.Want(c, i, j, &magnitude);
      ASSERT_NEAR(got[i * c.n + j], want, 1e-6 * (1 + magnitude)) << what << ": " << Describe(c) << " at (" << i << ", " << j << ")";
    }
}

TEST(NarrowGemm, ChoosesByLayoutAndSize) {
  // The seed MLP's narrow GEMMs (weights stored (units, in), flow.layers.dense): the logits
  // h (100,512) · W2ᵀ, the data gradient dlogits (100,10) · W2 and the weight gradient
  // dlogitsᵀ · h.
  EXPECT_EQ(ChooseNarrowGemm(false, true, 100, 10, 512), NarrowGemmLoop::kDots);
  EXPECT_EQ(ChooseNarrowGemm(false, false, 100, 512, 10), NarrowGemmLoop::kRows);
  EXPECT_EQ(ChooseNarrowGemm(true, false, 10, 512, 100), NarrowGemmLoop::kRows);
  // Wide GEMMs, layouts whose vectors would be strided, and B too large to stay cached.
  EXPECT_EQ(ChooseNarrowGemm(false, true, 100, 512, 784), NarrowGemmLoop::kNone);
  EXPECT_EQ(ChooseNarrowGemm(true, false, 512, 784, 100), NarrowGemmLoop::kNone);
  EXPECT_EQ(ChooseNarrowGemm(true, true, 100, 10, 512), NarrowGemmLoop::kNone);
  EXPECT_EQ(ChooseNarrowGemm(false, false, 100, 10, 512), NarrowGemmLoop::kNone);
  EXPECT_EQ(ChooseNarrowGemm(false, false, 10, 4096, 4096), NarrowGemmLoop::kNone);
  EXPECT_EQ(ChooseNarrowGemm(false, true, 100, 16, 65536), NarrowGemmLoop::kNone);
  EXPECT_EQ(ChooseNarrowGemm(false, false, 0, 10, 10), NarrowGemmLoop::kNone);
}

TEST(NarrowGemm, PartsEqualTheReferenceAndWriteOnlyTheirShare) {
  if (!GemvAvailable()) {
    EXPECT_FALSE(__builtin_cpu_supports("avx512f"));  // the kernels then never call it
    return;
  }
  for (const Case& c : Cases()) {
    const NarrowGemmLoop loop = ChooseNarrowGemm(c.transpose_a, c.transpose_b, c.m, c.n, c.k);
    ASSERT_NE(loop, NarrowGemmLoop::kNone) << Describe(c);
    const Operands o(c);
    for (int parts : {1, 2, 3}) {
      std::vector<float> out = o.c0;
      const NarrowGemmArgs g = o.Args(c, out.data());
      const int64_t extent = NarrowGemmExtent(g, loop), step = NarrowGemmStep(g, loop, parts);
      ASSERT_EQ(extent, loop == NarrowGemmLoop::kRows ? c.n : c.m);
      ASSERT_LE((extent + step - 1) / step, parts);
      for (int64_t begin = 0; begin < extent; begin += step) {
        const int64_t end = std::min(extent, begin + step);
        NarrowGemmPart(g, loop, begin, end);
        // Nothing past the part's end written yet (C still holds its old values there).
        for (int64_t i = 0; i < c.m; ++i)
          for (int64_t j = 0; j < c.n; ++j) {
            const int64_t at = loop == NarrowGemmLoop::kRows ? j : i;
            if (at < end) continue;
            ASSERT_EQ(out[i * c.n + j], o.c0[i * c.n + j]) << Describe(c) << " part [" << begin << ", " << end << ")";
          }
      }
      ExpectNear(c, o, out.data(), "NarrowGemmPart, " + std::to_string(parts) + " parts");
    }
  }
}

// NaN as the matmul kernel's other paths: the relu keeps it (NanRelu), the relu-gradient mask
// zeroes where y is not > 0 (NaN included) and passes a NaN product where y > 0.
TEST(NarrowGemm, NanThroughTheEpilogues) {
  if (!GemvAvailable()) return;  // PartsEqualTheReferenceAndWriteOnlyTheirShare says why
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (NarrowGemmLoop loop : {NarrowGemmLoop::kRows, NarrowGemmLoop::kDots}) {
    // op(A) (1 x 1) = [1]; op(B) row 0 = [NaN, -2, 5, NaN]: B stored 1 x 4 or 4 x 1.
    const std::vector<float> a = {1}, b = {nan, -2, 5, nan}, bias(4, 0.0f), y = {1, 1, 1, 0};
    std::vector<float> out(4, 7.0f);
    NarrowGemmArgs g;
    g.transpose_b = loop == NarrowGemmLoop::kDots;
    g.m = 1;
    g.n = 4;
    g.k = 1;
    g.a = a.data();
    g.b = b.data();
    g.bias = bias.data();
    g.relu = true;
    g.c = out.data();
    ASSERT_EQ(ChooseNarrowGemm(false, g.transpose_b, 1, 4, 1), loop);
    NarrowGemmPart(g, loop, 0, NarrowGemmExtent(g, loop));
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[1], 0.0f);
    EXPECT_FALSE(std::signbit(out[1]));
    EXPECT_EQ(out[2], 5.0f);
    g.bias = nullptr;
    g.relu = false;
    g.relu_output = y.data();
    NarrowGemmPart(g, loop, 0, NarrowGemmExtent(g, loop));
    EXPECT_TRUE(std::isnan(out[0]));  // y > 0: the NaN gradient passes
    EXPECT_EQ(out[1], -2.0f);
    EXPECT_EQ(out[3], 0.0f);  // y == 0: masked, the NaN too
    const std::vector<float> y_nan = {nan, 1, 1, 1};
    g.relu_output = y_nan.data();
    NarrowGemmPart(g, loop, 0, NarrowGemmExtent(g, loop));
    EXPECT_EQ(out[0], 0.0f);
  }
}

HostTensor Float32(const Shape& shape, const std::vector<float>& values) {
  return HostTensor::Of(shape, DType::kFloat32, std::vector<double>(values.begin(), values.end()));
}

std::vector<float> Floats(const HostTensor& t) {
  std::vector<float> v(t.desc.num_elements());
  std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(float));
  return v;
}

// The matmul kernel (1 and 2 threads) with the loops on and off, for every case whose epilogue
// the matmul has (bias, bias + relu, relu-gradient mask; alpha = 1, beta = 0), each against the
// reference; on, bit-equal to one NarrowGemmPart over the whole (so the kernel took the loop).
TEST(NarrowGemm, MatmulKernelWithAndWithoutTheLoops) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find("matmul").value();
  WithTimeout([&] {
    for (Case c : Cases()) {
      if (c.alpha != 1.0f) continue;
      const Operands o(c);
      HostTensor a = Float32(c.transpose_a ? Shape{c.k, c.m} : Shape{c.m, c.k}, o.a);
      HostTensor b = Float32(c.transpose_b ? Shape{c.n, c.k} : Shape{c.k, c.n}, o.b);
      HostTensor third = c.mask ? Float32({c.m, c.n}, o.y) : Float32({c.n}, o.bias);
      for (int threads : {1, 2})
        for (bool narrow : {true, false}) {
          Attrs attrs{{"transpose_a", c.transpose_a}, {"transpose_b", c.transpose_b}, {"fuse_bias", c.bias},
                      {"fuse_relu", c.relu}, {"fuse_relu_grad", c.mask}, {"narrow_gemm", narrow}};
          std::vector<TensorDesc> inputs{a.desc, b.desc};
          std::vector<TensorView> iv{a.view(), b.view()};
          if (c.bias || c.mask) {
            inputs.push_back(third.desc);
            iv.push_back(third.view());
          }
          InferContext ic{inputs, attrs, {}};
          ASSERT_TRUE(def->infer(ic).ok());
          auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{inputs, ic.outputs, attrs, threads});
          ASSERT_TRUE(kernel.ok()) << kernel.status().message();
          for (int repeat = 0; repeat < 2; ++repeat) {
            HostTensor out = HostTensor::Of({c.m, c.n}, DType::kFloat32, std::vector<double>(c.m * c.n, 1e30));
            std::vector<TensorView> ov{out.view()};
            KernelContext ctx{&iv, &ov, 0};
            ASSERT_TRUE(kernel.value()(ctx).ok());
            const std::vector<float> got = Floats(out);
            ExpectNear(c, o, got.data(), narrow ? "matmul, narrow loops" : "matmul, oneDNN");
            // m <= 8 rows of an untransposed A go to the GEMV first.
            const bool gemv = !c.transpose_a && c.m <= kGemvMaxRows && !c.mask;
            if (narrow && GemvAvailable() && !gemv) {
              std::vector<float> direct(c.m * c.n);
              const NarrowGemmArgs g = o.Args(c, direct.data());
              const NarrowGemmLoop loop = ChooseNarrowGemm(c.transpose_a, c.transpose_b, c.m, c.n, c.k);
              NarrowGemmPart(g, loop, 0, NarrowGemmExtent(g, loop));
              ASSERT_EQ(std::memcmp(direct.data(), got.data(), got.size() * sizeof(float)), 0)
                  << "threads " << threads << " " << Describe(c);
            }
          }
        }
    }
  });
}

// matmul_sgd_update (var = (1 - lr * weight_decay) * var - lr * grad_scale * op(a)·op(b)) with
// the loops on and off, against the reference in the loops' alpha/beta form.
TEST(NarrowGemm, MatmulSgdUpdateWithAndWithoutTheLoops) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find("matmul_sgd_update").value();
  const float lr = 0.1f, grad_scale = 0.5f, weight_decay = 0.01f;
  WithTimeout([&] {
    for (Case c : Cases()) {
      if (c.bias || c.mask || c.transpose_b) continue;  // the update's layouts: rows loop
      c.alpha = -lr * grad_scale;
      c.beta = 1.0f - lr * weight_decay;
      c.relu = false;
      const Operands o(c);
      HostTensor a = Float32(c.transpose_a ? Shape{c.k, c.m} : Shape{c.m, c.k}, o.a);
      HostTensor b = Float32({c.k, c.n}, o.b);
      HostTensor rate = Float32({1}, {lr});
      for (int threads : {1, 2})
        for (bool narrow : {true, false}) {
          HostTensor var = Float32({c.m, c.n}, o.c0);
          Attrs attrs{{"transpose_a", c.transpose_a}, {"grad_scale", double{grad_scale}},
                      {"weight_decay", double{weight_decay}}, {"narrow_gemm", narrow}};
          std::vector<TensorDesc> inputs{var.desc, a.desc, b.desc, rate.desc};
          std::vector<TensorView> iv{var.view(), a.view(), b.view(), rate.view()}, ov;
          InferContext ic{inputs, attrs, {}};
          ASSERT_TRUE(def->infer(ic).ok());
          auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{inputs, ic.outputs, attrs, threads});
          ASSERT_TRUE(kernel.ok()) << kernel.status().message();
          KernelContext ctx{&iv, &ov, 0};
          ASSERT_TRUE(kernel.value()(ctx).ok());
          const std::vector<float> got = Floats(var);
          ExpectNear(c, o, got.data(), narrow ? "matmul_sgd_update, narrow loops" : "matmul_sgd_update, oneDNN");
          if (narrow && GemvAvailable()) {
            std::vector<float> direct = o.c0;
            const NarrowGemmArgs g = o.Args(c, direct.data());
            const NarrowGemmLoop loop = ChooseNarrowGemm(c.transpose_a, false, c.m, c.n, c.k);
            NarrowGemmPart(g, loop, 0, NarrowGemmExtent(g, loop));
            ASSERT_EQ(std::memcmp(direct.data(), got.data(), got.size() * sizeof(float)), 0)
                << "threads " << threads << " " << Describe(c);
          }
        }
    }
  });
}

}  // namespace
}  // namespace actorflow::testing

// The GEMV loop (kernels/gemv.h) against a double reference, alone and through the matmul
// kernel (column blocks on 1 and 2 threads), and the matmul kernel with the GEMV turned off
// (attr gemv=false: oneDNN) against the same reference.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/gemv.h"
#include "kernels/testing/test_util.h"
#include "kernels/testing/with_timeout.h"

namespace actorflow::testing {
namespace {

struct Case {
  int64_t m, n, k;
  bool transpose_b, bias, relu;
};

struct Operands {
  std::vector<float> a, b, bias;
  Operands(const Case& c) : a(c.m * c.k), b(c.k * c.n), bias(c.n) {
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 37 % 101) / 50.0 - 1.0);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 53 % 97) / 48.0 - 1.0);
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>((i % 13) / 6.0 - 1.0);
  }
  // The double result of row i, column j, and the size of its terms (float32 rounding scales with it).
  double Want(const Case& c, int64_t i, int64_t j, double* magnitude) const {
    double acc = 0, size = 0;
    for (int64_t p = 0; p < c.k; ++p) {
      const double term = static_cast<double>(a[i * c.k + p]) * b[c.transpose_b ? j * c.k + p : p * c.n + j];
      acc += term;
      size += std::abs(term);
    }
    if (c.bias) {
      acc += bias[j];
      size += std::abs(bias[j]);
    }
    *magnitude = size;
    return c.relu && acc < 0 ? 0.0 : acc;
  }
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  // n: below one vector, not a multiple of 8 or 16, the batch-1 MLP's 512 and 10; k: below one
  // vector, a masked tail (37, 801), the MLP's 784 (49 vectors) and 512.
  for (int64_t m : {1, 3, 8})
    for (int64_t n : {1, 10, 13, 200, 512})
      for (int64_t k : {5, 37, 512, 784, 801})
        for (bool tb : {false, true}) cases.push_back({m, n, k, tb, (n + k) % 2 == 0, n % 3 != 1});
  for (bool tb : {false, true}) cases.push_back({1, 512, 784, tb, true, true});
  for (Case& c : cases)
    if (c.relu) c.bias = true;  // relu needs the bias
  return cases;
}

void ExpectNear(const Case& c, const Operands& o, const std::vector<float>& got, const char* what) {
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double magnitude;
      const double want = o.Want(c, i, j, &magnitude);
      ASSERT_NEAR(got[i * c.n + j], want, 1e-6 * (1 + magnitude))
          << what << ": m " << c.m << " n " << c.n << " k " << c.k << " transpose_b " << c.transpose_b << " bias "
          << c.bias << " relu " << c.relu << " at (" << i << ", " << j << ")";
    }
}

TEST(Gemv, ColumnRangesEqualTheReferenceAndWriteOnlyTheirColumns) {
  if (!GemvAvailable()) {
    // Without AVX-512 the matmul kernel never calls it (checked in the next test).
    EXPECT_FALSE(__builtin_cpu_supports("avx512f"));
    return;
  }
  for (const Case& c : Cases()) {
    const Operands o(c);
    std::vector<float> out(c.m * c.n, std::numeric_limits<float>::quiet_NaN());
    const GemvArgs args{c.transpose_b, c.m, c.n, c.k, o.a.data(), o.b.data(), c.bias ? o.bias.data() : nullptr,
                        c.relu, out.data()};
    // Uneven ranges: each must write its columns and no other.
    const int64_t cut1 = c.n / 3, cut2 = std::min(c.n, cut1 + 9);
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, cut1}, {cut1, cut2}, {cut2, c.n}}) {
      GemvColumns(args, begin, end);
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = end; j < c.n; ++j)
          ASSERT_TRUE(std::isnan(out[i * c.n + j])) << "column " << j << " written by range [" << begin << ", " << end << ")";
    }
    ExpectNear(c, o, out, "GemvColumns");
  }
}

TEST(Gemv, ColumnStepCoversTheOutputInWholeVectors) {
  for (int64_t n : {1, 10, 16, 100, 512, 515})
    for (int blocks : {1, 2, 3}) {
      const int64_t step = GemvColumnStep(n, blocks);
      EXPECT_GE(step * blocks, n);
      EXPECT_TRUE(step == n || step % 16 == 0) << n << " " << blocks;
      EXPECT_LE((n + step - 1) / step, blocks);
    }
}

// The relu keeps NaN as NanRelu does (np.maximum(x, 0)); negative sums become +0. Checked
// through the matmul kernel (the GEMV where the CPU has AVX-512, oneDNN's path otherwise) and,
// where the CPU has it, on GemvColumns itself.
TEST(Gemv, ReluKeepsNan) {
  RegisterAllOps();
  for (bool tb : {false, true}) {
    const int64_t n = 16, k = 3;
    std::vector<float> a = {1, 1, 1}, b(n * k, 0.f), bias(n, 0.f);
    auto set = [&](int64_t j, float v) { b[tb ? j * k : j] = v; };  // row 0 of op(b), column j
    set(0, std::numeric_limits<float>::quiet_NaN());
    set(1, -2.f);
    set(4, 5.f);
    auto check = [&](const std::function<float(int64_t)>& out, const char* path) {
      EXPECT_TRUE(std::isnan(out(0))) << path << " transpose_b " << tb;
      EXPECT_EQ(out(1), 0.f) << path;
      EXPECT_FALSE(std::signbit(out(1))) << path;
      EXPECT_EQ(out(4), 5.f) << path;
      EXPECT_EQ(out(5), 0.f) << path;
    };
    HostTensor got = Run1("matmul",
                          {HostTensor::Of({1, k}, DType::kFloat32, std::vector<double>(a.begin(), a.end())),
                           HostTensor::Of(tb ? Shape{n, k} : Shape{k, n}, DType::kFloat32,
                                          std::vector<double>(b.begin(), b.end())),
                           HostTensor::Of({n}, DType::kFloat32, std::vector<double>(bias.begin(), bias.end()))},
                          Attrs{{"transpose_b", tb}, {"fuse_bias", true}, {"fuse_relu", true}});
    check([&](int64_t j) { return static_cast<float>(got.at(j)); }, "matmul kernel");
    if (GemvAvailable()) {
      std::vector<float> out(n, 7.f);
      GemvColumns(GemvArgs{tb, 1, n, k, a.data(), b.data(), bias.data(), true, out.data()}, 0, n);
      check([&](int64_t j) { return out[j]; }, "GemvColumns");
    }
  }
}

// Through the matmul kernel: GEMV on (1 and 2 threads: column blocks on the kernels' pool) and
// off (oneDNN), every case against the reference; with the GEMV on, bit-equal to GemvColumns
// (so the kernel did take the GEMV where the CPU has it).
TEST(Gemv, MatmulKernelWithAndWithoutTheGemv) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find("matmul").value();
  WithTimeout([&] {
    for (const Case& c : Cases())
      for (int threads : {1, 2})
        for (bool gemv : {true, false}) {
          const Operands o(c);
          HostTensor a = HostTensor::Of({c.m, c.k}, DType::kFloat32, std::vector<double>(o.a.begin(), o.a.end()));
          HostTensor b = HostTensor::Of(c.transpose_b ? Shape{c.n, c.k} : Shape{c.k, c.n}, DType::kFloat32,
                                        std::vector<double>(o.b.begin(), o.b.end()));
          HostTensor bias = HostTensor::Of({c.n}, DType::kFloat32, std::vector<double>(o.bias.begin(), o.bias.end()));
          Attrs attrs{{"transpose_b", c.transpose_b}, {"fuse_bias", c.bias}, {"fuse_relu", c.relu}, {"gemv", gemv}};
          std::vector<TensorDesc> inputs{a.desc, b.desc};
          std::vector<TensorView> iv{a.view(), b.view()};
          if (c.bias) {
            inputs.push_back(bias.desc);
            iv.push_back(bias.view());
          }
          InferContext ic{inputs, attrs, {}};
          ASSERT_TRUE(def->infer(ic).ok());
          auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{inputs, ic.outputs, attrs, threads});
          ASSERT_TRUE(kernel.ok()) << kernel.status().message();
          for (int repeat = 0; repeat < 3; ++repeat) {
            HostTensor out = HostTensor::Of({c.m, c.n}, DType::kFloat32, std::vector<double>(c.m * c.n, 1e30));
            std::vector<TensorView> ov{out.view()};
            KernelContext ctx{&iv, &ov, 0};
            ASSERT_TRUE(kernel.value()(ctx).ok());
            std::vector<float> got(c.m * c.n);
            std::memcpy(got.data(), out.bytes.data(), got.size() * sizeof(float));
            ExpectNear(c, o, got, gemv ? "matmul, gemv" : "matmul, oneDNN");
            if (gemv && GemvAvailable()) {
              std::vector<float> direct(c.m * c.n);
              GemvColumns(GemvArgs{c.transpose_b, c.m, c.n, c.k, o.a.data(), o.b.data(),
                                   c.bias ? o.bias.data() : nullptr, c.relu, direct.data()},
                          0, c.n);
              ASSERT_EQ(std::memcmp(direct.data(), got.data(), got.size() * sizeof(float)), 0)
                  << "threads " << threads << " m " << c.m << " n " << c.n << " k " << c.k;
            }
          }
        }
  });
}

}  // namespace
}  // namespace actorflow::testing

// One line per op: forward against a naive reference, gradient against central differences
// (float64), optimizer updates against their formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/testing/eager_grad.h"

namespace actorflow {
namespace {

using testing::GradientError;
using testing::HostTensor;
using testing::RunOp;

std::vector<double> Ramp(int64_t n, double scale = 0.1, double offset = -0.3) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<double>(i) * 1.7 + 0.4) * scale * 10 + offset * (i % 3 == 0);
  return v;
}
std::vector<double> Positive(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.5 + 0.1 * static_cast<double>(i % 7);
  return v;
}

HostTensor F64(const Shape& s, std::vector<double> v = {}) {
  if (v.empty()) v = Ramp(NumElements(s));
  return HostTensor::Of(s, DType::kFloat64, v);
}
HostTensor F32(const Shape& s, std::vector<double> v = {}) {
  if (v.empty()) v = Ramp(NumElements(s));
  return HostTensor::Of(s, DType::kFloat32, v);
}

double Grad(const std::string& type, const std::vector<HostTensor>& in, const Attrs& attrs, const std::vector<int>& check) {
  auto err = GradientError(type, in, attrs, check);
  EXPECT_TRUE(err.ok()) << type << ": " << err.status().ToString();
  return err.ok() ? err.value() : 1e9;
}

constexpr double kTol = 1e-6;

TEST(Kernels, MatmulForwardAllTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      int64_t m = 5, n = 7, k = 33;
      HostTensor a = F32(ta ? Shape{k, m} : Shape{m, k}), b = F32(tb ? Shape{n, k} : Shape{k, n});
      auto out = RunOp("matmul", {a, b}, Attrs{{"transpose_a", ta}, {"transpose_b", tb}});
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0;
          for (int64_t p = 0; p < k; ++p) ref += a.at(ta ? p * m + i : i * k + p) * b.at(tb ? j * k + p : p * n + j);
          EXPECT_NEAR(out.value()[0].at(i * n + j), ref, 1e-4) << ta << tb;
        }
    }
}

TEST(Kernels, MatmulShapeErrorNamesDimensions) {
  auto out = RunOp("matmul", {F32({100, 784}), F32({512, 10})}, {});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("784 vs 512"), std::string::npos) << out.status().message();
}

TEST(Kernels, Gradients) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      EXPECT_LT(Grad("matmul", {F64(ta ? Shape{4, 3} : Shape{3, 4}), F64(tb ? Shape{5, 4} : Shape{4, 5})},
                     Attrs{{"transpose_a", ta}, {"transpose_b", tb}}, {0, 1}), kTol) << ta << tb;
  EXPECT_LT(Grad("add", {F64({3, 4}), F64({4})}, {}, {0, 1}), kTol);
  EXPECT_LT(Grad("sub", {F64({3, 1}), F64({3, 4})}, {}, {0, 1}), kTol);
  EXPECT_LT(Grad("mul", {F64({2, 3, 4}), F64({3, 1})}, {}, {0, 1}), kTol);
  EXPECT_LT(Grad("div", {F64({3, 4}), F64({3, 4}, Positive(12))}, {}, {0, 1}), kTol);
  EXPECT_LT(Grad("scalar_mul", {F64({5})}, Attrs{{"scalar", 2.5}}, {0}), kTol);
  EXPECT_LT(Grad("scalar_add", {F64({5})}, Attrs{{"scalar", 2.5}}, {0}), kTol);
  EXPECT_LT(Grad("add_n", {F64({6}), F64({6}), F64({6})}, {}, {0, 1, 2}), kTol);
  EXPECT_LT(Grad("relu", {F64({4, 5})}, {}, {0}), kTol);
  EXPECT_LT(Grad("sigmoid", {F64({4, 5})}, {}, {0}), kTol);
  EXPECT_LT(Grad("tanh", {F64({4, 5})}, {}, {0}), kTol);
  EXPECT_LT(Grad("gelu", {F64({4, 5})}, {}, {0}), kTol);
  EXPECT_LT(Grad("exp", {F64({4, 5})}, {}, {0}), kTol);
  EXPECT_LT(Grad("log", {F64({4, 5}, Positive(20))}, {}, {0}), kTol);
  EXPECT_LT(Grad("sqrt", {F64({4, 5}, Positive(20))}, {}, {0}), kTol);
  EXPECT_LT(Grad("square", {F64({4, 5})}, {}, {0}), kTol);
  EXPECT_LT(Grad("negative", {F64({4, 5})}, {}, {0}), kTol);
  EXPECT_LT(Grad("bias_add", {F64({3, 4}), F64({4})}, {}, {0, 1}), kTol);
  EXPECT_LT(Grad("bias_add", {F64({2, 3, 2, 2}), F64({3})}, Attrs{{"axis", int64_t{1}}}, {0, 1}), kTol);
  EXPECT_LT(Grad("reshape", {F64({2, 6})}, Attrs{{"shape", std::vector<int64_t>{3, -1}}}, {0}), kTol);
  EXPECT_LT(Grad("reduce_sum", {F64({2, 3, 4})}, Attrs{{"axis", std::vector<int64_t>{1}}}, {0}), kTol);
  EXPECT_LT(Grad("reduce_mean", {F64({2, 3, 4})}, Attrs{{"axis", std::vector<int64_t>{0, 2}}, {"keepdims", true}}, {0}), kTol);
  EXPECT_LT(Grad("softmax", {F64({3, 5})}, {}, {0}), kTol);
  EXPECT_LT(Grad("log_softmax", {F64({3, 5})}, {}, {0}), kTol);
  EXPECT_LT(Grad("sparse_softmax_cross_entropy", {HostTensor::Of({3}, DType::kInt32, {0, 4, 2}), F64({3, 5})}, {}, {1}), kTol);
  EXPECT_LT(Grad("zero_pad2d", {F64({1, 2, 3, 3})}, Attrs{{"padding", std::vector<int64_t>{1, 2, 0, 1}}}, {0}), kTol);
  EXPECT_LT(Grad("reflection_pad2d", {F64({1, 2, 3, 3})}, Attrs{{"padding", int64_t{2}}}, {0}), kTol);
}

TEST(Kernels, ElementwiseForwardBroadcast) {
  HostTensor x = F32({2, 3}), y = F32({3});
  auto out = RunOp("div", {x, F32({3}, Positive(3))}, {});
  ASSERT_TRUE(out.ok());
  for (int64_t i = 0; i < 6; ++i) EXPECT_NEAR(out.value()[0].at(i), x.at(i) / Positive(3)[i % 3], 1e-6);
  auto sum = RunOp("add", {x, y}, {});
  for (int64_t i = 0; i < 6; ++i) EXPECT_NEAR(sum.value()[0].at(i), x.at(i) + y.at(i % 3), 1e-6);
  auto bad = RunOp("add", {F32({2, 3}), F32({4})}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cannot be broadcast"), std::string::npos);
}

TEST(Kernels, UnaryForward) {
  HostTensor x = F32({10});
  auto relu = RunOp("relu", {x}, {});
  auto sig = RunOp("sigmoid", {x}, {});
  auto gelu = RunOp("gelu", {x}, {});
  for (int64_t i = 0; i < 10; ++i) {
    double v = x.at(i);
    EXPECT_NEAR(relu.value()[0].at(i), std::max(0.0, v), 1e-6);
    EXPECT_NEAR(sig.value()[0].at(i), 1 / (1 + std::exp(-v)), 1e-6);
    EXPECT_NEAR(gelu.value()[0].at(i), 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-6);
  }
}

TEST(Kernels, SparseCrossEntropyForward) {
  HostTensor logits = F32({2, 3}, {1, 2, 3, 0, 0, 5});
  auto out = RunOp("sparse_softmax_cross_entropy", {HostTensor::Of({2}, DType::kInt32, {2, 0}), logits}, {});
  ASSERT_TRUE(out.ok());
  double l0 = -(3 - std::log(std::exp(1) + std::exp(2) + std::exp(3)));
  double l1 = -(0 - std::log(2 + std::exp(5)));
  EXPECT_NEAR(out.value()[0].at(0), l0, 1e-5);
  EXPECT_NEAR(out.value()[0].at(1), l1, 1e-5);
  auto bad = RunOp("sparse_softmax_cross_entropy", {HostTensor::Of({2}, DType::kInt32, {2, 7}), logits}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("label 7"), std::string::npos);
}

TEST(Kernels, PadForwardMatchesNumpyPad) {
  // x = arange(9).reshape(1,1,3,3); reflection pad 1: first row is [4,3,4,5,4].
  std::vector<double> v(9);
  for (int i = 0; i < 9; ++i) v[i] = i;
  auto refl = RunOp("reflection_pad2d", {F32({1, 1, 3, 3}, v)}, Attrs{{"padding", int64_t{1}}});
  ASSERT_TRUE(refl.ok());
  std::vector<double> row0 = {4, 3, 4, 5, 4};
  for (int j = 0; j < 5; ++j) EXPECT_EQ(refl.value()[0].at(j), row0[j]);
  auto zero = RunOp("zero_pad2d", {F32({1, 1, 3, 3}, v)}, Attrs{{"padding", std::vector<int64_t>{1, 0, 2, 0}}});
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero.value()[0].desc.shape, (Shape{1, 1, 5, 4}));
  EXPECT_EQ(zero.value()[0].at(2 * 4 + 1), 0.0);   // row 2 = input row 0: [0, 0, 1, 2]
  EXPECT_EQ(zero.value()[0].at(2 * 4 + 2), 1.0);
  auto bad = RunOp("zero_pad2d", {F32({1, 1, 3, 3}, v)}, Attrs{{"padding", std::vector<int64_t>{1, 2, 3}}});
  EXPECT_FALSE(bad.ok());
}

TEST(Kernels, ReshapeErrors) {
  auto bad = RunOp("reshape", {F32({2, 6})}, Attrs{{"shape", std::vector<int64_t>{5, -1}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cannot reshape"), std::string::npos);
}

TEST(Kernels, OptimizerUpdatesMatchFormulas) {
  HostTensor w = F32({4}, {1, 2, 3, 4}), g = F32({4}, {0.5, -1, 0, 2}), lr = F32({1}, {0.1});
  // SGD with weight decay.
  {
    std::vector<HostTensor> in = {w, g, lr};
    std::vector<TensorView> views;
    for (auto& t : in) views.push_back(t.view());
    InferContext ic{{w.desc, g.desc, lr.desc}, Attrs{{"weight_decay", 0.01}}, {}};
    const OpDef* def = OpRegistry::Global().Find("sgd_update").value();
    ASSERT_TRUE(def->infer(ic).ok());
    auto k = def->make_cpu_kernel(KernelInit{ic.inputs, {}, ic.attrs, 1});
    std::vector<TensorView> outs;
    KernelContext ctx{&views, &outs, 0};
    ASSERT_TRUE(k.value()(ctx).ok());
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(in[0].at(i), w.at(i) - 0.1 * (g.at(i) + 0.01 * w.at(i)), 1e-6);
  }
  // Adam, two steps.
  {
    std::vector<HostTensor> in = {w, g, F32({4}, {0, 0, 0, 0}), F32({4}, {0, 0, 0, 0}), lr};
    std::vector<TensorView> views;
    for (auto& t : in) views.push_back(t.view());
    const OpDef* def = OpRegistry::Global().Find("adam_update").value();
    Attrs attrs{{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-8}};
    auto k = def->make_cpu_kernel(KernelInit{{w.desc, g.desc, w.desc, w.desc, lr.desc}, {}, attrs, 1});
    std::vector<TensorView> outs;
    KernelContext ctx{&views, &outs, 0};
    ASSERT_TRUE(k.value()(ctx).ok());
    ASSERT_TRUE(k.value()(ctx).ok());
    for (int i = 0; i < 4; ++i) {
      double wi = w.at(i), m = 0, v = 0;
      for (int s = 0; s < 2; ++s) {
        m = 0.9 * m + 0.1 * g.at(i);
        v = 0.999 * v + 0.001 * g.at(i) * g.at(i);
        wi -= 0.1 * m / (std::sqrt(v) + 1e-8);
      }
      EXPECT_NEAR(in[0].at(i), wi, 1e-5);
    }
  }
}

}  // namespace
}  // namespace actorflow

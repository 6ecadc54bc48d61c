#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

// Runs an in-place update op `steps` times over `state` (var first, lr last).
void Apply(const std::string& type, std::vector<HostTensor>& state, const Attrs& attrs, int steps) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find(type).value();
  InferContext ic;
  for (auto& t : state) ic.inputs.push_back(t.desc);
  ic.attrs = attrs;
  ASSERT_TRUE(def->infer(ic).ok()) << type;
  EXPECT_TRUE(ic.outputs.empty());
  auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, {}, attrs, 1});
  ASSERT_TRUE(kernel.ok());
  std::vector<TensorView> views, outs;
  for (auto& t : state) views.push_back(t.view());
  KernelContext ctx{&views, &outs, 0};
  for (int s = 0; s < steps; ++s) ASSERT_TRUE(kernel.value()(ctx).ok());
}

const std::vector<double> kW = {1, 2, -3, 4}, kG = {0.5, -1, 0, 2};
constexpr double kLr = 0.1;

TEST(Optimizer, SgdMomentumRmsprop) {
  std::vector<HostTensor> sgd = {F32({4}, kW), F32({4}, kG), F32({1}, {kLr})};
  Apply("sgd_update", sgd, Attrs{{"weight_decay", 0.01}}, 2);
  std::vector<HostTensor> mom = {F32({4}, kW), F32({4}, kG), F32({4}, {0, 0, 0, 0}), F32({1}, {kLr})};
  Apply("momentum_update", mom, Attrs{{"beta", 0.9}}, 2);
  std::vector<HostTensor> rms = {F32({4}, kW), F32({4}, kG), F32({4}, {0, 0, 0, 0}), F32({1}, {kLr})};
  Apply("rmsprop_update", rms, Attrs{{"decay_rate", 0.9}, {"epsilon", 1e-8}}, 2);
  for (int i = 0; i < 4; ++i) {
    double w = kW[i], g = kG[i];
    double ws = w;
    for (int s = 0; s < 2; ++s) ws -= kLr * (g + 0.01 * ws);
    EXPECT_NEAR(sgd[0].at(i), ws, 1e-5);
    double m = 0, wm = w;
    for (int s = 0; s < 2; ++s) {
      m = 0.9 * m - kLr * g;
      wm += m;
    }
    EXPECT_NEAR(mom[0].at(i), wm, 1e-5);
    EXPECT_NEAR(mom[2].at(i), m, 1e-5);
    double ms = 0, wr = w;
    for (int s = 0; s < 2; ++s) {
      ms = 0.9 * ms + 0.1 * g * g;
      wr -= kLr * g / (std::sqrt(ms) + 1e-8);
    }
    EXPECT_NEAR(rms[0].at(i), wr, 1e-5);
  }
  std::vector<HostTensor> bad = {F32({4}, kW), F32({3}), F32({1}, {kLr})};
  InferContext ic{{bad[0].desc, bad[1].desc, bad[2].desc}, {}, {}};
  Status s = OpRegistry::Global().Find("sgd_update").value()->infer(ic);
  EXPECT_NE(s.message().find("grad is float32(3,)"), std::string::npos) << s.message();
}

// The fused SGD of a matmul gradient equals matmul then sgd_update, for every transpose pair
// and with weight decay (the GEMM's alpha/beta carry -lr * grad_scale and 1 - lr * weight_decay).
TEST(Optimizer, MatmulSgdUpdateEqualsMatmulThenSgd) {
  const int64_t m = 7, n = 5, k = 9;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      HostTensor a = F32(ta ? Shape{k, m} : Shape{m, k}, Ramp(m * k, 0.1));
      HostTensor b = F32(tb ? Shape{n, k} : Shape{k, n}, Ramp(k * n, 0.7));
      const Attrs hyper{{"weight_decay", 0.02}, {"grad_scale", 0.25}};
      Attrs fused_attrs = hyper;
      fused_attrs.Set("transpose_a", ta);
      fused_attrs.Set("transpose_b", tb);
      std::vector<HostTensor> fused = {F32({m, n}, Ramp(m * n, 1.3)), a, b, F32({1}, {kLr})};
      Apply("matmul_sgd_update", fused, fused_attrs, 2);
      HostTensor grad = Run1("matmul", {a, b}, Attrs{{"transpose_a", ta}, {"transpose_b", tb}});
      std::vector<HostTensor> plain = {F32({m, n}, Ramp(m * n, 1.3)), grad, F32({1}, {kLr})};
      Apply("sgd_update", plain, hyper, 2);
      for (int64_t i = 0; i < m * n; ++i)
        ASSERT_NEAR(fused[0].at(i), plain[0].at(i), 1e-5) << "ta=" << ta << " tb=" << tb << " element " << i;
    }
  EXPECT_NE(ErrorOf("matmul_sgd_update", {F32({3, 4}), F32({3, 2}), F32({2, 5}), F32({1}, {kLr})})
                .find("op(a) · op(b) has shape (3, 5) but var has shape (3, 4)"),
            std::string::npos)
      << ErrorOf("matmul_sgd_update", {F32({3, 4}), F32({3, 2}), F32({2, 5}), F32({1}, {kLr})});
}

TEST(Optimizer, AdamAdamwLamb) {
  for (bool decoupled : {false, true}) {
    std::vector<HostTensor> st = {F32({4}, kW), F32({4}, kG), F32({4}, {0, 0, 0, 0}), F32({4}, {0, 0, 0, 0}), F32({1}, {kLr})};
    Apply("adam_update", st, Attrs{{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-8}, {"weight_decay", 0.1},
                                   {"decoupled_weight_decay", decoupled}}, 2);
    for (int i = 0; i < 4; ++i) {
      double w = kW[i], m = 0, v = 0;
      for (int s = 0; s < 2; ++s) {
        double g = decoupled ? kG[i] : kG[i] + 0.1 * w;
        m = 0.9 * m + 0.1 * g;
        v = 0.999 * v + 0.001 * g * g;
        w -= kLr * (m / (std::sqrt(v) + 1e-8) + (decoupled ? 0.1 * w : 0.0));
      }
      EXPECT_NEAR(st[0].at(i), w, 1e-5) << decoupled;
    }
  }
  // lr = [lr, c1, c2]: PyTorch's bias-corrected Adam/AdamW, one step per call with its own
  // corrections (eps added to sqrt(v^), AdamW's decay lr * wd * var).
  for (bool decoupled : {false, true}) {
    std::vector<HostTensor> st = {F32({4}, kW), F32({4}, {1e-7, -1, 0, 2}), F32({4}, {0, 0, 0, 0}),
                                  F32({4}, {0, 0, 0, 0}), F32({3}, {kLr, 1 / (1 - 0.9), 1 / (1 - 0.999)})};
    Apply("adam_update", st, Attrs{{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-8}, {"weight_decay", 0.1},
                                   {"decoupled_weight_decay", decoupled}}, 1);
    for (int i = 0; i < 4; ++i) {
      double w = kW[i], g0 = i == 0 ? 1e-7 : st[1].at(i);
      double g = decoupled ? g0 : g0 + 0.1 * w;
      double m_hat = 0.1 * g / (1 - 0.9), v_hat = 0.001 * g * g / (1 - 0.999);
      double expected = (decoupled ? w * (1 - kLr * 0.1) : w) - kLr * m_hat / (std::sqrt(v_hat) + 1e-8);
      EXPECT_NEAR(st[0].at(i), expected, 1e-6) << decoupled << " " << i;
    }
  }
  std::vector<HostTensor> st = {F32({4}, kW), F32({4}, kG), F32({4}, {0, 0, 0, 0}), F32({4}, {0, 0, 0, 0}), F32({1}, {kLr})};
  Apply("lamb_update", st, Attrs{{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-6}, {"weight_decay", 0.01}}, 1);
  std::vector<double> r(4);
  double wn = 0, rn = 0;
  for (int i = 0; i < 4; ++i) {
    double m = 0.1 * kG[i], v = 0.001 * kG[i] * kG[i];
    r[i] = m / (std::sqrt(v) + 1e-6) + 0.01 * kW[i];
    wn += kW[i] * kW[i];
    rn += r[i] * r[i];
  }
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(st[0].at(i), kW[i] - kLr * std::sqrt(wn / rn) * r[i], 1e-5);
}

}  // namespace
}  // namespace actorflow::testing

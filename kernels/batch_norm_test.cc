#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

TEST(BatchNorm, InferenceAndTrainingForward) {
  Shape xs = {2, 3, 2, 2};
  HostTensor x = F32(xs), gamma = F32({3}, {1, 0.5, 2}), beta = F32({3}, {0, 1, -1});
  HostTensor mm = F32({3}, {0.1, -0.2, 0.3}), mv = F32({3}, {1, 2, 0.5});
  Attrs infer{{"epsilon", 1e-3}, {"training", false}};
  HostTensor y = Run1("batch_normalization", {x, gamma, beta, mm, mv}, infer);
  for (int64_t i = 0; i < 24; ++i) {
    int64_t c = (i / 4) % 3;
    EXPECT_NEAR(y.at(i), (x.at(i) - mm.at(c)) / std::sqrt(mv.at(c) + 1e-3) * gamma.at(c) + beta.at(c), 1e-5);
  }
  // Training: batch statistics, and the moving statistics (inputs 3, 4) updated in place.
  std::vector<HostTensor> in = {x, gamma, beta, mm, mv};
  Attrs train{{"epsilon", 1e-3}, {"training", true}, {"momentum", 0.9}};
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find("batch_normalization").value();
  EXPECT_EQ(def->mutable_inputs, (std::vector<int>{3, 4}));
  InferContext ic;
  for (auto& t : in) ic.inputs.push_back(t.desc);
  ic.attrs = train;
  ASSERT_TRUE(def->infer(ic).ok());
  auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, ic.outputs, train, 1});
  ASSERT_TRUE(kernel.ok());
  std::vector<HostTensor> out;
  for (auto& d : ic.outputs) out.push_back(HostTensor::Of(d.shape, d.dtype, {}));
  std::vector<TensorView> iv, ov;
  for (auto& t : in) iv.push_back(t.view());
  for (auto& t : out) ov.push_back(t.view());
  KernelContext ctx{&iv, &ov, 0};
  ASSERT_TRUE(kernel.value()(ctx).ok());
  for (int64_t c = 0; c < 3; ++c) {
    double sum = 0, sq = 0;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t p = 0; p < 4; ++p) sum += x.at((n * 3 + c) * 4 + p);
    double mean = sum / 8;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t p = 0; p < 4; ++p) sq += std::pow(x.at((n * 3 + c) * 4 + p) - mean, 2);
    double var = sq / 8;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t p = 0; p < 4; ++p) {
        int64_t i = (n * 3 + c) * 4 + p;
        EXPECT_NEAR(out[0].at(i), (x.at(i) - mean) / std::sqrt(var + 1e-3) * gamma.at(c) + beta.at(c), 1e-5);
      }
    EXPECT_NEAR(in[3].at(c), 0.9 * mm.at(c) + 0.1 * mean, 1e-6);
    EXPECT_NEAR(in[4].at(c), 0.9 * mv.at(c) + 0.1 * sq / 7, 1e-6);
  }
  EXPECT_NE(ErrorOf("batch_normalization", {x, F32({4}), beta, mm, mv}).find("gamma must be float32(3,)"), std::string::npos);
}

TEST(BatchNorm, Gradients) {
  for (bool training : {true, false}) {
    Attrs attrs{{"epsilon", 1e-3}, {"training", training}};
    std::vector<HostTensor> in = {F64({3, 2, 2, 2}), F64({2}, {1.5, 0.7}), F64({2}, {0.1, -0.2}), F64({2}, {0.05, -0.1}),
                                  F64({2}, {1.2, 0.8})};
    EXPECT_LT(Grad("batch_normalization", in, attrs, {0, 1, 2}, /*weighted_outputs=*/1), 1e-5) << training;
    std::vector<HostTensor> in2 = {F64({4, 3}), F64({3}, {1, 2, 0.5}), F64({3}), F64({3}), F64({3}, Positive(3))};
    EXPECT_LT(Grad("batch_normalization", in2, attrs, {0, 1, 2}, /*weighted_outputs=*/1), 1e-5) << training;
  }
}

TEST(Dropout, MaskStatisticsAndGradient) {
  HostTensor x = F32({4000}, Positive(4000));
  auto out = RunOp("dropout", {x}, Attrs{{"rate", 0.25}, {"seed", int64_t{7}}});
  ASSERT_TRUE(out.ok());
  int64_t kept = 0;
  for (int64_t i = 0; i < 4000; ++i) {
    double m = out.value()[1].at(i);
    ASSERT_TRUE(m == 0 || std::abs(m - 1 / 0.75) < 1e-6) << m;
    kept += m != 0;
    EXPECT_NEAR(out.value()[0].at(i), x.at(i) * m, 1e-6);
  }
  EXPECT_NEAR(kept / 4000.0, 0.75, 0.03);
  auto again = RunOp("dropout", {x}, Attrs{{"rate", 0.25}, {"seed", int64_t{7}}});
  EXPECT_EQ(again.value()[1].bytes, out.value()[1].bytes);  // same seed, same mask
  EXPECT_NE(ErrorOf("dropout", {x}, Attrs{{"rate", 1.0}}).find("rate must be in [0, 1)"), std::string::npos);
  EXPECT_LT(Grad("dropout", {F64({20})}, Attrs{{"rate", 0.5}, {"seed", int64_t{3}}}, {0}, /*weighted_outputs=*/1), kGradTol);
}

}  // namespace
}  // namespace actorflow::testing

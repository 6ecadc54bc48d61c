#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

TEST(Activation, ForwardMatchesFormulas) {
  struct Case {
    const char* type;
    double (*f)(double);
    bool positive;
  };
  std::vector<Case> cases = {
      {"relu", [](double v) { return std::max(0.0, v); }, false},
      {"sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }, false},
      {"tanh", [](double v) { return std::tanh(v); }, false},
      {"gelu", [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, false},
      {"exp", [](double v) { return std::exp(v); }, false},
      {"log", [](double v) { return std::log(v); }, true},
      {"sqrt", [](double v) { return std::sqrt(v); }, true},
      {"square", [](double v) { return v * v; }, false},
      {"negative", [](double v) { return -v; }, false},
  };
  for (const Case& c : cases)
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      HostTensor x = HostTensor::Of({3, 7}, dtype, c.positive ? Positive(21) : Ramp(21));
      HostTensor y = Run1(c.type, {x});
      for (int64_t i = 0; i < 21; ++i) EXPECT_NEAR(y.at(i), c.f(x.at(i)), 1e-6) << c.type;
    }
  EXPECT_NE(ErrorOf("relu", {I32({2}, {1, 2})}).find("float32 or float64"), std::string::npos);
}

TEST(Activation, Gradients) {
  EXPECT_LT(Grad("relu", {F64({4, 5})}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("sigmoid", {F64({4, 5})}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("tanh", {F64({4, 5})}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("gelu", {F64({4, 5})}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("exp", {F64({4, 5})}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("log", {F64({4, 5}, Positive(20))}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("sqrt", {F64({4, 5}, Positive(20))}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("square", {F64({4, 5})}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("negative", {F64({4, 5})}, {}, {0}), kGradTol);
}

}  // namespace
}  // namespace actorflow::testing

#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

TEST(MathOps, PointwiseForward) {
  HostTensor x = F64({2, 3}, {-2, -0.5, 0, 0.5, 1.5, 3});
  HostTensor pow = Run1("scalar_pow", {x}, Attrs{{"exponent", 3.0}});
  HostTensor abs = Run1("abs", {x});
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_DOUBLE_EQ(pow.at(i), std::pow(x.at(i), 3));
    EXPECT_DOUBLE_EQ(abs.at(i), std::abs(x.at(i)));
  }
  EXPECT_NE(ErrorOf("scalar_pow", {x}).find("exponent"), std::string::npos);
  EXPECT_NE(ErrorOf("abs", {I32({2}, {1, 2})}).find("float32 or float64"), std::string::npos);
}

TEST(MathOps, PointwiseGradients) {
  EXPECT_LT(Grad("scalar_pow", {F64({4, 5}, Positive(20))}, Attrs{{"exponent", 2.5}}, {0}), kGradTol);
  EXPECT_LT(Grad("scalar_pow", {F64({4, 5})}, Attrs{{"exponent", 3.0}}, {0}), kGradTol);
  // Ramp values avoid the kink at 0 (finite differences are meaningless there).
  EXPECT_LT(Grad("abs", {F64({4, 5})}, {}, {0}), kGradTol);
}

TEST(MathOps, ComparisonsBroadcastToInt8) {
  HostTensor x = F64({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor y = F64({3}, {2, 2, 7});
  struct Case {
    const char* type;
    std::vector<double> want;
  };
  for (const Case& c : std::vector<Case>{{"equal", {0, 1, 0, 0, 0, 0}},
                                         {"not_equal", {1, 0, 1, 1, 1, 1}},
                                         {"less", {1, 0, 1, 0, 0, 1}},
                                         {"less_equal", {1, 1, 1, 0, 0, 1}},
                                         {"greater", {0, 0, 0, 1, 1, 0}},
                                         {"greater_equal", {0, 1, 0, 1, 1, 0}}}) {
    HostTensor z = Run1(c.type, {x, y});
    EXPECT_EQ(z.desc, (TensorDesc{{2, 3}, DType::kInt8})) << c.type;
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(z.at(i), c.want[i]) << c.type << " [" << i << "]";
  }
  HostTensor labels = HostTensor::Of({4}, DType::kInt64, {0, 3, 2, 3});
  HostTensor three = HostTensor::Of({1}, DType::kInt64, {3});
  HostTensor eq = Run1("equal", {labels, three});
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(eq.at(i), labels.at(i) == 3 ? 1 : 0);
  EXPECT_NE(ErrorOf("less", {x, I32({3}, {1, 2, 3})}).find("int32"), std::string::npos);
  EXPECT_NE(ErrorOf("less", {x, F64({4})}).find("cannot be broadcast"), std::string::npos);
}

}  // namespace
}  // namespace actorflow::testing

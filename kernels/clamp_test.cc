#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

TEST(Clamp, ForwardBoundsAndErrors) {
  HostTensor x = F32({6}, {-7.0, -0.5, 0.0, 3.0, 6.0, 9.0});
  HostTensor relu6 = Run1("clamp", {x}, Attrs{{"min", 0.0}, {"max", 6.0}});
  std::vector<double> want = {0, 0, 0, 3, 6, 6};
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(relu6.at(i), want[i]);
  HostTensor below = Run1("clamp", {F64({3}, {-2, 1, 5})}, Attrs{{"max", 1.5}});  // only an upper bound
  EXPECT_EQ(below.at(0), -2);
  EXPECT_EQ(below.at(2), 1.5);
  EXPECT_NE(ErrorOf("clamp", {x}, Attrs{{"min", 2.0}, {"max", 1.0}}).find("must not exceed"), std::string::npos);
  EXPECT_NE(ErrorOf("clamp", {I32({2}, {1, 2})}).find("float32 or float64"), std::string::npos);
}

TEST(Clamp, GradientInsideAndAtTheBounds) {
  // Central differences away from the bounds.
  EXPECT_LT(Grad("clamp", {F64({4, 5})}, Attrs{{"min", -0.55}, {"max", 0.45}}, {0}), kGradTol);
  HostTensor x = F32({4}, {0.0, 2.0, 6.0, 7.0}), dy = F32({4}, {1, 1, 1, 1});
  HostTensor inclusive = Run1("clamp_grad", {x, dy}, Attrs{{"min", 0.0}, {"max", 6.0}});
  HostTensor exclusive = Run1("clamp_grad", {x, dy}, Attrs{{"min", 0.0}, {"max", 6.0}, {"inclusive", false}});
  std::vector<double> want_inclusive = {1, 1, 1, 0}, want_exclusive = {0, 1, 0, 0};
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(inclusive.at(i), want_inclusive[i]) << i;
    EXPECT_EQ(exclusive.at(i), want_exclusive[i]) << i;
  }
}

}  // namespace
}  // namespace actorflow::testing

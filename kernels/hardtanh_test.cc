#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

TEST(Hardtanh, ForwardAndErrors) {
  HostTensor x = F32({6}, {-7.0, -0.5, 0.0, 3.0, 6.0, 9.0});
  HostTensor relu6 = Run1("hardtanh", {x}, Attrs{{"min_val", 0.0}, {"max_val", 6.0}});
  std::vector<double> want = {0, 0, 0, 3, 6, 6};
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(relu6.at(i), want[i]);
  HostTensor unit = Run1("hardtanh", {F64({3}, {-2, 0.5, 5})});  // defaults [-1, 1]
  EXPECT_EQ(unit.at(0), -1);
  EXPECT_EQ(unit.at(1), 0.5);
  EXPECT_EQ(unit.at(2), 1);
  EXPECT_NE(ErrorOf("hardtanh", {x}, Attrs{{"min_val", 2.0}, {"max_val", 2.0}}).find("must be below"), std::string::npos);
  EXPECT_NE(ErrorOf("hardtanh", {I32({2}, {1, 2})}).find("float32 or float64"), std::string::npos);
}

TEST(Hardtanh, GradientInsideAndZeroAtTheBounds) {
  EXPECT_LT(Grad("hardtanh", {F64({4, 5})}, Attrs{{"min_val", -0.55}, {"max_val", 0.45}}, {0}), kGradTol);
  HostTensor x = F32({4}, {0.0, 2.0, 6.0, 7.0}), dy = F32({4}, {1, 1, 1, 1});
  HostTensor dx = Run1("hardtanh_grad", {x, dy}, Attrs{{"min_val", 0.0}, {"max_val", 6.0}});
  std::vector<double> want = {0, 1, 0, 0};  // PyTorch's relu6: 0 at x == 0 and x == 6
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(dx.at(i), want[i]) << i;
}

}  // namespace
}  // namespace actorflow::testing

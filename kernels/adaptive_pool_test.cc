#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

TEST(AdaptiveAvgPool, UnevenWindowsLikePyTorch) {
  // H = 5 into 3 rows: windows [0,2), [1,4), [3,5); W = 3 into 2 columns: [0,2), [1,3).
  std::vector<double> v(15);
  for (int i = 0; i < 15; ++i) v[i] = i;
  HostTensor y = Run1("adaptive_avg_pool2d", {F64({1, 1, 5, 3}, v)}, Attrs{{"output_size", std::vector<int64_t>{3, 2}}});
  ASSERT_EQ(y.desc.shape, (Shape{1, 1, 3, 2}));
  auto mean = [&](int r0, int r1, int c0, int c1) {
    double s = 0;
    for (int r = r0; r < r1; ++r)
      for (int c = c0; c < c1; ++c) s += v[r * 3 + c];
    return s / ((r1 - r0) * (c1 - c0));
  };
  std::vector<double> want = {mean(0, 2, 0, 2), mean(0, 2, 1, 3), mean(1, 4, 0, 2), mean(1, 4, 1, 3), mean(3, 5, 0, 2), mean(3, 5, 1, 3)};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y.at(i), want[i], 1e-12) << i;
  EXPECT_NE(ErrorOf("adaptive_avg_pool2d", {F64({2, 3})}, Attrs{{"output_size", int64_t{1}}}).find("rank 4"), std::string::npos);
}

TEST(AdaptiveAvgPool, Gradient) {
  EXPECT_LT(Grad("adaptive_avg_pool2d", {F64({2, 3, 7, 5})}, Attrs{{"output_size", std::vector<int64_t>{3, 2}}}, {0}), kGradTol);
}

}  // namespace
}  // namespace actorflow::testing

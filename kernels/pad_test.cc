#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

TEST(Pad, ForwardMatchesNumpyPad) {
  // x = arange(9).reshape(1,1,3,3); np.pad(x, 1, mode="reflect")[0] = [4,3,4,5,4].
  std::vector<double> v(9);
  for (int i = 0; i < 9; ++i) v[i] = i;
  HostTensor refl = Run1("reflection_pad2d", {F32({1, 1, 3, 3}, v)}, Attrs{{"padding", int64_t{1}}});
  std::vector<double> row0 = {4, 3, 4, 5, 4};
  for (int j = 0; j < 5; ++j) EXPECT_EQ(refl.at(j), row0[j]);
  EXPECT_EQ(refl.at(4 * 5 + 4), 4);  // bottom-right corner mirrors (1, 1)
  // padding [left=1, right=0, top=2, bottom=0]
  HostTensor zero = Run1("zero_pad2d", {F32({1, 1, 3, 3}, v)}, Attrs{{"padding", std::vector<int64_t>{1, 0, 2, 0}}});
  ASSERT_EQ(zero.desc.shape, (Shape{1, 1, 5, 4}));
  EXPECT_EQ(zero.at(2 * 4 + 0), 0.0);  // row 2 = input row 0: [0, 0, 1, 2]
  EXPECT_EQ(zero.at(2 * 4 + 2), 1.0);
  EXPECT_EQ(zero.at(4 * 4 + 3), 8.0);
  EXPECT_NE(ErrorOf("zero_pad2d", {F32({1, 1, 3, 3}, v)}, Attrs{{"padding", std::vector<int64_t>{1, 2, 3}}})
                .find("[left, right, top, bottom]"), std::string::npos);
  EXPECT_NE(ErrorOf("reflection_pad2d", {F32({1, 1, 3, 3}, v)}, Attrs{{"padding", int64_t{3}}}).find("smaller"), std::string::npos);
}

TEST(Pad, Gradients) {
  EXPECT_LT(Grad("zero_pad2d", {F64({1, 2, 3, 3})}, Attrs{{"padding", std::vector<int64_t>{1, 2, 0, 1}}}, {0}), kGradTol);
  EXPECT_LT(Grad("reflection_pad2d", {F64({1, 2, 3, 3})}, Attrs{{"padding", int64_t{2}}}, {0}), kGradTol);
}

}  // namespace
}  // namespace actorflow::testing

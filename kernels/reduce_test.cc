#include "kernels/testing/test_util.h"

#include <limits>

namespace actorflow::testing {
namespace {

Attrs Axes(std::vector<int64_t> axes, bool keepdims = false) { return Attrs{{"axis", axes}, {"keepdims", keepdims}}; }

// Reference over a (2,3,4) input: reduce the axes in `mask` with sum/mean/max.
void CheckReduce(const std::string& type, std::vector<int64_t> axes, bool keepdims) {
  Shape s = {2, 3, 4};
  HostTensor x = F32(s);
  HostTensor y = Run1(type, {x}, Axes(axes, keepdims));
  std::vector<bool> mask(3, axes.empty());
  for (int64_t a : axes) mask[a < 0 ? a + 3 : a] = true;
  Shape keep = s, out;
  for (int d = 0; d < 3; ++d) {
    if (mask[d]) keep[d] = 1;
    if (!mask[d] || keepdims) out.push_back(mask[d] ? 1 : s[d]);
  }
  ASSERT_EQ(y.desc.shape, out) << type;
  std::vector<double> ref(NumElements(keep), type == "reduce_max" ? -std::numeric_limits<double>::infinity() : 0.0);
  std::vector<int> count(ref.size(), 0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) {
        int64_t o = ((mask[0] ? 0 : i) * keep[1] + (mask[1] ? 0 : j)) * keep[2] + (mask[2] ? 0 : k);
        double v = x.at((i * 3 + j) * 4 + k);
        ref[o] = type == "reduce_max" ? std::max(ref[o], v) : ref[o] + v;
        ++count[o];
      }
  for (size_t o = 0; o < ref.size(); ++o)
    EXPECT_NEAR(y.at(static_cast<int64_t>(o)), type == "reduce_mean" ? ref[o] / count[o] : ref[o], 1e-5) << type;
}

TEST(Reduce, ForwardEveryAxisCombination) {
  for (std::string type : {"reduce_sum", "reduce_mean", "reduce_max"})
    for (auto axes : std::vector<std::vector<int64_t>>{{}, {0}, {1}, {2}, {-1}, {0, 2}, {0, 1}, {1, 2}, {0, 1, 2}})
      for (bool keepdims : {false, true}) CheckReduce(type, axes, keepdims);
  EXPECT_NE(ErrorOf("reduce_sum", {F32({2, 3})}, Axes({2})).find("axis 2 is out of range"), std::string::npos);
}

TEST(Reduce, LikeOpsForward) {
  HostTensor x = F32({2, 3});
  HostTensor s = Run1("reduce_sum_like", {x, F32({3})});
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(s.at(j), x.at(j) + x.at(3 + j), 1e-6);
  HostTensor b = Run1("broadcast_like", {F32({2, 1}, {1, 2}), x});
  EXPECT_EQ(b.desc.shape, (Shape{2, 3}));
  EXPECT_EQ(b.at(4), 2);
}

TEST(Reduce, SumOfSquares) {
  HostTensor x = F32({3, 5});
  double ref = 0;
  for (int64_t i = 0; i < 15; ++i) ref += x.at(i) * x.at(i);
  HostTensor y = Run1("sum_of_squares", {x});
  ASSERT_EQ(y.desc.shape, (Shape{1}));
  EXPECT_NEAR(y.at(0), ref, 1e-5);
  EXPECT_LT(Grad("sum_of_squares", {F64({2, 3})}, {}, {0}), kGradTol);
}

TEST(Reduce, Gradients) {
  EXPECT_LT(Grad("reduce_sum", {F64({2, 3, 4})}, Axes({1}), {0}), kGradTol);
  EXPECT_LT(Grad("reduce_sum", {F64({2, 3, 4})}, Attrs{}, {0}), kGradTol);
  EXPECT_LT(Grad("reduce_mean", {F64({2, 3, 4})}, Axes({0, 2}, true), {0}), kGradTol);
  EXPECT_LT(Grad("reduce_max", {F64({2, 3, 4})}, Axes({-1}), {0}), kGradTol);
  EXPECT_LT(Grad("reduce_sum_like", {F64({2, 3}), F64({2, 1})}, {}, {0}), kGradTol);
  EXPECT_LT(Grad("broadcast_like", {F64({3}), F64({2, 3})}, {}, {0}), kGradTol);
}

}  // namespace
}  // namespace actorflow::testing

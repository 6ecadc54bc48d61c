#include "kernels/testing/test_util.h"

#include <limits>

namespace actorflow::testing {
namespace {

using Ints = std::vector<int64_t>;

// Reference pooling over valid (unpadded) positions with window k, stride s, padding top/left.
void CheckPool(bool max, const Shape& xs, const Attrs& attrs, const Shape& out, int64_t k, int64_t s, int64_t top, int64_t left) {
  HostTensor x = F32(xs);
  HostTensor y = Run1(max ? "max_pool2d" : "avg_pool2d", {x}, attrs);
  ASSERT_EQ(y.desc.shape, out);
  for (int64_t nc = 0; nc < xs[0] * xs[1]; ++nc)
    for (int64_t oh = 0; oh < out[2]; ++oh)
      for (int64_t ow = 0; ow < out[3]; ++ow) {
        double acc = max ? -std::numeric_limits<double>::infinity() : 0;
        int count = 0;
        for (int64_t i = oh * s - top; i < oh * s - top + k; ++i)
          for (int64_t j = ow * s - left; j < ow * s - left + k; ++j) {
            if (i < 0 || i >= xs[2] || j < 0 || j >= xs[3]) continue;
            double v = x.at((nc * xs[2] + i) * xs[3] + j);
            acc = max ? std::max(acc, v) : acc + v;
            ++count;
          }
        EXPECT_NEAR(y.at((nc * out[2] + oh) * out[3] + ow), max ? acc : acc / count, 1e-6);
      }
}

TEST(Pool, ForwardMatchesReference) {
  for (bool max : {true, false}) {
    CheckPool(max, {2, 3, 6, 6}, Attrs{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("VALID")}},
              {2, 3, 3, 3}, 2, 2, 0, 0);
    CheckPool(max, {1, 2, 5, 5}, Attrs{{"ksize", int64_t{3}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}},
              {1, 2, 3, 3}, 3, 2, 1, 1);
    CheckPool(max, {1, 1, 6, 6}, Attrs{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}},
              {1, 1, 3, 3}, 2, 2, 0, 0);
    CheckPool(max, {1, 1, 5, 4}, Attrs{{"ksize", Ints{3, 3}}, {"strides", Ints{1, 1}}, {"padding", Ints{1, 1, 1, 1}}},
              {1, 1, 5, 4}, 3, 1, 1, 1);
    // 2x2 stride-2 windows with padded edges (the fast path's boundaries).
    CheckPool(max, {1, 2, 5, 5}, Attrs{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}},
              {1, 2, 3, 3}, 2, 2, 0, 0);
    CheckPool(max, {1, 2, 4, 6}, Attrs{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", Ints{1, 1, 1, 1}}},
              {1, 2, 3, 4}, 2, 2, 1, 1);
  }
  EXPECT_NE(ErrorOf("max_pool2d", {F32({1, 1, 4, 4})}, Attrs{{"ksize", int64_t{2}}, {"padding", std::string("FULL")}})
                .find("valid values"), std::string::npos);
  EXPECT_NE(ErrorOf("max_pool2d", {F32({1, 1, 4, 4})}).find("ksize"), std::string::npos);
}

TEST(Pool, Gradients) {
  Attrs same{{"ksize", int64_t{3}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}};
  Attrs valid{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("VALID")}};
  EXPECT_LT(Grad("max_pool2d", {F64({2, 2, 5, 5})}, same, {0}), kGradTol);
  EXPECT_LT(Grad("max_pool2d", {F64({1, 2, 4, 4})}, valid, {0}), kGradTol);
  EXPECT_LT(Grad("avg_pool2d", {F64({2, 2, 5, 5})}, same, {0}), kGradTol);
  Attrs two{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", Ints{1, 0, 1, 0}}};
  EXPECT_LT(Grad("max_pool2d", {F64({1, 2, 5, 5})}, two, {0}), kGradTol);
  EXPECT_LT(Grad("avg_pool2d", {F64({1, 2, 5, 5})}, two, {0}), kGradTol);
  EXPECT_LT(Grad("avg_pool2d", {F64({1, 2, 4, 4})}, valid, {0}), kGradTol);
}

}  // namespace
}  // namespace actorflow::testing

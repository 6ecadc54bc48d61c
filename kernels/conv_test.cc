#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

using Ints = std::vector<int64_t>;

struct ConvCase {
  Shape x, w;
  Attrs attrs;
  Shape expected_out;
  int64_t groups, sh, sw, dh, dw, top, left;
};

// Naive double reference: out[n,o,oh,ow] = sum x[n, g*Cg+c, oh*s-top+kh*d, ...] * w[o,c,kh,kw].
double Ref(const ConvCase& k, const HostTensor& x, const HostTensor& w, int64_t n, int64_t o, int64_t oh, int64_t ow) {
  int64_t c_in = k.x[1], h = k.x[2], wd = k.x[3], cg = k.w[1], og = k.w[0] / k.groups;
  double acc = 0;
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t kh = 0; kh < k.w[2]; ++kh)
      for (int64_t kw = 0; kw < k.w[3]; ++kw) {
        int64_t ih = oh * k.sh - k.top + kh * k.dh, iw = ow * k.sw - k.left + kw * k.dw;
        if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
        acc += x.at(((n * c_in + (o / og) * cg + c) * h + ih) * wd + iw) * w.at(((o * cg + c) * k.w[2] + kh) * k.w[3] + kw);
      }
  return acc;
}

std::vector<ConvCase> Cases() {
  return {
      {{2, 3, 7, 7}, {4, 3, 3, 3}, Attrs{{"padding", std::string("VALID")}}, {2, 4, 5, 5}, 1, 1, 1, 1, 1, 0, 0},
      {{1, 3, 8, 8}, {2, 3, 3, 3}, Attrs{{"padding", std::string("SAME")}, {"strides", Ints{2, 2}}}, {1, 2, 4, 4}, 1, 2, 2, 1, 1, 0, 0},
      {{1, 2, 7, 6}, {2, 2, 3, 2}, Attrs{{"padding", std::string("same")}, {"strides", int64_t{2}}}, {1, 2, 4, 3}, 1, 2, 2, 1, 1, 1, 0},
      {{1, 4, 9, 9}, {6, 2, 3, 3}, Attrs{{"padding", Ints{1, 2, 0, 1}}, {"groups", int64_t{2}}, {"dilation_rate", Ints{2, 1}}},
       {1, 6, 8, 8}, 2, 1, 1, 2, 1, 1, 0},
      {{2, 2, 6, 6}, {3, 2, 2, 2}, Attrs{{"padding", Ints{0, 0, 0, 0, 1, 1, 1, 1}}, {"strides", Ints{1, 2}}, {"dilation_rate", int64_t{2}}},
       {2, 3, 6, 3}, 1, 1, 2, 2, 2, 1, 1},
  };
}

TEST(Conv, ForwardFloat32MatchesReference) {
  for (const ConvCase& k : Cases()) {
    HostTensor x = F32(k.x), w = F32(k.w, Ramp(NumElements(k.w), 1.3));
    HostTensor y = Run1("conv2d", {x, w}, k.attrs);
    ASSERT_EQ(y.desc.shape, k.expected_out);
    for (int64_t n = 0; n < k.expected_out[0]; ++n)
      for (int64_t o = 0; o < k.expected_out[1]; ++o)
        for (int64_t oh = 0; oh < k.expected_out[2]; ++oh)
          for (int64_t ow = 0; ow < k.expected_out[3]; ++ow)
            ASSERT_NEAR(y.at(((n * k.expected_out[1] + o) * k.expected_out[2] + oh) * k.expected_out[3] + ow),
                        Ref(k, x, w, n, o, oh, ow), 1e-4);
  }
}

// The float32 (oneDNN) backward kernels agree with the float64 loops, which the gradient test
// below checks against finite differences.
TEST(Conv, BackwardFloat32MatchesFloat64) {
  for (const ConvCase& k : Cases()) {
    for (const std::string type : {"conv2d_grad_data", "conv2d_grad_filter"}) {
      bool data = type == "conv2d_grad_data";
      std::vector<double> dy = Ramp(NumElements(k.expected_out), 0.9), x = Ramp(NumElements(k.x)), w = Ramp(NumElements(k.w), 1.3);
      auto run = [&](DType t) {
        HostTensor dyt = HostTensor::Of(k.expected_out, t, dy), xt = HostTensor::Of(k.x, t, x), wt = HostTensor::Of(k.w, t, w);
        return Run1(type, data ? std::vector<HostTensor>{dyt, wt, xt} : std::vector<HostTensor>{dyt, xt, wt}, k.attrs);
      };
      HostTensor a = run(DType::kFloat32), b = run(DType::kFloat64);
      ASSERT_EQ(a.desc.shape, b.desc.shape);
      for (int64_t i = 0; i < a.desc.num_elements(); ++i) ASSERT_NEAR(a.at(i), b.at(i), 1e-4) << type;
    }
  }
}

TEST(Conv, Errors) {
  std::string e = ErrorOf("conv2d", {F32({1, 3, 8, 8}), F32({2, 4, 3, 3})});
  EXPECT_NE(e.find("filter dimension 1 must be 3"), std::string::npos) << e;
  e = ErrorOf("conv2d", {F32({1, 3, 8, 8}), F32({2, 3, 3, 3})}, Attrs{{"padding", std::string("FOO")}});
  EXPECT_NE(e.find("\"SAME\", \"VALID\""), std::string::npos) << e;
  e = ErrorOf("conv2d", {F32({1, 3, 8, 8}), F32({2, 3, 3, 3})}, Attrs{{"data_format", std::string("NHWC")}});
  EXPECT_NE(e.find("data_format"), std::string::npos) << e;
  e = ErrorOf("conv2d", {F32({1, 3, 2, 2}), F32({2, 3, 3, 3})});
  EXPECT_NE(e.find("does not fit"), std::string::npos) << e;
  e = ErrorOf("conv2d", {F32({1, 3, 8, 8}), F32({2, 1, 3, 3})}, Attrs{{"groups", int64_t{2}}});
  EXPECT_NE(e.find("groups=2 must divide"), std::string::npos) << e;
}

TEST(Conv, Gradients) {
  EXPECT_LT(Grad("conv2d", {F64({1, 2, 5, 5}), F64({3, 2, 3, 3})}, Attrs{{"padding", std::string("SAME")}}, {0, 1}), kGradTol);
  EXPECT_LT(Grad("conv2d", {F64({2, 4, 6, 5}), F64({2, 2, 2, 3})},
                 Attrs{{"padding", Ints{1, 0, 2, 1}}, {"strides", Ints{2, 1}}, {"dilation_rate", Ints{1, 2}}, {"groups", int64_t{2}}},
                 {0, 1}), kGradTol);
}

}  // namespace
}  // namespace actorflow::testing

#include "kernels/testing/test_util.h"

#include <limits>

#include "kernels/testing/with_timeout.h"

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

// Runs max/avg_pool2d_grad's kernel writing into `dx`, whatever it held before.
void RunPoolGradInto(const std::string& type, std::vector<HostTensor> in, const Attrs& attrs, HostTensor& dx, int threads = 1) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find(type).value();
  InferContext ic;
  for (auto& t : in) ic.inputs.push_back(t.desc);
  ic.attrs = attrs;
  ASSERT_TRUE(def->infer(ic).ok());
  auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, ic.outputs, attrs, threads});
  ASSERT_TRUE(kernel.ok()) << kernel.status().message();
  std::vector<TensorView> iv, ov = {dx.view()};
  for (auto& t : in) iv.push_back(t.view());
  KernelContext ctx{&iv, &ov, 0};
  ASSERT_TRUE(kernel.value()(ctx).ok());
}

// The pooling gradients write every element of dx, also where they skip zeroing it first
// (2x2 stride-2 windows tiling the plane): a dx buffer full of NaN gives the same result as a
// fresh one, for tiling, padded and overlapping windows.
TEST(Pool, GradientsOverwriteTheWholeOutput) {
  Attrs tiled{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}};
  Attrs padded{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", Ints{1, 0, 1, 0}}};
  Attrs overlap{{"ksize", int64_t{3}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}};
  for (const Attrs& attrs : {tiled, padded, overlap})
    for (bool max : {true, false}) {
      const std::string type = max ? "max_pool2d" : "avg_pool2d";
      HostTensor x = F32({2, 3, 6, 6});
      HostTensor y = Run1(type, {x}, attrs);
      HostTensor dy = F32(y.desc.shape, Ramp(y.desc.num_elements(), 0.9));
      std::vector<HostTensor> in = max ? std::vector<HostTensor>{x, y, dy} : std::vector<HostTensor>{dy, x};
      HostTensor fresh = Run1(type + "_grad", in, attrs);
      HostTensor dx = F32(x.desc.shape, std::vector<double>(x.desc.num_elements(), std::nan("")));
      RunPoolGradInto(type + "_grad", in, attrs, dx);
      for (int64_t i = 0; i < dx.desc.num_elements(); ++i) ASSERT_EQ(dx.at(i), fresh.at(i)) << type << " element " << i;
    }
}

// relu_mask (the compiler's pool_relu_grad fusion) equals max_pool2d_grad then relu_grad(x, .)
// where x is a relu's output: zeros (a clamped window's maximum may be 0), NaN kept out of the
// gradient as relu_grad does; tiling windows (the fast path) and padded/overlapping ones.
TEST(Pool, ReluMaskEqualsPoolGradThenReluGrad) {
  Attrs tiled{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}};
  Attrs padded{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", Ints{1, 0, 1, 0}}};
  Attrs overlap{{"ksize", int64_t{3}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64})
    for (const Attrs& attrs : {tiled, padded, overlap}) {
      std::vector<double> values = Ramp(2 * 3 * 6 * 6, 0.2);
      for (double& v : values) v = v < 0.3 ? 0.0 : v;  // a relu's output: many zeros, whole windows of them
      values[7] = std::nan("");
      HostTensor x = HostTensor::Of({2, 3, 6, 6}, dtype, values);
      HostTensor y = Run1("max_pool2d", {x}, attrs);
      HostTensor dy = HostTensor::Of(y.desc.shape, dtype, Ramp(y.desc.num_elements(), 1.3));
      HostTensor routed = Run1("max_pool2d_grad", {x, y, dy}, attrs);
      HostTensor want = Run1("relu_grad", {x, routed});
      Attrs masked = attrs;
      masked.Set("relu_mask", true);
      HostTensor got = Run1("max_pool2d_grad", {x, y, dy}, masked);
      int64_t zeroed = 0;
      for (int64_t i = 0; i < want.desc.num_elements(); ++i) {
        ASSERT_EQ(got.at(i), want.at(i)) << "element " << i;
        zeroed += routed.at(i) != 0 && want.at(i) == 0;
      }
      EXPECT_GT(zeroed, 0) << "the data must route some gradient to a zero maximum";
    }
  Attrs masked{{"ksize", int64_t{2}}, {"relu_mask", true}};
  EXPECT_NE(ErrorOf("avg_pool2d_grad", {F32({1, 1, 2, 2}), F32({1, 1, 4, 4})}, masked).find("max pooling only"),
            std::string::npos);
}

// Large poolings split their (sample, channel) planes over the kernel's threads: 2 threads give
// exactly the one-thread result (each plane computed alike), forward and backward, max (with and
// without relu_mask) and average, tiling, padded and overlapping windows, writing every element
// of an output first filled with NaN; 4 x 37 planes (above the split threshold) make uneven blocks.
TEST(Pool, PlanesOnTwoThreadsEqualOneThread) {
  WithTimeout([] {
    Attrs tiled{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}};
    Attrs padded{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", Ints{1, 0, 1, 0}}};
    Attrs overlap{{"ksize", int64_t{3}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}};
    const Shape shape = {4, 37, 30, 30};
    std::vector<double> values = Ramp(NumElements(shape), 0.7);
    for (double& v : values) v = v < 0.2 ? 0.0 : v;  // a relu's output, for relu_mask
    const HostTensor x = F32(shape, values);
    for (const Attrs& attrs : {tiled, padded, overlap})
      for (const std::string type : {"max_pool2d", "avg_pool2d"})
        for (bool relu_mask : {false, true}) {
          const bool max = type == "max_pool2d";
          if (relu_mask && !max) continue;
          const HostTensor y = Run1(type, {x}, attrs);
          const std::vector<double> nan(y.desc.num_elements(), std::nan(""));
          HostTensor y_two = F32(y.desc.shape, nan);
          RunPoolGradInto(type, {x}, attrs, y_two, 2);
          for (int64_t i = 0; i < y.desc.num_elements(); ++i) ASSERT_EQ(y_two.at(i), y.at(i)) << type << " element " << i;
          const HostTensor dy = F32(y.desc.shape, Ramp(y.desc.num_elements(), 0.3));
          const std::vector<HostTensor> in = max ? std::vector<HostTensor>{x, y, dy} : std::vector<HostTensor>{dy, x};
          Attrs grad_attrs = attrs;
          if (relu_mask) grad_attrs.Set("relu_mask", true);
          HostTensor one = F32(shape, std::vector<double>(NumElements(shape), std::nan("")));
          HostTensor two = one;
          RunPoolGradInto(type + "_grad", in, grad_attrs, one, 1);
          RunPoolGradInto(type + "_grad", in, grad_attrs, two, 2);
          for (int64_t i = 0; i < one.desc.num_elements(); ++i) {
            ASSERT_FALSE(std::isnan(one.at(i))) << type << "_grad element " << i;
            ASSERT_EQ(two.at(i), one.at(i)) << type << "_grad element " << i;
          }
        }
  });
}

}  // namespace
}  // namespace actorflow::testing

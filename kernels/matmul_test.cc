#include <cmath>

#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

Attrs T(bool ta, bool tb) { return Attrs{{"transpose_a", ta}, {"transpose_b", tb}}; }

// Naive double-precision reference for one batch of op(a)(M,K) . op(b)(K,N).
double Ref(const HostTensor& a, const HostTensor& b, bool ta, bool tb, int64_t bi_a, int64_t bi_b, int64_t m, int64_t n,
           int64_t k, int64_t i, int64_t j) {
  double acc = 0;
  for (int64_t p = 0; p < k; ++p)
    acc += a.at(bi_a * m * k + (ta ? p * m + i : i * k + p)) * b.at(bi_b * k * n + (tb ? j * k + p : p * n + j));
  return acc;
}

// m = 5 runs the GEMV loop where the CPU has AVX-512 (kernels/gemv.h; dnnl_sgemm with transpose_a
// or without AVX-512), m = 20 the small-GEMM primitive (float32, at least 16 rows).
TEST(Matmul, ForwardAllTransposesFloat32AndFloat64) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64})
    for (int64_t m : {5, 20})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          int64_t n = 7, k = 33;
          HostTensor a = HostTensor::Of(ta ? Shape{k, m} : Shape{m, k}, dtype, Ramp(m * k));
          HostTensor b = HostTensor::Of(tb ? Shape{n, k} : Shape{k, n}, dtype, Ramp(n * k, 1.1));
          HostTensor c = Run1("matmul", {a, b}, T(ta, tb));
          ASSERT_EQ(c.desc.shape, (Shape{m, n}));
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(c.at(i * n + j), Ref(a, b, ta, tb, 0, 0, m, n, k, i, j), 1e-4);
        }
}

TEST(Matmul, BatchedWithSharedOperands) {
  int64_t bs = 3, m = 4, n = 5, k = 6;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int shared : {0, 1, 2}) {  // 0: both batched, 1: b shared, 2: a shared
        Shape as = ta ? Shape{k, m} : Shape{m, k}, bsh = tb ? Shape{n, k} : Shape{k, n};
        if (shared != 2) as.insert(as.begin(), bs);
        if (shared != 1) bsh.insert(bsh.begin(), bs);
        HostTensor a = F32(as), b = HostTensor::Of(bsh, DType::kFloat32, Ramp(NumElements(bsh), 2.0));
        HostTensor c = Run1("matmul", {a, b}, T(ta, tb));
        ASSERT_EQ(c.desc.shape, (Shape{bs, m, n}));
        for (int64_t q = 0; q < bs; ++q)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j)
              EXPECT_NEAR(c.at((q * m + i) * n + j),
                          Ref(a, b, ta, tb, shared == 2 ? 0 : q, shared == 1 ? 0 : q, m, n, k, i, j), 1e-4);
      }
}

// A kernel built with a thread budget of 2 computes the same product (oneDNN via OpenMP).
TEST(Matmul, TwoThreadsAndConvTwoThreads) {
  RegisterAllOps();
  HostTensor a = F32({64, 96}), b = F32({96, 80}, Ramp(96 * 80, 0.7));
  for (const char* type : {"matmul", "conv2d"}) {
    bool mm = std::string(type) == "matmul";
    std::vector<HostTensor> in = mm ? std::vector<HostTensor>{a, b} : std::vector<HostTensor>{F32({2, 4, 9, 9}), F32({8, 4, 3, 3})};
    Attrs attrs = mm ? Attrs{} : Attrs{{"padding", std::string("SAME")}};
    HostTensor one = Run1(type, in, attrs);
    const OpDef* def = OpRegistry::Global().Find(type).value();
    InferContext ic{{in[0].desc, in[1].desc}, attrs, {}};
    ASSERT_TRUE(def->infer(ic).ok());
    auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, ic.outputs, attrs, 2});
    ASSERT_TRUE(kernel.ok());
    HostTensor two = HostTensor::Of(ic.outputs[0].shape, ic.outputs[0].dtype, {});
    std::vector<TensorView> iv = {in[0].view(), in[1].view()}, ov = {two.view()};
    KernelContext ctx{&iv, &ov, 0};
    ASSERT_TRUE(kernel.value()(ctx).ok());
    for (int64_t i = 0; i < one.desc.num_elements(); ++i) ASSERT_NEAR(one.at(i), two.at(i), 1e-4) << type;
  }
}

// With a budget of 2 threads a small GEMM of enough work (here 64x64x64) runs as two row halves
// on the caller and a pool helper: every transpose, with the bias/relu epilogue, against the
// double reference; repeated so halves run on both threads, and a 1-thread kernel gives the same.
TEST(Matmul, SmallGemmHalvesOnTwoThreads) {
  RegisterAllOps();
  const int64_t m = 64, n = 64, k = 64;
  const OpDef* def = OpRegistry::Global().Find("matmul").value();
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool fuse : {false, true}) {
        HostTensor a = HostTensor::Of(ta ? Shape{k, m} : Shape{m, k}, DType::kFloat32, Ramp(m * k, 0.3));
        HostTensor b = HostTensor::Of(tb ? Shape{n, k} : Shape{k, n}, DType::kFloat32, Ramp(n * k, 1.5));
        HostTensor bias = HostTensor::Of({n}, DType::kFloat32, Ramp(n, 2.7));
        Attrs attrs = T(ta, tb);
        if (fuse) {
          attrs.Set("fuse_bias", true);
          attrs.Set("fuse_relu", true);
        }
        std::vector<HostTensor> in = {a, b};
        if (fuse) in.push_back(bias);
        InferContext ic{{a.desc, b.desc}, attrs, {}};
        if (fuse) ic.inputs.push_back(bias.desc);
        ASSERT_TRUE(def->infer(ic).ok());
        std::vector<TensorView> iv;
        for (HostTensor& t : in) iv.push_back(t.view());
        for (int threads : {1, 2}) {
          auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, ic.outputs, attrs, threads});
          ASSERT_TRUE(kernel.ok());
          for (int repeat = 0; repeat < 20; ++repeat) {
            HostTensor c = HostTensor::Of({m, n}, DType::kFloat32, std::vector<double>(m * n, 1e30));
            std::vector<TensorView> ov = {c.view()};
            KernelContext ctx{&iv, &ov, 0};
            ASSERT_TRUE(kernel.value()(ctx).ok());
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j) {
                double want = Ref(a, b, ta, tb, 0, 0, m, n, k, i, j);
                if (fuse) want = std::max(0.0, want + bias.at(j));
                ASSERT_NEAR(c.at(i * n + j), want, 1e-5 * (1 + std::abs(want))) << "ta " << ta << " tb " << tb << " threads " << threads
                                                         << " row " << i << " column " << j;
              }
          }
        }
      }
}

// A few rows against a large b (batch-1 inference: 784x512 weights, 1.6 MB) run as column blocks
// on two threads whatever the FLOPs: every column written (the output starts as 1e30), equal to
// the double reference with the fused bias and relu (to float32 rounding of 784-term sums), on 1
// and 2 threads.
TEST(Matmul, FewRowsAgainstALargeRightOperandOnTwoThreads) {
  RegisterAllOps();
  const int64_t n = 512, k = 784;
  const OpDef* def = OpRegistry::Global().Find("matmul").value();
  for (int64_t m : {1, 3})
    for (int threads : {1, 2}) {
      HostTensor a = HostTensor::Of({m, k}, DType::kFloat32, Ramp(m * k, 0.3));
      HostTensor b = HostTensor::Of({k, n}, DType::kFloat32, Ramp(k * n, 1.5));
      HostTensor bias = HostTensor::Of({n}, DType::kFloat32, Ramp(n, 2.7));
      Attrs attrs = T(false, false);
      attrs.Set("fuse_bias", true);
      attrs.Set("fuse_relu", true);
      InferContext ic{{a.desc, b.desc, bias.desc}, attrs, {}};
      ASSERT_TRUE(def->infer(ic).ok());
      auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, ic.outputs, attrs, threads});
      ASSERT_TRUE(kernel.ok());
      std::vector<TensorView> iv = {a.view(), b.view(), bias.view()};
      for (int repeat = 0; repeat < 10; ++repeat) {
        HostTensor c = HostTensor::Of({m, n}, DType::kFloat32, std::vector<double>(m * n, 1e30));
        std::vector<TensorView> ov = {c.view()};
        KernelContext ctx{&iv, &ov, 0};
        ASSERT_TRUE(kernel.value()(ctx).ok());
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const double want = std::max(0.0, Ref(a, b, false, false, 0, 0, m, n, k, i, j) + bias.at(j));
            double magnitude = std::abs(bias.at(j));  // float32 rounding scales with the terms' sizes
            for (int64_t p = 0; p < k; ++p) magnitude += std::abs(a.at(i * k + p) * b.at(p * n + j));
            ASSERT_NEAR(c.at(i * n + j), want, 1e-6 * (1 + magnitude))
                << "m " << m << " threads " << threads << " column " << j;
          }
      }
    }
}

// The fusion pass's form: matmul with a bias epilogue (and relu) equals matmul then bias_add,
// for 2-D and folded batched operands, float32 and float64, transposed or not.
TEST(Matmul, FusedBiasAndReluEpilogue) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64})
    for (bool tb : {false, true})
      for (bool relu : {false, true})
        for (bool batched : {false, true}) {
          int64_t m = 9, n = 9, k = 17;  // batched: 18 rows, the small-GEMM primitive
          Shape as = batched ? Shape{2, m, k} : Shape{m, k};
          HostTensor a = HostTensor::Of(as, dtype, Ramp(NumElements(as), 0.3));
          HostTensor b = HostTensor::Of(tb ? Shape{n, k} : Shape{k, n}, dtype, Ramp(n * k, 1.9));
          HostTensor bias = HostTensor::Of({n}, dtype, Ramp(n, 2.7));
          Attrs fused = T(false, tb);
          fused.Set("fuse_bias", true);
          if (relu) fused.Set("fuse_relu", true);
          HostTensor got = Run1("matmul", {a, b, bias}, fused);
          // The product on the path the fused kernel takes: a relu-gradient mask never goes to
        // the GEMV loop (a few rows), so neither does the product here.
        Attrs product_attrs = T(false, tb);
        product_attrs.Set("gemv", false);
        HostTensor product = Run1("matmul", {a, b}, product_attrs);
          Attrs add_attrs{{"axis", int64_t{-1}}};
          if (relu) add_attrs.Set("fuse_relu", true);
          HostTensor want = Run1("bias_add", {product, bias}, add_attrs);
          ASSERT_EQ(got.desc, want.desc);
          bool some_clamped = false;
          for (int64_t i = 0; i < NumElements(want.desc.shape); ++i) {
            EXPECT_NEAR(got.at(i), want.at(i), 1e-4) << i;
            some_clamped |= relu && want.at(i) == 0;
          }
          if (relu) EXPECT_TRUE(some_clamped) << "the data must exercise the relu";
        }
  HostTensor a = F32({2, 3}), b = F32({3, 4});
  Attrs fused{{"fuse_bias", true}};
  EXPECT_NE(ErrorOf("matmul", {a, b, F32({3})}, fused).find("bias"), std::string::npos);
}

// The matmul_relu_grad fusion's form: a data-gradient matmul masked by the relu's output y
// equals matmul then relu_grad, exactly (the mask only selects): the narrow loops (7 columns:
// 5 and 20 rows), the small-GEMM primitive (64 rows, in halves on 2 threads), the blocks of the threaded
// path (100x512 from K=784 on 2 threads) and float64, every transpose of b. y holds positives,
// zeros and negatives; the output starts as NaN so an unwritten element fails.
TEST(Matmul, FusedReluGradEpilogue) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find("matmul").value();
  struct Case {
    int64_t m, n, k;
    DType dtype;
  };
  for (const Case& shape : {Case{5, 7, 33, DType::kFloat32}, Case{20, 7, 33, DType::kFloat32},
                            Case{64, 64, 64, DType::kFloat32}, Case{100, 512, 784, DType::kFloat32},
                            Case{9, 9, 17, DType::kFloat64}})
    for (bool tb : {false, true})
      for (int threads : {1, 2}) {
        const int64_t m = shape.m, n = shape.n, k = shape.k;
        HostTensor a = HostTensor::Of({m, k}, shape.dtype, Ramp(m * k, 0.3));
        HostTensor b = HostTensor::Of(tb ? Shape{n, k} : Shape{k, n}, shape.dtype, Ramp(n * k, 1.5));
        std::vector<double> y_values(m * n);
        for (int64_t i = 0; i < m * n; ++i) y_values[i] = (i % 3 == 0) ? 0.0 : (i % 3 == 1 ? 0.5 + i % 7 : -1.0);
        HostTensor y = HostTensor::Of({m, n}, shape.dtype, y_values);
        // The product on the path the fused kernel takes: a relu-gradient mask never goes to
        // the GEMV loop (a few rows), so neither does the product here.
        Attrs product_attrs = T(false, tb);
        product_attrs.Set("gemv", false);
        HostTensor product = Run1("matmul", {a, b}, product_attrs);
        HostTensor want = Run1("relu_grad", {y, product});
        Attrs attrs = T(false, tb);
        attrs.Set("fuse_relu_grad", true);
        InferContext ic{{a.desc, b.desc, y.desc}, attrs, {}};
        ASSERT_TRUE(def->infer(ic).ok());
        auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, ic.outputs, attrs, threads});
        ASSERT_TRUE(kernel.ok()) << kernel.status().message();
        std::vector<TensorView> iv = {a.view(), b.view(), y.view()};
        for (int repeat = 0; repeat < 3; ++repeat) {
          HostTensor got = HostTensor::Of({m, n}, shape.dtype, std::vector<double>(m * n, std::nan("")));
          std::vector<TensorView> ov = {got.view()};
          KernelContext ctx{&iv, &ov, 0};
          ASSERT_TRUE(kernel.value()(ctx).ok());
          int kept = 0;
          for (int64_t i = 0; i < m * n; ++i) {
            ASSERT_EQ(got.at(i), want.at(i)) << "m " << m << " tb " << tb << " threads " << threads << " element " << i;
            kept += want.at(i) != 0;
          }
          EXPECT_GT(kept, 0) << "the data must keep some of the product";
        }
      }
  // y must be shaped like the product, and the relu gradient excludes the bias epilogue.
  HostTensor a = F32({4, 3}), b = F32({3, 5});
  std::string e = ErrorOf("matmul", {a, b, F32({4, 4})}, Attrs{{"fuse_relu_grad", true}});
  EXPECT_NE(e.find("fuse_relu_grad needs a third input 'y'"), std::string::npos) << e;
  EXPECT_NE(e.find("(4, 4)"), std::string::npos) << e;
  e = ErrorOf("matmul", {a, b, F32({5})}, Attrs{{"fuse_relu_grad", true}, {"fuse_bias", true}});
  EXPECT_NE(e.find("exclude each other"), std::string::npos) << e;
}

// fuse_bias_grad: the second output is the final product's column sums, bit for bit what
// bias_add_grad gives on the product (rows added in order from zero), on every path the kernel
// takes: the narrow rows loop summing in registers (masked data gradient (100,10)x(10,512), in
// one and two parts), the narrow dots loop, oneDNN (narrow_gemm off), the split GEMM (K = 784 on
// 2 threads), the small-GEMM primitive, the GEMV (4 rows), a batched product and float64.
// Outputs start as NaN, so an unwritten sum fails.
TEST(Matmul, FusedBiasGradSumsColumnsLikeBiasAddGrad) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find("matmul").value();
  struct Case {
    Shape a, b;
    bool tb, mask;
    DType dtype;
    bool narrow = true;
  };
  const std::vector<Case> cases = {
      {{100, 10}, {10, 512}, false, true, DType::kFloat32},  {{100, 10}, {10, 512}, false, true, DType::kFloat32, false},
      {{37, 10}, {10, 100}, false, true, DType::kFloat32},   {{100, 512}, {10, 512}, true, false, DType::kFloat32},
      {{100, 784}, {512, 784}, true, true, DType::kFloat32}, {{20, 64}, {64, 48}, false, false, DType::kFloat32},
      {{4, 64}, {64, 48}, false, false, DType::kFloat32},    {{3, 20, 16}, {16, 24}, false, false, DType::kFloat32},
      {{9, 17}, {17, 9}, false, true, DType::kFloat64}};
  for (const Case& c : cases)
    for (int threads : {1, 2}) {
      const int64_t n = c.tb ? c.b[0] : c.b[1];
      Shape out_shape = c.a;
      out_shape.back() = n;
      const int64_t elements = NumElements(out_shape);
      HostTensor a = HostTensor::Of(c.a, c.dtype, Ramp(NumElements(c.a), 0.3));
      HostTensor b = HostTensor::Of(c.b, c.dtype, Ramp(NumElements(c.b), 1.5));
      std::vector<double> y_values(elements);
      for (int64_t i = 0; i < elements; ++i) y_values[i] = i % 3 == 0 ? 0.0 : 0.5 + i % 7;
      HostTensor y = HostTensor::Of(out_shape, c.dtype, y_values);
      Attrs plain = T(false, c.tb);
      plain.Set("fuse_relu_grad", c.mask);
      plain.Set("narrow_gemm", c.narrow);
      std::vector<HostTensor> inputs = {a, b};
      if (c.mask) inputs.push_back(y);
      std::vector<TensorView> iv;
      for (HostTensor& t : inputs) iv.push_back(t.view());
      auto run = [&](const Attrs& attrs, std::vector<HostTensor>& outputs) {
        InferContext ic{{}, attrs, {}};
        for (const HostTensor& t : inputs) ic.inputs.push_back(t.desc);
        ASSERT_TRUE(def->infer(ic).ok());
        auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, ic.outputs, attrs, threads});
        ASSERT_TRUE(kernel.ok()) << kernel.status().message();
        for (const TensorDesc& d : ic.outputs)
          outputs.push_back(HostTensor::Of(d.shape, d.dtype, std::vector<double>(NumElements(d.shape), std::nan(""))));
        std::vector<TensorView> ov;
        for (HostTensor& t : outputs) ov.push_back(t.view());
        KernelContext ctx{&iv, &ov, 0};
        ASSERT_TRUE(kernel.value()(ctx).ok());
      };
      std::vector<HostTensor> unfused, fused;
      run(plain, unfused);
      Attrs with_sums = plain;
      with_sums.Set("fuse_bias_grad", true);
      run(with_sums, fused);
      ASSERT_EQ(unfused.size(), 1u);
      ASSERT_EQ(fused.size(), 2u);
      const std::string where = ShapeToString(c.a) + " x " + ShapeToString(c.b) + (c.narrow ? "" : " oneDNN") +
                                " threads " + std::to_string(threads);
      for (int64_t i = 0; i < elements; ++i) ASSERT_EQ(fused[0].at(i), unfused[0].at(i)) << where << " element " << i;
      HostTensor want = Run1("bias_add_grad", {unfused[0]}, Attrs{{"axis", static_cast<int64_t>(out_shape.size()) - 1}});
      ASSERT_EQ(fused[1].desc, want.desc) << where;
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(fused[1].at(j), want.at(j)) << where << " column " << j;
    }
  // The second output must be there, shaped (N,).
  HostTensor a = F32({4, 3}), b = F32({3, 5});
  InferContext ic{{a.desc, b.desc}, Attrs{{"fuse_bias_grad", true}}, {}};
  ASSERT_TRUE(def->infer(ic).ok());
  ASSERT_EQ(ic.outputs.size(), 2u);
  EXPECT_EQ(ic.outputs[1].shape, (Shape{5}));
  auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, {ic.outputs[0]}, ic.attrs, 1});
  ASSERT_FALSE(kernel.ok());
  EXPECT_NE(kernel.status().message().find("second output 'dbias' of shape (5,)"), std::string::npos)
      << kernel.status().message();
}

TEST(Matmul, ShapeErrorNamesDimensions) {
  std::string e = ErrorOf("matmul", {F32({100, 784}), F32({512, 10})});
  EXPECT_NE(e.find("(100, 784)"), std::string::npos) << e;
  EXPECT_NE(e.find("784 vs 512"), std::string::npos) << e;
  EXPECT_NE(ErrorOf("matmul", {F32({2, 3, 4}), F32({3, 4, 5})}).find("batch"), std::string::npos);
  EXPECT_NE(ErrorOf("matmul", {F32({4}), F32({4, 5})}).find("rank"), std::string::npos);
}

TEST(Matmul, Gradients) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      EXPECT_LT(Grad("matmul", {F64(ta ? Shape{4, 3} : Shape{3, 4}), F64(tb ? Shape{5, 4} : Shape{4, 5})}, T(ta, tb), {0, 1}),
                kGradTol) << ta << tb;
      EXPECT_LT(Grad("matmul", {F64(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}), F64(tb ? Shape{5, 4} : Shape{4, 5})}, T(ta, tb), {0, 1}),
                kGradTol) << ta << tb;
      EXPECT_LT(Grad("matmul", {F64(ta ? Shape{4, 3} : Shape{3, 4}), F64(tb ? Shape{2, 5, 4} : Shape{2, 4, 5})}, T(ta, tb), {0, 1}),
                kGradTol) << ta << tb;
    }
}

TEST(BiasAdd, ForwardFusedReluAndGradient) {
  HostTensor x = F32({2, 3, 2}), b = F32({3}, {0.5, -0.25, 1});
  HostTensor y = Run1("bias_add", {x, b}, Attrs{{"axis", int64_t{1}}});
  HostTensor r = Run1("bias_add", {x, b}, Attrs{{"axis", int64_t{1}}, {"fuse_relu", true}});
  for (int64_t i = 0; i < 12; ++i) {
    double ref = x.at(i) + b.at((i / 2) % 3);
    EXPECT_NEAR(y.at(i), ref, 1e-6);
    EXPECT_NEAR(r.at(i), std::max(ref, 0.0), 1e-6);
  }
  EXPECT_NE(ErrorOf("bias_add", {F32({2, 3}), F32({2})}).find("bias must have shape (3,)"), std::string::npos);
  EXPECT_LT(Grad("bias_add", {F64({3, 4}), F64({4})}, {}, {0, 1}), kGradTol);
  EXPECT_LT(Grad("bias_add", {F64({3, 4}), F64({4})}, Attrs{{"fuse_relu", true}}, {0, 1}), kGradTol);
  EXPECT_LT(Grad("bias_add", {F64({2, 3, 2, 2}), F64({3})}, Attrs{{"axis", int64_t{1}}}, {0, 1}), kGradTol);
}

}  // namespace
}  // namespace actorflow::testing

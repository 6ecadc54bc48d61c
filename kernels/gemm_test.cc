// The chunked sgemm (equal to a double reference and to the OpenMP-team fallback, with epilogues),
// through the matmul and matmul_sgd_update kernels too.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/testing/test_util.h"
#include "kernels/testing/with_timeout.h"

namespace actorflow::testing {
namespace {

TEST(Sgemm, BlocksCoverTheOutputAndRepackTheSmallerOperand) {
  GemmBlocks forward = SgemmBlocks(100, 512, 784, 2);  // op(A) 100x784 < op(B) 784x512: column blocks
  EXPECT_GT(forward.col_blocks, 1);
  EXPECT_EQ(forward.row_blocks, 1);
  EXPECT_EQ(forward.col_step % 16, 0);
  EXPECT_GE(forward.col_blocks * forward.col_step, 512);
  GemmBlocks weight_gradient = SgemmBlocks(784, 512, 100, 2);  // op(B) 100x512 < op(A) 784x100: row blocks
  EXPECT_EQ(weight_gradient.col_blocks, 1);
  EXPECT_GT(weight_gradient.row_blocks, 1);
  EXPECT_GE(weight_gradient.row_blocks * weight_gradient.row_step, 784);
  GemmBlocks narrow = SgemmBlocks(100, 10, 512, 2);  // logits: too narrow for columns
  EXPECT_EQ(narrow.col_blocks, 1);
  EXPECT_GT(narrow.row_blocks, 1);
  EXPECT_GE(narrow.row_blocks * narrow.row_step, 100);
  GemmBlocks one = SgemmBlocks(100, 512, 784, 1);
  EXPECT_EQ(one.row_blocks * one.col_blocks, 1);
}

// Chunked (2 and 3 threads), OpenMP team and one thread against a double reference, every
// transpose pair, alpha and beta != 0, wide and narrow outputs, with a per-block epilogue that
// records which elements it saw.
TEST(Sgemm, ChunkedEqualsReferenceAndFallback) {
  WithTimeout([] {
    struct Shape3 {
      int64_t m, n, k;
    };
    for (Shape3 s : {Shape3{37, 203, 61}, Shape3{100, 10, 50}, Shape3{130, 96, 100}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          std::vector<float> a(s.m * s.k), b(s.k * s.n), c0(s.m * s.n);
          for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 37 % 101) / 50.0 - 1.0);
          for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 53 % 97) / 48.0 - 1.0);
          for (size_t i = 0; i < c0.size(); ++i) c0[i] = static_cast<float>((i % 13) / 6.0 - 1.0);
          const float alpha = -0.3f, beta = 0.9f;
          std::vector<double> want(c0.size());
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t j = 0; j < s.n; ++j) {
              double acc = 0;
              for (int64_t p = 0; p < s.k; ++p)
                acc += static_cast<double>(a[ta ? p * s.m + i : i * s.k + p]) * b[tb ? j * s.k + p : p * s.n + j];
              want[i * s.n + j] = alpha * acc + beta * c0[i * s.n + j];
            }
          for (int threads : {1, 2, 3})
            for (bool team : {false, true}) {
              std::vector<float> c = c0;
              std::vector<int> seen(c.size(), 0);
              struct Context {
                std::vector<int>* seen;
                int64_t n;
              } context{&seen, s.n};
              GemmEpilogue epilogue{[](const void* p, int64_t r0, int64_t r1, int64_t c0_, int64_t c1) {
                                      const Context& e = *static_cast<const Context*>(p);
                                      for (int64_t r = r0; r < r1; ++r)
                                        for (int64_t j = c0_; j < c1; ++j) ++(*e.seen)[r * e.n + j];
                                    },
                                    &context};
              ASSERT_TRUE(Sgemm(ta, tb, s.m, s.n, s.k, alpha, a.data(), b.data(), beta, c.data(), threads, team,
                                &epilogue)
                              .ok());
              for (size_t i = 0; i < c.size(); ++i) {
                ASSERT_NEAR(c[i], want[i], 1e-3) << "m,n,k " << s.m << "," << s.n << "," << s.k << " ta " << ta
                                                 << " tb " << tb << " threads " << threads << " team " << team;
                ASSERT_EQ(seen[i], 1) << "the epilogue must see each element once";
              }
            }
        }
  });
}

// Runs one CPU kernel of `type` with `threads`, inputs in place (in-place ops write them).
std::vector<HostTensor> RunKernel(const std::string& type, std::vector<HostTensor> inputs, const Attrs& attrs,
                                  int threads) {
  RegisterAllOps();
  const OpDef* def = OpRegistry::Global().Find(type).value();
  InferContext ic;
  for (auto& t : inputs) ic.inputs.push_back(t.desc);
  ic.attrs = attrs;
  EXPECT_TRUE(def->infer(ic).ok()) << type;
  auto kernel = def->kernel_factories.at(kCpuDevice)(KernelInit{ic.inputs, ic.outputs, attrs, threads});
  EXPECT_TRUE(kernel.ok()) << type;
  std::vector<HostTensor> outputs;
  for (const TensorDesc& d : ic.outputs) outputs.push_back(HostTensor::Of(d.shape, d.dtype, {}));
  std::vector<TensorView> in, out;
  for (auto& t : inputs) in.push_back(t.view());
  for (auto& t : outputs) out.push_back(t.view());
  KernelContext ctx{&in, &out, 0};
  EXPECT_TRUE(kernel.value()(ctx).ok()) << type;
  outputs.insert(outputs.begin(), inputs.begin(), inputs.end());
  return outputs;  // inputs (as the kernel left them), then outputs
}

// The matmul kernel on the seed MLP's shapes (above the one-thread threshold), chunked vs the
// OpenMP-team fallback (attr omp_team, set by disable_fusion("gemm_chunks")), with the fused
// bias + relu epilogue and without.
TEST(Sgemm, MatmulKernelChunkedEqualsTeam) {
  WithTimeout([] {
    HostTensor x = F32({100, 784}, Ramp(100 * 784, 0.01)), w = F32({784, 512}, Ramp(784 * 512, 0.003));
    HostTensor bias = F32({512}, Ramp(512, 0.5));
    for (bool fused : {false, true}) {
      Attrs attrs;
      std::vector<HostTensor> in = {x, w};
      if (fused) {
        attrs.Set("fuse_bias", true);
        attrs.Set("fuse_relu", true);
        in.push_back(bias);
      }
      Attrs team = attrs;
      team.Set("omp_team", true);
      HostTensor chunked = RunKernel("matmul", in, attrs, 2).back();
      HostTensor reference = RunKernel("matmul", in, team, 2).back();
      bool clamped = false;
      for (int64_t i = 0; i < chunked.desc.num_elements(); ++i) {
        ASSERT_NEAR(chunked.at(i), reference.at(i), 1e-3 * (1 + std::abs(reference.at(i)))) << i;
        clamped |= fused && reference.at(i) == 0;
      }
      if (fused) {
        EXPECT_TRUE(clamped) << "the data must exercise the relu";
      }
    }
  });
}

TEST(Sgemm, MatmulSgdUpdateChunkedEqualsTeam) {
  WithTimeout([] {
    HostTensor x = F32({100, 784}, Ramp(100 * 784, 0.01)), dy = F32({100, 512}, Ramp(100 * 512, 0.02));
    Attrs attrs{{"transpose_a", true}, {"weight_decay", 0.01}};
    Attrs team = attrs;
    team.Set("omp_team", true);
    std::vector<HostTensor> in = {F32({784, 512}, Ramp(784 * 512, 0.7)), x, dy, F32({1}, {0.1})};
    HostTensor chunked = RunKernel("matmul_sgd_update", in, attrs, 2)[0];
    HostTensor reference = RunKernel("matmul_sgd_update", in, team, 2)[0];
    for (int64_t i = 0; i < chunked.desc.num_elements(); ++i)
      ASSERT_NEAR(chunked.at(i), reference.at(i), 1e-3 * (1 + std::abs(reference.at(i)))) << i;
    // A narrow weight gradient of 1 MFLOP (512x10, K = 100) splits into row blocks on 2 threads.
    ASSERT_GT(SgemmBlocks(512, 10, 100, 2).row_blocks, 1);
    HostTensor h = F32({100, 512}, Ramp(100 * 512, 0.03)), dlogits = F32({100, 10}, Ramp(100 * 10, 0.05));
    std::vector<HostTensor> narrow = {F32({512, 10}, Ramp(512 * 10, 0.4)), h, dlogits, F32({1}, {0.1})};
    HostTensor blocks = RunKernel("matmul_sgd_update", narrow, attrs, 2)[0];
    HostTensor one_thread = RunKernel("matmul_sgd_update", narrow, attrs, 1)[0];
    for (int64_t i = 0; i < blocks.desc.num_elements(); ++i) {
      double want = (1 - 0.1 * 0.01) * narrow[0].at(i);  // var = (1 - lr wd) var - lr h^T dlogits, in double
      for (int64_t p = 0; p < 100; ++p) want -= 0.1 * h.at(p * 512 + i / 10) * dlogits.at(p * 10 + i % 10);
      ASSERT_NEAR(blocks.at(i), want, 1e-4 * (1 + std::abs(want))) << i;
      ASSERT_NEAR(one_thread.at(i), want, 1e-4 * (1 + std::abs(want))) << i;
    }
  });
}

// bias_add_grad_sgd_update equals bias_add_grad then sgd_update exactly (same sums in the same
// order, same update expression): dense (last axis) and NCHW (axis 1, inner > 1) gradients,
// with weight decay and grad_scale; then a bad dy shape names both shapes.
TEST(BiasGradientUpdate, EqualsBiasAddGradThenSgdUpdate) {
  struct Case {
    Shape dy;
    int64_t axis;
  };
  for (const Case& shape : {Case{{100, 512}, 1}, Case{{4, 6, 5, 3}, 1}, Case{{7, 3}, -1}}) {
    const int64_t channels = shape.dy[shape.axis < 0 ? shape.dy.size() + shape.axis : shape.axis];
    HostTensor dy = F32(shape.dy, Ramp(NumElements(shape.dy), 0.37));
    HostTensor var = F32({channels}, Ramp(channels, 1.3)), lr = F32({1}, {0.05});
    Attrs hyper{{"weight_decay", 0.01}, {"grad_scale", 0.25}};
    Attrs fused_attrs = hyper;
    fused_attrs.Set("axis", shape.axis);
    HostTensor fused = RunKernel("bias_add_grad_sgd_update", {var, dy, lr}, fused_attrs, 1)[0];
    HostTensor db = RunKernel("bias_add_grad", {dy}, Attrs{{"axis", shape.axis}}, 1).back();
    HostTensor plain = RunKernel("sgd_update", {var, db, lr}, hyper, 1)[0];
    for (int64_t i = 0; i < channels; ++i) {
      ASSERT_EQ(fused.at(i), plain.at(i)) << i;
      ASSERT_NE(fused.at(i), var.at(i)) << "the update must change the bias";
    }
  }
  EXPECT_NE(ErrorOf("bias_add_grad_sgd_update", {F32({5}), F32({2, 4}), F32({1})}).find("(2, 4)"), std::string::npos);
}

// Convolutions split over the batch (forward with the bias + relu epilogue, NCHW and NHWC, and
// both gradients; 2 threads, uneven chunks of 11 samples) equal one oneDNN call with an
// OpenMP team (attr omp_team).
TEST(BatchChunkedConv, EqualsOneCall) {
  WithTimeout([] {
    for (bool nhwc : {false, true}) {
      const int64_t n = 11, c = 3, h = 9, o = 8;
      HostTensor x = F32(nhwc ? Shape{n, h, h, c} : Shape{n, c, h, h}, Ramp(n * c * h * h, 0.2));
      HostTensor w = F32({o, c, 3, 3}, Ramp(o * c * 9, 0.9)), bias = F32({o}, Ramp(o, 0.1));
      Attrs attrs{{"padding", std::string("SAME")}, {"fuse_bias", true}, {"activation", std::string("relu")}};
      if (nhwc) attrs.Set("data_format", std::string("NHWC"));
      Attrs team = attrs;
      team.Set("omp_team", true);
      HostTensor chunked = RunKernel("conv2d", {x, w, bias}, attrs, 2).back();
      HostTensor whole = RunKernel("conv2d", {x, w, bias}, team, 2).back();
      bool clamped = false;
      for (int64_t i = 0; i < whole.desc.num_elements(); ++i) {
        ASSERT_NEAR(chunked.at(i), whole.at(i), 1e-4 * (1 + std::abs(whole.at(i)))) << "nhwc " << nhwc << " element " << i;
        clamped |= whole.at(i) == 0;
      }
      EXPECT_TRUE(clamped) << "the data must exercise the relu";
      if (nhwc) continue;
      HostTensor dy = F32(whole.desc.shape, Ramp(whole.desc.num_elements(), 0.6));
      Attrs data_attrs{{"padding", std::string("SAME")}};
      Attrs data_team = data_attrs;
      data_team.Set("omp_team", true);
      HostTensor dx_chunked = RunKernel("conv2d_grad_data", {dy, w, x}, data_attrs, 2).back();
      HostTensor dx_whole = RunKernel("conv2d_grad_data", {dy, w, x}, data_team, 2).back();
      for (int64_t i = 0; i < dx_whole.desc.num_elements(); ++i)
        ASSERT_NEAR(dx_chunked.at(i), dx_whole.at(i), 1e-4 * (1 + std::abs(dx_whole.at(i)))) << "dx element " << i;
      // The filter gradient sums the chunks' partial sums.
      HostTensor dw_chunked = RunKernel("conv2d_grad_filter", {dy, x, w}, data_attrs, 2).back();
      HostTensor dw_whole = RunKernel("conv2d_grad_filter", {dy, x, w}, data_team, 2).back();
      for (int64_t i = 0; i < dw_whole.desc.num_elements(); ++i)
        ASSERT_NEAR(dw_chunked.at(i), dw_whole.at(i), 1e-4 * (1 + std::abs(dw_whole.at(i)))) << "dw element " << i;
    }
  });
}

}  // namespace
}  // namespace actorflow::testing

// A predict job's convolution weights in oneDNN's blocked layout through a session
// (kernels/conv_dnnl.h, ConvWeightsCache): the filter is a variable the job only reads, so its
// kernel keys the blocked copy on the variable's version counter; reordered on the first call and
// again exactly when something wrote the variable (a train job's call, SetVariable, even of the
// same values), and every result equals the float64 reference over the variable's value at the
// call.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "graph/test_util.h"
#include "kernels/conv_kernel.h"
#include "session/session.h"
#include "session/weights_test_util.h"

namespace actorflow {
namespace graph {
namespace {

using testing::ValueOrDie;
constexpr auto View = &testing::FloatView;

// x (N, C, H, W) * filter (O, C, K, K), VALID: out (N, O, H-K+1, W-K+1).
constexpr int64_t kN = 4, kC = 3, kH = 12, kO = 8, kK = 5, kOut = kH - kK + 1;

// out = conv2d(x, filter) (predict), or the same with loss = out^2 and SGD on `filter` (train).
JobBuilder Conv(const std::string& name, const std::string& type, const std::string& filter) {
  return testing::OneWeightJob(name, type, "conv2d", {kN, kC, kH, kH}, filter, {kO, kC, kK, kK},
                               Attrs{{"padding", std::string("VALID")}});
}

void ExpectConv(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& out, const std::string& when) {
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t o = 0; o < kO; ++o)
      for (int64_t i = 0; i < kOut; ++i)
        for (int64_t j = 0; j < kOut; ++j) {
          double want = 0;
          for (int64_t c = 0; c < kC; ++c)
            for (int64_t p = 0; p < kK; ++p)
              for (int64_t q = 0; q < kK; ++q)
                want += double(x[((n * kC + c) * kH + i + p) * kH + j + q]) * w[((o * kC + c) * kK + p) * kK + q];
          const float got = out[((n * kO + o) * kOut + i) * kOut + j];
          ASSERT_NEAR(got, want, 1e-4 * (1 + std::abs(want))) << when << " (" << n << ", " << o << ", " << i << ", " << j << ")";
        }
}

TEST(PredictConvWeights, APredictJobReordersOnItsFirstCallAndAgainExactlyWhenTheFilterIsWritten) {
  for (bool inline_run : {false, true}) {
    SCOPED_TRACE(inline_run ? "run inline" : "through the actors");
    Session session;
    const Shape filter_shape = {kO, kC, kK, kK}, x_shape = {kN, kC, kH, kH}, out_shape = {kN, kO, kOut, kOut};
    std::vector<float> w(kO * kC * kK * kK), v(w.size()), x(kN * kC * kH * kH), out(kN * kO * kOut * kOut), loss(out.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = std::sin(0.37f * i) * 0.1f;
      v[i] = std::cos(0.11f * i) * 0.1f;
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.23f * i);
    AF_ASSERT_OK(session.CreateVariable("w", {filter_shape, DType::kFloat32}, w.data()));
    AF_ASSERT_OK(session.CreateVariable("v", {filter_shape, DType::kFloat32}, v.data()));
    JobOptions options;
    options.run_inline = inline_run;
    auto predict = ValueOrDie(session.Compile(Conv("predict", "predict", "w"), options));
    auto train_w = ValueOrDie(session.Compile(Conv("train_w", "train", "w"), options));
    auto train_v = ValueOrDie(session.Compile(Conv("train_v", "train", "v"), options));
    std::vector<float> lr = {0.001f};

    // One predict call; its reorders of the filter (train calls reorder their own).
    auto call = [&](const std::string& when) -> int64_t {
      const int64_t before = ConvWeightsReorders();
      Status status = predict->Run({View(x, x_shape)}, {View(out, out_shape)});
      const int64_t reorders = ConvWeightsReorders() - before;
      EXPECT_TRUE(status.ok()) << when << ": " << status.ToString();
      std::vector<float> now(w.size());
      EXPECT_TRUE(session.GetVariable("w", now.data(), now.size() * sizeof(float)).ok());
      ExpectConv(x, now, out, when);
      return reorders;
    };
    auto train = [&](CompiledJob& job) {
      AF_ASSERT_OK(job.Run({View(x, x_shape), View(lr, {1})}, {View(loss, out_shape)}));
    };
    EXPECT_EQ(call("first call"), 1) << "the predict job's conv did not reorder its filter";
    const std::vector<float> first = out;
    EXPECT_EQ(call("second call"), 0) << "reordered again without a write";
    train(*train_v);
    EXPECT_EQ(call("after training another variable"), 0) << "a write to another variable reordered";
    for (int step = 0; step < 3; ++step) {
      train(*train_w);
      EXPECT_EQ(call("after train step " + std::to_string(step)), 1);
    }
    double moved = 0;
    for (size_t i = 0; i < out.size(); ++i) moved = std::max(moved, double(std::abs(out[i] - first[i])));
    EXPECT_GT(moved, 1e-2) << "training did not move the predictions: the test would not see a stale filter";
    for (float& value : w) value = -value;
    AF_ASSERT_OK(session.SetVariable("w", {filter_shape, DType::kFloat32}, w.data()));
    EXPECT_EQ(call("after SetVariable"), 1);
    EXPECT_EQ(call("after SetVariable, again"), 0);
    // The same bytes written again: the version decides, the bytes are not compared.
    AF_ASSERT_OK(session.SetVariable("w", {filter_shape, DType::kFloat32}, w.data()));
    EXPECT_EQ(call("after SetVariable of the same values"), 1) << "the kernel did not get the variable's version";
  }
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

// A predict job's weights in oneDNN's packed layout (kernels/matmul_packed.h) through a session:
// packed on the first call, again exactly when something wrote the variable (a train job's call,
// SetVariable), never for a write to another variable; every result equals the reference over
// the variable's value at the call.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "graph/test_util.h"
#include "kernels/matmul_packed.h"
#include "session/session.h"
#include "session/weights_test_util.h"

namespace actorflow {
namespace graph {
namespace {

using testing::ValueOrDie;
constexpr auto View = &testing::FloatView;

constexpr int64_t kRows = 32, kIn = 64, kOut = 96;

// out = x . weight (predict), or the same with loss = out^2 and SGD on `weight` (train).
JobBuilder Dense(const std::string& name, const std::string& type, const std::string& weight) {
  return testing::OneWeightJob(name, type, "matmul", {kRows, kIn}, weight, {kIn, kOut});
}

// out == x . w (kRows x kIn times kIn x kOut) in double, to float rounding.
void ExpectProduct(const std::vector<float>& x, const float* w, const std::vector<float>& out, const std::string& when) {
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kOut; ++j) {
      double want = 0;
      for (int64_t p = 0; p < kIn; ++p) want += double(x[i * kIn + p]) * w[p * kOut + j];
      ASSERT_NEAR(out[i * kOut + j], want, 1e-4 * (1 + std::abs(want))) << when << " (" << i << ", " << j << ")";
    }
}

TEST(PackedWeights, PackedOnFirstCallAndAgainExactlyWhenTheVariableIsWritten) {
  Session session;
  std::vector<float> w(kIn * kOut), v(kIn * kOut), x(kRows * kIn), out(kRows * kOut), loss(kRows * kOut);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = std::sin(0.37f * i) * 0.1f;
    v[i] = std::cos(0.11f * i) * 0.1f;
  }
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.23f * i);
  AF_ASSERT_OK(session.CreateVariable("w", {{kIn, kOut}, DType::kFloat32}, w.data()));
  AF_ASSERT_OK(session.CreateVariable("v", {{kIn, kOut}, DType::kFloat32}, v.data()));
  JobOptions options;
  options.run_inline = false;  // one kernel per task: every pack counted below is this job's
  auto predict = ValueOrDie(session.Compile(Dense("predict", "predict", "w"), options));
  auto train_w = ValueOrDie(session.Compile(Dense("train_w", "train", "w"), options));
  auto train_v = ValueOrDie(session.Compile(Dense("train_v", "train", "v"), options));
  std::vector<float> lr = {0.01f};

  auto check = [&](const std::string& when) {
    std::vector<float> now(kIn * kOut);
    AF_ASSERT_OK(session.GetVariable("w", now.data(), now.size() * sizeof(float)));
    ExpectProduct(x, now.data(), out, when);
  };
  const int64_t before = PackedGemm::TotalPacks();
  AF_ASSERT_OK(predict->Run({View(x, {kRows, kIn})}, {View(out, {kRows, kOut})}));
  check("first call");
  EXPECT_EQ(PackedGemm::TotalPacks(), before + 1) << "the predict job's matmul did not pack its weight";
  AF_ASSERT_OK(predict->Run({View(x, {kRows, kIn})}, {View(out, {kRows, kOut})}));
  EXPECT_EQ(PackedGemm::TotalPacks(), before + 1) << "packed again without a write";

  AF_ASSERT_OK(train_v->Run({View(x, {kRows, kIn}), View(lr, {1})}, {View(loss, {kRows, kOut})}));
  AF_ASSERT_OK(predict->Run({View(x, {kRows, kIn})}, {View(out, {kRows, kOut})}));
  check("after training another variable");
  EXPECT_EQ(PackedGemm::TotalPacks(), before + 1) << "a write to another variable repacked";

  for (int step = 0; step < 3; ++step) {
    AF_ASSERT_OK(train_w->Run({View(x, {kRows, kIn}), View(lr, {1})}, {View(loss, {kRows, kOut})}));
    AF_ASSERT_OK(predict->Run({View(x, {kRows, kIn})}, {View(out, {kRows, kOut})}));
    check("after train step " + std::to_string(step));
    EXPECT_EQ(PackedGemm::TotalPacks(), before + 2 + step);
  }
  for (float& value : w) value = -value;
  AF_ASSERT_OK(session.SetVariable("w", {{kIn, kOut}, DType::kFloat32}, w.data()));
  AF_ASSERT_OK(predict->Run({View(x, {kRows, kIn})}, {View(out, {kRows, kOut})}));
  check("after SetVariable");
  EXPECT_EQ(PackedGemm::TotalPacks(), before + 5);
}

// A variable over outside memory with its owner's counter (nn.Graph's parameters over eager
// tensors): packed, again after the owner bumps its counter, and a job writing the variable
// bumps the owner's counter too; without a counter the variable is never packed.
TEST(PackedWeights, AVariableOverOutsideMemoryFollowsItsOwnersCounter) {
  Session session;
  std::shared_ptr<void> storage(std::aligned_alloc(64, kIn * kOut * sizeof(float)), std::free);
  float* w = static_cast<float*>(storage.get());
  for (int64_t i = 0; i < kIn * kOut; ++i) w[i] = std::sin(0.19f * i) * 0.1f;
  auto counter = std::make_shared<std::atomic<int64_t>>(0);
  ASSERT_EQ(ValueOrDie(session.CreateVariableOver("w", {{kIn, kOut}, DType::kFloat32}, storage, counter)), "w");
  JobOptions options;
  options.run_inline = false;
  auto predict = ValueOrDie(session.Compile(Dense("predict", "predict", "w"), options));
  auto train = ValueOrDie(session.Compile(Dense("train", "train", "w"), options));
  std::vector<float> x(kRows * kIn), out(kRows * kOut), loss(kRows * kOut), lr = {0.01f};
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.29f * i);
  auto check = [&](const std::string& when) { ExpectProduct(x, w, out, when); };
  const int64_t before = PackedGemm::TotalPacks();
  AF_ASSERT_OK(predict->Run({View(x, {kRows, kIn})}, {View(out, {kRows, kOut})}));
  check("first call");
  EXPECT_EQ(PackedGemm::TotalPacks(), before + 1);
  for (int64_t i = 0; i < kIn * kOut; ++i) w[i] = -w[i];  // the owner's write, then its bump
  counter->fetch_add(1);
  AF_ASSERT_OK(predict->Run({View(x, {kRows, kIn})}, {View(out, {kRows, kOut})}));
  check("after the owner's write");
  EXPECT_EQ(PackedGemm::TotalPacks(), before + 2);
  const int64_t seen = counter->load();
  AF_ASSERT_OK(train->Run({View(x, {kRows, kIn}), View(lr, {1})}, {View(loss, {kRows, kOut})}));
  EXPECT_GT(counter->load(), seen) << "a job writing the variable must move its owner's counter";
  AF_ASSERT_OK(predict->Run({View(x, {kRows, kIn})}, {View(out, {kRows, kOut})}));
  check("after the train job");
  EXPECT_EQ(PackedGemm::TotalPacks(), before + 3);

  std::shared_ptr<void> plain(std::aligned_alloc(64, kIn * kOut * sizeof(float)), std::free);
  std::memcpy(plain.get(), w, kIn * kOut * sizeof(float));
  ASSERT_EQ(ValueOrDie(session.CreateVariableOver("v", {{kIn, kOut}, DType::kFloat32}, plain)), "v");
  auto uncounted = ValueOrDie(session.Compile(Dense("predict_v", "predict", "v"), options));
  const int64_t packs = PackedGemm::TotalPacks();
  AF_ASSERT_OK(uncounted->Run({View(x, {kRows, kIn})}, {View(out, {kRows, kOut})}));
  check("no counter");
  EXPECT_EQ(PackedGemm::TotalPacks(), packs) << "a variable whose owner's writes are not counted was packed";
}

// The train job writes its weight every call: its own matmul never keeps a packed copy.
TEST(PackedWeights, ATrainJobsOwnMatmulsDoNotPack) {
  Session session;
  std::vector<float> w(kIn * kOut, 0.01f), x(kRows * kIn, 1.0f), loss(kRows * kOut), lr = {0.01f};
  AF_ASSERT_OK(session.CreateVariable("w", {{kIn, kOut}, DType::kFloat32}, w.data()));
  auto train = ValueOrDie(session.Compile(Dense("train", "train", "w"), JobOptions{}));
  const int64_t before = PackedGemm::TotalPacks();
  for (int step = 0; step < 3; ++step)
    AF_ASSERT_OK(train->Run({View(x, {kRows, kIn}), View(lr, {1})}, {View(loss, {kRows, kOut})}));
  EXPECT_EQ(PackedGemm::TotalPacks(), before);
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

// Session end to end: compile -> Runtime -> run, on a tiny predict job and a train step checked
// against a hand computation. Bounded by ctest's TIMEOUT (a deadlock fails, never hangs).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <mutex>

#include "session/session.h"
#include "graph/test_util.h"

namespace actorflow {
namespace graph {
namespace {

using testing::ValueOrDie;

TensorView View(std::vector<float>& data, Shape shape) { return TensorView{data.data(), {std::move(shape), DType::kFloat32}}; }

TEST(SessionTest, PredictJobRunsAndWatches) {
  Session session;
  JobBuilder b = ValueOrDie(JobBuilder::Create("dense", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {2, 3}, DType::kFloat32, "d.py:1"));
  std::string w = ValueOrDie(b.AddVariable("dense-weight", {3, 2}, DType::kFloat32, "d.py:2"));
  std::string bias = ValueOrDie(b.AddVariable("dense-bias", {2}, DType::kFloat32, "d.py:2"));
  std::string mm = ValueOrDie(b.AddOp("matmul", "dense-matmul", {x, w}, {}, "d.py:3"))->output_ref(0);
  std::string y = ValueOrDie(b.AddOp("bias_add", "dense-bias_add", {mm, bias}, {}, "d.py:3"))->output_ref(0);
  std::string r = ValueOrDie(b.AddOp("relu", "act", {y}, {}, "d.py:4"))->output_ref(0);
  AF_ASSERT_OK(b.SetOutputs({r}));
  AF_ASSERT_OK(b.AddWatch(y, "pre", false, "d.py:5"));
  std::vector<float> W = {1, -1, 2, 0, -3, 1}, B = {0.5f, -0.5f};
  AF_ASSERT_OK(session.CreateVariable("dense-weight", {{3, 2}, DType::kFloat32}, W.data()));
  AF_ASSERT_OK(session.CreateVariable("dense-bias", {{2}, DType::kFloat32}, B.data()));
  std::mutex mu;
  std::vector<std::vector<float>> watched;
  auto job = ValueOrDie(session.Compile(b, JobOptions{}, [&](const std::string& name, int64_t, const std::vector<TensorView>& v) {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(name, "pre");
    watched.emplace_back(v[0].as<float>(), v[0].as<float>() + v[0].num_elements());
  }));
  ASSERT_EQ(job->input_descs().size(), 1u);
  EXPECT_EQ(job->output_descs()[0].name, "act/out");
  std::vector<float> X = {1, 2, 3, -1, 0, 1}, out(4);
  AF_ASSERT_OK(job->Run({View(X, {2, 3})}, {View(out, {2, 2})}));
  // pre = X.W + B = [[1+4-9+.5, -1+0+3-.5], [-1+0-3+.5, 1+0+1-.5]] = [[-3.5, 1.5], [-3.5, 1.5]]
  std::vector<float> pre = {-3.5f, 1.5f, -3.5f, 1.5f};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(out[i], std::max(pre[i], 0.f));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(watched.size(), 1u);
  EXPECT_EQ(watched[0], pre);
  // Wrong input shape: an error naming the input, and the job still works afterwards.
  std::vector<float> wrong(6);
  Status bad = job->Run({View(wrong, {3, 2})}, {View(out, {2, 2})});
  EXPECT_NE(bad.message().find("input 'x'"), std::string::npos) << bad.message();
}

// loss_i = (x_i . w - t_i)^2 per sample; OneFlow semantics: dL/dw = sum_i 2 (x_i.w - t_i) x_i / N.
struct Regression {
  JobBuilder builder;
};
JobBuilder BuildRegression(const std::string& job_type, const std::string& name) {
  JobBuilder b = ValueOrDie(JobBuilder::Create(name, job_type));
  std::string x = ValueOrDie(b.AddInput("x", {2, 3}, DType::kFloat32, "r.py:1"));
  std::string t = ValueOrDie(b.AddInput("t", {2, 1}, DType::kFloat32, "r.py:2"));
  std::string w = ValueOrDie(b.AddVariable("w", {3, 1}, DType::kFloat32, "r.py:3"));
  std::string p = ValueOrDie(b.AddOp("matmul", "pred", {x, w}, {}, "r.py:4"))->output_ref(0);
  std::string d = ValueOrDie(b.AddOp("sub", "err", {p, t}, {}, "r.py:5"))->output_ref(0);
  std::string s = ValueOrDie(b.AddOp("square", "sq", {d}, {}, "r.py:6"))->output_ref(0);
  std::string loss = ValueOrDie(b.AddOp("reshape", "loss", {s}, Attrs{{"shape", std::vector<int64_t>{2}}}, "r.py:7"))->output_ref(0);
  if (job_type == "train") {
    if (!b.AddLoss(loss).ok()) throw std::runtime_error("AddLoss");
    OptimizerSpec spec;
    spec.type = "sgd";
    if (!b.SetOptimizer(spec).ok()) throw std::runtime_error("SetOptimizer");
  }
  if (!b.SetOutputs({loss}).ok()) throw std::runtime_error("SetOutputs");
  return b;
}

TEST(SessionTest, TrainStepsMatchHandComputationAndPredictSharesVariables) {
  Session session;
  std::vector<float> w = {0.5f, -1.f, 2.f};
  AF_ASSERT_OK(session.CreateVariable("w", {{3, 1}, DType::kFloat32}, w.data()));
  auto train = ValueOrDie(session.Compile(BuildRegression("train", "reg_train"), JobOptions{}));
  auto predict = ValueOrDie(session.Compile(BuildRegression("predict", "reg_predict"), JobOptions{}));
  ASSERT_EQ(train->input_descs().size(), 3u);
  EXPECT_EQ(train->input_descs()[2].name, "learning_rate");
  std::vector<float> X = {1, 2, 3, -1, 0.5f, 1}, T = {1, -2}, lr = {0.1f}, loss(2);
  std::vector<double> ref(w.begin(), w.end());
  for (int step = 0; step < 3; ++step) {
    AF_ASSERT_OK(train->Run({View(X, {2, 3}), View(T, {2, 1}), View(lr, {1})}, {View(loss, {2})}));
    std::vector<double> grad(3, 0.0);
    for (int i = 0; i < 2; ++i) {
      double p = 0;
      for (int k = 0; k < 3; ++k) p += X[i * 3 + k] * ref[k];
      double e = p - T[i];
      EXPECT_NEAR(loss[i], e * e, 1e-4 * std::max(1.0, e * e)) << "step " << step;
      for (int k = 0; k < 3; ++k) grad[k] += 2 * e * X[i * 3 + k] / 2;
    }
    for (int k = 0; k < 3; ++k) ref[k] -= 0.1 * grad[k];
  }
  std::vector<float> learned(3);
  AF_ASSERT_OK(session.GetVariable("w", learned.data(), learned.size() * sizeof(float)));
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(learned[k], ref[k], 1e-4);
  // The predict job reads what training wrote; pushing to train then calling predict drains train.
  std::atomic<int> done{0};
  std::vector<std::vector<float>> async_loss(20, std::vector<float>(2));
  for (int i = 0; i < 20; ++i)
    ValueOrDie(train->Push({View(X, {2, 3}), View(T, {2, 1}), View(lr, {1})}, {View(async_loss[i], {2})},
                           [&](int64_t, const Status& s) { EXPECT_TRUE(s.ok()); done.fetch_add(1); }));
  std::vector<float> predicted(2);
  AF_ASSERT_OK(predict->Run({View(X, {2, 3}), View(T, {2, 1})}, {View(predicted, {2})}));
  EXPECT_EQ(done.load(), 20);
  AF_ASSERT_OK(session.GetVariable("w", learned.data(), learned.size() * sizeof(float)));
  for (int i = 0; i < 2; ++i) {
    double p = 0;
    for (int k = 0; k < 3; ++k) p += X[i * 3 + k] * learned[k];
    EXPECT_NEAR(predicted[i], (p - T[i]) * (p - T[i]), 1e-4);
  }
  // Iterations are sequential through the variable: each async loss is below the previous.
  for (int i = 1; i < 20; ++i) EXPECT_LT(async_loss[i][0] + async_loss[i][1], async_loss[i - 1][0] + async_loss[i - 1][1] + 1e-6);
}

TEST(SessionTest, MissingVariableAndShutdown) {
  Session session;
  auto missing = session.Compile(BuildRegression("predict", "reg"), JobOptions{});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'w'"), std::string::npos) << missing.status().message();
  std::vector<float> w(3, 0.f);
  AF_ASSERT_OK(session.CreateVariable("w", {{3, 1}, DType::kFloat32}, w.data()));
  auto job = ValueOrDie(session.Compile(BuildRegression("predict", "reg"), JobOptions{}));
  session.Reset();
  std::vector<float> X(6), T(2), out(2);
  Status after = job->Run({View(X, {2, 3}), View(T, {2, 1})}, {View(out, {2})});
  EXPECT_EQ(after.code(), StatusCode::kFailedPrecondition);
}

TEST(SessionTest, DeleteVariableOnlyWhenNoJobHoldsIt) {
  Session session;
  std::vector<float> w(3, 0.f);
  EXPECT_EQ(session.DeleteVariable("w").code(), StatusCode::kNotFound);
  AF_ASSERT_OK(session.CreateVariable("w", {{3, 1}, DType::kFloat32}, w.data()));
  AF_ASSERT_OK(session.DeleteVariable("w"));
  EXPECT_FALSE(session.HasVariable("w"));
  AF_ASSERT_OK(session.CreateVariable("w", {{3, 1}, DType::kFloat32}, w.data()));
  auto job = ValueOrDie(session.Compile(BuildRegression("predict", "reg"), JobOptions{}));
  Status held = session.DeleteVariable("w");
  EXPECT_EQ(held.code(), StatusCode::kFailedPrecondition) << held.message();
  EXPECT_TRUE(session.HasVariable("w"));
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

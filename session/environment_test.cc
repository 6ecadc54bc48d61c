// The process's environment: OS threads do not grow with compiled jobs, and jobs are ordered
// per shared variable (disjoint jobs overlap, sharing jobs see consistent values). Bounded by
// ctest's TIMEOUT (a deadlock fails, never hangs).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <dirent.h>
#include <thread>

#include "graph/test_util.h"
#include "session/session.h"

namespace actorflow {
namespace {

using graph::JobBuilder;
using graph::testing::BuildMlp;
using graph::testing::ValueOrDie;

int OsThreads() {
  int count = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir))
    if (entry->d_name[0] != '.') ++count;
  closedir(dir);
  return count;
}

// y = relu(x): no variables.
JobBuilder ReluJob(const std::string& name) {
  JobBuilder b = ValueOrDie(JobBuilder::Create(name, "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {4}, DType::kFloat32, "relu.py:1"));
  std::string y = ValueOrDie(b.AddOp("relu", name + "-relu", {x}, {}, "relu.py:2"))->output_ref(0);
  if (!b.SetOutputs({y}).ok()) throw std::runtime_error("SetOutputs");
  return b;
}

TensorView View(std::vector<float>& data, Shape shape) { return TensorView{data.data(), {std::move(shape), DType::kFloat32}}; }
TensorView View(std::vector<int32_t>& data, Shape shape) { return TensorView{data.data(), {std::move(shape), DType::kInt32}}; }

TEST(EnvironmentTest, ThreadsDoNotGrowWithCompiledJobs) {
  Session session;
  std::vector<std::shared_ptr<CompiledJob>> jobs;
  jobs.push_back(ValueOrDie(session.Compile(ReluJob("relu0"), JobOptions{})));
  const int after_first = OsThreads();
  ASSERT_GT(after_first, 0);
  for (int i = 1; i < 20; ++i) jobs.push_back(ValueOrDie(session.Compile(ReluJob("relu" + std::to_string(i)), JobOptions{})));
  std::vector<float> x = {-1, 2, -3, 4}, y(4);
  for (auto& job : jobs) ASSERT_TRUE(job->Run({View(x, {4})}, {View(y, {4})}).ok());
  EXPECT_EQ(y, (std::vector<float>{0, 2, 0, 4}));
  EXPECT_EQ(OsThreads(), after_first) << "20 compiled jobs must share one scheduler";
}

// A big train step, so that its iterations stay in flight for a while.
struct SlowTrain {
  std::shared_ptr<CompiledJob> job;
  std::vector<float> x, lr{0.01f}, loss;
  std::vector<int32_t> labels;
  static constexpr int64_t kN = 256, kD = 1024, kH = 1024, kC = 10;
  explicit SlowTrain(Session& session, JobOptions options)
      : x(kN * kD, 0.01f), loss(kN), labels(kN, 1) {
    std::vector<float> w1(kD * kH, 0.01f), b1(kH, 0.f), w2(kH * kC, 0.02f);
    if (!session.CreateVariable("hidden-weight", {{kD, kH}, DType::kFloat32}, w1.data()).ok() ||
        !session.CreateVariable("hidden-bias", {{kH}, DType::kFloat32}, b1.data()).ok() ||
        !session.CreateVariable("output-weight", {{kH, kC}, DType::kFloat32}, w2.data()).ok())
      throw std::runtime_error("CreateVariable");
    job = ValueOrDie(session.Compile(BuildMlp("train", kN, kD, kH, kC, "sgd", "slow_train").builder, options));
  }
  void Push(std::atomic<int>* done) {
    ValueOrDie(job->Push({View(x, {kN, kD}), View(labels, {kN}), View(lr, {1})}, {View(loss, {kN})},
                         [done](int64_t, const Status& s) {
                           EXPECT_TRUE(s.ok()) << s.message();
                           done->fetch_add(1);
                         }));
  }
};

TEST(EnvironmentTest, JobsSharingNoVariableRunConcurrently) {
  Session session;
  JobOptions options;
  options.num_workers = 2;  // one worker busy in the slow job's kernels, the other free
  options.kernel_threads = 1;
  SlowTrain slow(session, options);
  auto fast = ValueOrDie(session.Compile(ReluJob("fast"), options));
  std::atomic<int> slow_done{0};
  for (int i = 0; i < 3; ++i) slow.Push(&slow_done);
  std::vector<float> x = {-1, 2, -3, 4}, y(4);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(fast->Run({View(x, {4})}, {View(y, {4})}).ok());
  // Draining the slow job first (per-session ordering) would have finished all three steps.
  EXPECT_LT(slow_done.load(), 3) << "the job without shared variables waited for the other job";
  EXPECT_EQ(y, (std::vector<float>{0, 2, 0, 4}));
  slow.job->Drain();
  EXPECT_EQ(slow_done.load(), 3);
}

TEST(EnvironmentTest, JobsSharingAVariableAreOrdered) {
  Session session;
  JobOptions options;
  options.num_workers = 2;
  options.kernel_threads = 1;
  SlowTrain slow(session, options);
  // Same layer names: reads the variables the train job writes.
  auto predict = ValueOrDie(session.Compile(
      BuildMlp("predict", SlowTrain::kN, SlowTrain::kD, SlowTrain::kH, SlowTrain::kC, "sgd", "predict").builder, options));
  std::atomic<int> slow_done{0};
  for (int i = 0; i < 3; ++i) slow.Push(&slow_done);
  std::vector<float> first(SlowTrain::kN), again(SlowTrain::kN);
  ASSERT_TRUE(predict->Run({View(slow.x, {SlowTrain::kN, SlowTrain::kD}), View(slow.labels, {SlowTrain::kN})},
                           {View(first, {SlowTrain::kN})}).ok());
  EXPECT_EQ(slow_done.load(), 3) << "a reader of the trained variables started before the writer's iterations ended";
  ASSERT_TRUE(predict->Run({View(slow.x, {SlowTrain::kN, SlowTrain::kD}), View(slow.labels, {SlowTrain::kN})},
                           {View(again, {SlowTrain::kN})}).ok());
  EXPECT_EQ(first, again);  // nothing wrote the variables in between
  // And the writer waits for the reader: a train call after async predicts sees their end.
  std::atomic<int> predicted{0};
  for (int i = 0; i < 4; ++i)
    ValueOrDie(predict->Push({View(slow.x, {SlowTrain::kN, SlowTrain::kD}), View(slow.labels, {SlowTrain::kN})},
                             {View(again, {SlowTrain::kN})}, [&](int64_t, const Status&) { predicted.fetch_add(1); }));
  slow.Push(&slow_done);
  EXPECT_EQ(predicted.load(), 4);
  slow.job->Drain();
}

}  // namespace
}  // namespace actorflow

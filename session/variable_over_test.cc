// Session::CreateVariableOver: a variable over outside memory (an eager tensor's storage). A
// compiled train job updates that memory in place, the owner's writes are seen by the next
// call, one storage is one variable, and deleting follows the jobs holding it, not the owner.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "graph/test_util.h"
#include "session/session.h"

namespace actorflow {
namespace {

using graph::JobBuilder;
using graph::testing::ValueOrDie;

std::shared_ptr<void> Aligned(size_t bytes) {
  return std::shared_ptr<void>(std::aligned_alloc(64, (bytes + 63) / 64 * 64), [](void* p) { std::free(p); });
}

// loss = sum(x . w) over a (1, 2) x and w (2, 1); SGD with learning rate 0.5: dL/dw = x^T.
JobBuilder TrainJob(const std::string& variable) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("step", "train"));
  std::string x = ValueOrDie(b.AddInput("x", {1, 2}, DType::kFloat32, "t.py:1"));
  std::string w = ValueOrDie(b.AddVariable(variable, {2, 1}, DType::kFloat32, "t.py:2"));
  std::string y = ValueOrDie(b.AddOp("matmul", "y", {x, w}, {}, "t.py:3"))->output_ref(0);
  std::string loss = ValueOrDie(b.AddOp("reshape", "loss", {y}, Attrs{{"shape", std::vector<int64_t>{1}}}, "t.py:4"))->output_ref(0);
  if (!b.AddLoss(loss).ok()) throw std::runtime_error("AddLoss");
  graph::OptimizerSpec spec;
  spec.type = "sgd";
  if (!b.SetOptimizer(spec).ok()) throw std::runtime_error("SetOptimizer");
  if (!b.SetOutputs({loss}).ok()) throw std::runtime_error("SetOutputs");
  return b;
}

TEST(VariableOverTest, JobsUpdateTheOwnersMemoryAndSeeItsWrites) {
  Session session;
  const TensorDesc desc{{2, 1}, DType::kFloat32};
  std::shared_ptr<void> storage = Aligned(desc.byte_size());
  float* w = static_cast<float*>(storage.get());
  w[0] = 1;
  w[1] = 2;
  EXPECT_EQ(ValueOrDie(session.CreateVariableOver("w", desc, storage)), "w");
  // The same storage again (another graph over the same module): the same variable.
  EXPECT_EQ(ValueOrDie(session.CreateVariableOver("other-name", desc, storage)), "w");
  EXPECT_FALSE(session.HasVariable("other-name"));
  auto job = ValueOrDie(session.Compile(TrainJob("w"), JobOptions{}));
  ASSERT_EQ(job->input_descs().size(), 2u);  // x and the learning rate
  float x[2] = {3, 4}, rate[1] = {0.5f}, loss[1] = {0};
  AF_ASSERT_OK(job->Run({TensorView{x, {{1, 2}, DType::kFloat32}}, TensorView{rate, {{1}, DType::kFloat32}}},
                        {TensorView{loss, {{1}, DType::kFloat32}}}));
  EXPECT_FLOAT_EQ(loss[0], 3 * 1 + 4 * 2);
  EXPECT_FLOAT_EQ(w[0], 1 - 0.5f * 3);  // updated in the owner's memory
  EXPECT_FLOAT_EQ(w[1], 2 - 0.5f * 4);
  w[0] = 10;  // the owner writes between calls; the next call reads it
  w[1] = 0;
  AF_ASSERT_OK(job->Run({TensorView{x, {{1, 2}, DType::kFloat32}}, TensorView{rate, {{1}, DType::kFloat32}}},
                        {TensorView{loss, {{1}, DType::kFloat32}}}));
  EXPECT_FLOAT_EQ(loss[0], 30);
  float copy[2];
  AF_ASSERT_OK(session.GetVariable("w", copy, sizeof(copy)));
  EXPECT_FLOAT_EQ(copy[0], 10 - 1.5f);
  // Held by a job: not deleted; once the job is gone it is, whoever else owns the memory.
  EXPECT_EQ(session.DeleteVariable("w").code(), StatusCode::kFailedPrecondition);
  job.reset();
  AF_ASSERT_OK(session.DeleteVariable("w"));
  EXPECT_FLOAT_EQ(w[0], 10 - 1.5f);  // the owner's memory lives on
}

TEST(VariableOverTest, BadStorageIsRefused) {
  Session session;
  const TensorDesc desc{{2}, DType::kFloat32};
  std::shared_ptr<void> storage = Aligned(64);
  std::shared_ptr<void> misaligned(storage, static_cast<char*>(storage.get()) + 4);
  auto bad = session.CreateVariableOver("v", desc, misaligned);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("aligned"), std::string::npos);
  EXPECT_FALSE(session.CreateVariableOver("v", desc, nullptr).ok());
  AF_ASSERT_OK(session.CreateVariable("taken", desc, nullptr));
  auto taken = session.CreateVariableOver("taken", desc, storage);
  ASSERT_FALSE(taken.ok());
  EXPECT_NE(taken.status().message().find("already exists"), std::string::npos);
  EXPECT_FALSE(session.CreateVariableOver("zero", {{0}, DType::kFloat32}, storage).ok());
}

}  // namespace
}  // namespace actorflow

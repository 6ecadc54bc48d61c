// Helpers shared by the graph tests: a tiny MLP job built through JobBuilder.
#pragma once

#include <gtest/gtest.h>

#include "actors/proto/plan.pb.h"
#include "graph/job_builder.h"

namespace actorflow {
namespace graph {
namespace testing {

#define AF_ASSERT_OK(expr)                                 \
  do {                                                     \
    ::actorflow::Status _s = (expr);                       \
    ASSERT_TRUE(_s.ok()) << _s.message();                  \
  } while (0)

template <typename T>
T ValueOrDie(StatusOr<T> v) {
  if (!v.ok()) throw std::runtime_error(v.status().message());
  return std::move(v).value();
}

struct Mlp {
  JobBuilder builder;
  std::string x, labels, w1, b1, w2, logits, loss;
};

// x(N,D) -> matmul w1(D,H) -> bias_add b1 -> relu -> matmul w2(H,C) = logits;
// loss = sparse_softmax_cross_entropy(labels, logits). Train jobs add the loss and `optimizer`.
inline Mlp BuildMlp(const std::string& job_type, int64_t n, int64_t d, int64_t h, int64_t c,
                    const std::string& optimizer = "sgd", const std::string& name = "") {
  Mlp m{ValueOrDie(JobBuilder::Create(name.empty() ? "mlp_" + job_type : name, job_type)), "", "", "", "", "", "", ""};
  JobBuilder& b = m.builder;
  m.x = ValueOrDie(b.AddInput("x", {n, d}, DType::kFloat32, "mlp.py:1"));
  m.labels = ValueOrDie(b.AddInput("labels", {n}, DType::kInt32, "mlp.py:2"));
  m.w1 = ValueOrDie(b.AddVariable("hidden-weight", {d, h}, DType::kFloat32, "mlp.py:3"));
  m.b1 = ValueOrDie(b.AddVariable("hidden-bias", {h}, DType::kFloat32, "mlp.py:3"));
  m.w2 = ValueOrDie(b.AddVariable("output-weight", {h, c}, DType::kFloat32, "mlp.py:4"));
  std::string t = ValueOrDie(b.AddOp("matmul", "hidden-matmul", {m.x, m.w1}, {}, "mlp.py:3"))->output_ref(0);
  t = ValueOrDie(b.AddOp("bias_add", "hidden-bias_add", {t, m.b1}, {}, "mlp.py:3"))->output_ref(0);
  t = ValueOrDie(b.AddOp("relu", "hidden-relu", {t}, {}, "mlp.py:3"))->output_ref(0);
  m.logits = ValueOrDie(b.AddOp("matmul", "output-matmul", {t, m.w2}, {}, "mlp.py:4"))->output_ref(0);
  m.loss = ValueOrDie(b.AddOp("sparse_softmax_cross_entropy", "loss", {m.labels, m.logits}, {}, "mlp.py:5"))->output_ref(0);
  if (job_type == "train") {
    if (!b.AddLoss(m.loss).ok()) throw std::runtime_error("AddLoss");
    OptimizerSpec spec;
    spec.type = optimizer;
    if (!b.SetOptimizer(spec).ok()) throw std::runtime_error("SetOptimizer");
  }
  if (!b.SetOutputs({m.loss}).ok()) throw std::runtime_error("SetOutputs");
  return m;
}

// The task of `plan` named `name`, or null.
inline const plan::Task* FindTask(const plan::Plan& plan, const std::string& name) {
  for (const plan::Task& t : plan.tasks())
    if (t.name() == name) return &t;
  return nullptr;
}

}  // namespace testing
}  // namespace graph
}  // namespace actorflow

// Jobs of one op over one variable, for the tests of predict jobs' derived weights (matmul's
// packed right operand, conv2d's blocked filter): out = op(x, weight) (predict), or the same with
// loss = out^2 and SGD on the weight (train).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "graph/test_util.h"

namespace actorflow {
namespace graph {
namespace testing {

inline JobBuilder OneWeightJob(const std::string& name, const std::string& type, const std::string& op, const Shape& x_shape,
                               const std::string& weight, const Shape& weight_shape, const Attrs& attrs = {}) {
  JobBuilder b = ValueOrDie(JobBuilder::Create(name, type));
  std::string x = ValueOrDie(b.AddInput("x", x_shape, DType::kFloat32, "p.py:1"));
  std::string w = ValueOrDie(b.AddVariable(weight, weight_shape, DType::kFloat32, "p.py:2"));
  std::string out = ValueOrDie(b.AddOp(op, op, {x, w}, attrs, "p.py:3"))->output_ref(0);
  if (type == "train") {
    out = ValueOrDie(b.AddOp("square", "sq", {out}, {}, "p.py:4"))->output_ref(0);
    if (!b.AddLoss(out).ok()) throw std::runtime_error("AddLoss");
    OptimizerSpec spec;
    spec.type = "sgd";
    if (!b.SetOptimizer(spec).ok()) throw std::runtime_error("SetOptimizer");
  }
  if (!b.SetOutputs({out}).ok()) throw std::runtime_error("SetOutputs");
  return b;
}

inline TensorView FloatView(std::vector<float>& data, Shape shape) {
  return TensorView{data.data(), {std::move(shape), DType::kFloat32}};
}

}  // namespace testing
}  // namespace graph
}  // namespace actorflow

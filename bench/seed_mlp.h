// The seeds' MLP train job (784-512-10, batch 100, bias + relu, sparse softmax cross entropy,
// SGD) built through the C++ JobBuilder, for the C++ benchmarks.
#pragma once

#include <string>

#include "graph/job_builder.h"

namespace actorflow::bench {

inline constexpr int64_t kBatch = 100, kIn = 784, kHidden = 512, kClasses = 10;

// Feeds x (kBatch, kIn) float32 and labels (kBatch,) int32; variables w1, b1, w2, b2; output and
// loss: the per-sample loss.
inline StatusOr<graph::JobBuilder> SeedMlpJob(const std::string& name, int cpu_device_num, int gpu_device_num) {
  AF_ASSIGN_OR_RETURN(graph::JobBuilder b, graph::JobBuilder::Create(name, "train"));
  AF_RETURN_IF_ERROR(b.SetDeviceNum(cpu_device_num, gpu_device_num));
  AF_ASSIGN_OR_RETURN(std::string x, b.AddInput("x", {kBatch, kIn}, DType::kFloat32, "bench"));
  AF_ASSIGN_OR_RETURN(std::string labels, b.AddInput("labels", {kBatch}, DType::kInt32, "bench"));
  AF_ASSIGN_OR_RETURN(std::string w1, b.AddVariable("w1", {kIn, kHidden}, DType::kFloat32, "bench"));
  AF_ASSIGN_OR_RETURN(std::string b1, b.AddVariable("b1", {kHidden}, DType::kFloat32, "bench"));
  AF_ASSIGN_OR_RETURN(std::string w2, b.AddVariable("w2", {kHidden, kClasses}, DType::kFloat32, "bench"));
  AF_ASSIGN_OR_RETURN(std::string b2, b.AddVariable("b2", {kClasses}, DType::kFloat32, "bench"));
  AF_ASSIGN_OR_RETURN(const graph::Node* n, b.AddOp("matmul", "hidden-matmul", {x, w1}, {}, "bench"));
  AF_ASSIGN_OR_RETURN(n, b.AddOp("bias_add", "hidden-bias_add", {n->output_ref(0), b1}, {}, "bench"));
  AF_ASSIGN_OR_RETURN(n, b.AddOp("relu", "hidden-relu", {n->output_ref(0)}, {}, "bench"));
  AF_ASSIGN_OR_RETURN(n, b.AddOp("matmul", "output-matmul", {n->output_ref(0), w2}, {}, "bench"));
  AF_ASSIGN_OR_RETURN(n, b.AddOp("bias_add", "output-bias_add", {n->output_ref(0), b2}, {}, "bench"));
  AF_ASSIGN_OR_RETURN(n, b.AddOp("sparse_softmax_cross_entropy", "loss", {labels, n->output_ref(0)}, {}, "bench"));
  const std::string loss = n->output_ref(0);
  AF_RETURN_IF_ERROR(b.AddLoss(loss));
  graph::OptimizerSpec spec;
  spec.type = "sgd";
  AF_RETURN_IF_ERROR(b.SetOptimizer(spec));
  AF_RETURN_IF_ERROR(b.SetOutputs({loss}));
  return b;
}

}  // namespace actorflow::bench

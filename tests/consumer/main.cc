// Built against an installed actorflow (find_package(actorflow CONFIG REQUIRED)): a two-stage
// pipeline of user kernels, sync and async calls; then, given a saved model directory
// (argv[1]), loads it with actorflow::LoadModel and checks its output against a computation
// here. Exits non-zero on a wrong result.
#include <actorflow/model.h>
#include <actorflow/pipeline.h>
#include <actors/trace_recorder.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model_constants.h"

namespace {

bool RunPipeline() {
  using actorflow::DType;
  using actorflow::Status;
  using actorflow::StageArgs;
  const actorflow::TensorDesc vec{{4}, DType::kFloat32};
  actorflow::Pipeline p;
  auto x = p.AddInput("x", vec);
  auto doubled = p.AddStage("double", {x}, {vec}, [](const StageArgs& a) {
    for (int i = 0; i < 4; ++i) a.outputs[0].as<float>()[i] = 2 * a.inputs[0].as<float>()[i];
    return Status::Ok();
  });
  auto shifted = p.AddStage("shift", {doubled}, {vec}, [](const StageArgs& a) {
    for (int i = 0; i < 4; ++i) a.outputs[0].as<float>()[i] = a.inputs[0].as<float>()[i] + 1;
    return Status::Ok();
  });
  p.SetOutputs({shifted});
  Status s = p.Start();
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return false;
  }
  float in[4] = {0, 1, 2, 3}, out[4] = {}, out_async[4] = {};
  s = p.Run({{in, vec}}, {{out, vec}});
  auto future = p.PushAsync({{in, vec}}, {{out_async, vec}});
  Status async_status = future.get();
  bool ok = s.ok() && async_status.ok();
  for (int i = 0; i < 4; ++i) ok = ok && out[i] == 2 * in[i] + 1 && out_async[i] == out[i];
  std::printf("consumer pipeline: %s\n", ok ? "ok" : "WRONG");
  return ok;
}

bool RunModel(const char* directory) {
  using namespace consumer_model;
  auto model = actorflow::LoadModel(directory);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return false;
  }
  if (model->inputs().size() != 1 || model->inputs()[0].name != "x" || model->outputs().size() != 1) {
    std::fprintf(stderr, "consumer model: unexpected inputs or outputs\n");
    return false;
  }
  float x[kRows * kIn];
  std::copy(kX, kX + kRows * kIn, x);
  auto outputs = model->Run({actorflow::TensorView{x, model->inputs()[0].desc}});
  if (!outputs.ok()) {
    std::fprintf(stderr, "%s\n", outputs.status().ToString().c_str());
    return false;
  }
  const float* y = static_cast<const float*>((*outputs)[0].data.get());
  bool ok = (*outputs)[0].desc == actorflow::TensorDesc{{kRows, kOut}, actorflow::DType::kFloat32};
  for (int r = 0; ok && r < kRows; ++r)
    for (int c = 0; c < kOut; ++c) {
      float expected = kBias[c];
      for (int k = 0; k < kIn; ++k) expected += kX[r * kIn + k] * kWeight[k * kOut + c];
      expected = std::max(expected, 0.f);
      ok = ok && std::fabs(y[r * kOut + c] - expected) <= 1e-5f;
    }
  // A wrong input shape is an error, and the model still works afterwards.
  auto wrong = model->Run({actorflow::TensorView{x, {{kIn, kRows}, actorflow::DType::kFloat32}}});
  ok = ok && !wrong.ok() && wrong.status().message().find("input 'x'") != std::string::npos;
  ok = ok && model->Run({actorflow::TensorView{x, model->inputs()[0].desc}}).ok();
  std::printf("consumer model: %s\n", ok ? "ok" : "WRONG");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  bool ok = RunPipeline();
  if (argc > 1) ok = RunModel(argv[1]) && ok;
  return ok ? 0 : 1;
}

// Built against an installed actorflow (find_package(actorflow CONFIG REQUIRED)): a two-stage
// pipeline of user kernels, sync and async calls. Exits non-zero on a wrong result.
#include <actorflow/pipeline.h>
#include <actors/trace_recorder.h>

#include <cstdio>

int main() {
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
    return 1;
  }
  float in[4] = {0, 1, 2, 3}, out[4] = {}, out_async[4] = {};
  s = p.Run({{in, vec}}, {{out, vec}});
  auto future = p.PushAsync({{in, vec}}, {{out_async, vec}});
  Status async_status = future.get();
  bool ok = s.ok() && async_status.ok();
  for (int i = 0; i < 4; ++i) ok = ok && out[i] == 2 * in[i] + 1 && out_async[i] == out[i];
  std::printf("consumer: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

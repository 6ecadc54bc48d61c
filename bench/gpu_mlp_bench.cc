// The seed MLP (784-512-10, batch 100, SGD) one train step through the session, on the CPU or
// on GPU 0 (flow.config.gpu_device_num(1): every op on the GPU, the updates of the host-held
// variables on the CPU). Each step feeds x and labels from host memory and returns the loss to
// host memory, as a Python train loop does. Prints one JSON object:
//   gpu_mlp_bench cpu|gpu [steps] [warmup]
// {"device": "gpu", "steps": 200, "step_ms_median": ..., "step_ms_p10": ..., "step_ms_p90": ...,
//  "first_loss": ..., "last_loss": ...}; exit status 1 with {"error": ...} when it cannot run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/seed_mlp.h"
#include "session/session.h"

namespace actorflow {
namespace {

using bench::kBatch;
using bench::kClasses;
using bench::kHidden;
using bench::kIn;

int Fail(const Status& status) {
  std::string text;
  for (char c : status.message()) text += c == '"' || c == '\\' ? std::string("\\") + c : c == '\n' ? std::string(" ") : std::string(1, c);
  std::printf("{\"error\": \"%s\"}\n", text.c_str());
  return 1;
}

int Main(int argc, char** argv) {
  const std::string device = argc > 1 ? argv[1] : "gpu";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 200, warmup = argc > 3 ? std::atoi(argv[3]) : 20;
  if ((device != "cpu" && device != "gpu") || steps <= 0 || warmup < 0)
    return Fail(InvalidArgument("usage: gpu_mlp_bench cpu|gpu [steps > 0] [warmup >= 0]"));
  Session session;
  for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{
           {"w1", {kIn, kHidden}}, {"b1", {kHidden}}, {"w2", {kHidden, kClasses}}, {"b2", {kClasses}}}) {
    std::vector<float> init(NumElements(shape));
    for (size_t i = 0; i < init.size(); ++i) init[i] = 0.05f * std::sin(static_cast<float>(i) * 0.7f);
    Status created = session.CreateVariable(name, {shape, DType::kFloat32}, init.data());
    if (!created.ok()) return Fail(created);
  }
  auto builder = bench::SeedMlpJob(device == "gpu" ? "mlp_gpu" : "mlp_cpu", 0, device == "gpu" ? 1 : 0);
  if (!builder.ok()) return Fail(builder.status());
  JobOptions options;
  // ACTORFLOW_BENCH_TRACE=<file>: the runtime's trace of the run (written when the session ends).
  if (const char* trace = std::getenv("ACTORFLOW_BENCH_TRACE"); trace != nullptr) options.trace_path = trace;
  auto job = session.Compile(builder.value(), options);
  if (!job.ok()) return Fail(job.status());
  std::vector<float> x(kBatch * kIn), loss(kBatch);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f + 0.5f * std::sin(0.37f * static_cast<float>(i));
  std::vector<int32_t> labels(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) labels[i] = static_cast<int32_t>(i % kClasses);
  float learning_rate = 0.1f;
  std::vector<TensorView> inputs = {{x.data(), {{kBatch, kIn}, DType::kFloat32}},
                                    {labels.data(), {{kBatch}, DType::kInt32}},
                                    {&learning_rate, {{1}, DType::kFloat32}}};
  std::vector<TensorView> outputs = {{loss.data(), {{kBatch}, DType::kFloat32}}};
  auto mean_loss = [&] {
    double sum = 0;
    for (float v : loss) sum += v;
    return sum / kBatch;
  };
  double first_loss = 0;
  std::vector<double> times;
  for (int step = 0; step < warmup + steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    Status ran = job.value()->Run(inputs, outputs);
    const auto end = std::chrono::steady_clock::now();
    if (!ran.ok()) return Fail(ran);
    if (step == 0) first_loss = mean_loss();
    if (step >= warmup) times.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(times.begin(), times.end());
  auto at = [&](double q) { return times[static_cast<size_t>(q * static_cast<double>(times.size() - 1))]; };
  std::printf("{\"device\": \"%s\", \"batch\": %lld, \"steps\": %d, \"step_ms_median\": %.4f, \"step_ms_p10\": %.4f, "
              "\"step_ms_p90\": %.4f, \"first_loss\": %.6f, \"last_loss\": %.6f}\n",
              device.c_str(), static_cast<long long>(kBatch), steps, at(0.5), at(0.1), at(0.9), first_loss, mean_loss());
  return 0;
}

}  // namespace
}  // namespace actorflow

int main(int argc, char** argv) { return actorflow::Main(argc, argv); }

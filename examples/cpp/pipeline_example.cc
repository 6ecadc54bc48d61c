// A realistic embedding of actorflow: a four-stage inference pipeline of your own C++ kernels.
//
//   reader (uint8 images, made up here) -> preprocess (normalize to float)
//     -> dense (oneDNN sgemm + bias + relu) -> writer (argmax per row, to a file)
//
// Each stage is a persistent actor; with register_num = 2 per edge the reader runs at most two
// batches ahead of preprocess, and so on, so memory stays bounded however many batches run.
// Thread budget: num_threads = 2 gives two CAF workers and one kernel thread each (handed to
// OpenMP on every worker by on_worker_start), so pipeline parallelism fills the two cores
// without oversubscribing them.
//
// Usage: actorflow_pipeline_example [iterations] [output file] [trace file]
// Exits non-zero if any result differs from a plain reference computation.
#include <actorflow/pipeline.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <future>
#include <string>
#include <vector>

namespace {

using actorflow::DType;
using actorflow::Status;
using actorflow::StageArgs;
using actorflow::TensorDesc;
using actorflow::TensorView;

constexpr int64_t kBatch = 64, kFeatures = 256, kHidden = 128;

// The "dataset": pixel f of row r of batch i, reproducible from its coordinates.
uint8_t Pixel(int64_t iteration, int64_t row, int64_t feature) {
  return static_cast<uint8_t>((iteration * 131 + row * 31 + feature * 7) % 251);
}

float Normalize(uint8_t pixel) { return (pixel / 255.0f - 0.5f) / 0.25f; }

struct Model {
  std::vector<float> weights = std::vector<float>(kFeatures * kHidden);  // (F, H), row-major
  std::vector<float> bias = std::vector<float>(kHidden);
  Model() {
    for (int64_t i = 0; i < kFeatures * kHidden; ++i) weights[i] = std::sin(0.37f * i) * 0.05f;
    for (int64_t h = 0; h < kHidden; ++h) bias[h] = 0.01f * (h % 7);
  }
};

// The reference: what the pipeline must deliver for batch `iteration`.
std::vector<float> Reference(const Model& m, int64_t iteration) {
  std::vector<float> out(kBatch * kHidden);
  for (int64_t r = 0; r < kBatch; ++r)
    for (int64_t h = 0; h < kHidden; ++h) {
      double sum = m.bias[h];
      for (int64_t f = 0; f < kFeatures; ++f) sum += Normalize(Pixel(iteration, r, f)) * m.weights[f * kHidden + h];
      out[r * kHidden + h] = sum > 0 ? static_cast<float>(sum) : 0.0f;
    }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 200;
  const std::string output_path = argc > 2 ? argv[2] : "predictions.txt";
  const std::string trace_path = argc > 3 ? argv[3] : "";
  const Model model;

  const TensorDesc images{{kBatch, kFeatures}, DType::kUInt8};
  const TensorDesc features{{kBatch, kFeatures}, DType::kFloat32};
  const TensorDesc activations{{kBatch, kHidden}, DType::kFloat32};

  actorflow::Pipeline pipeline;
  // A stage without inputs runs once per pushed iteration: here, the reader.
  auto reader = pipeline.AddStage("reader", {}, {images}, [](const StageArgs& a) {
    uint8_t* out = a.outputs[0].as<uint8_t>();
    for (int64_t r = 0; r < kBatch; ++r)
      for (int64_t f = 0; f < kFeatures; ++f) out[r * kFeatures + f] = Pixel(a.iteration, r, f);
    return Status::Ok();
  });
  auto preprocess = pipeline.AddStage("preprocess", {reader}, {features}, [](const StageArgs& a) {
    const uint8_t* in = a.inputs[0].as<uint8_t>();
    float* out = a.outputs[0].as<float>();
    for (int64_t i = 0; i < a.inputs[0].num_elements(); ++i) out[i] = Normalize(in[i]);
    return Status::Ok();
  });
  auto dense = pipeline.AddStage("dense", {preprocess}, {activations}, [&model](const StageArgs& a) {
    float* out = a.outputs[0].as<float>();
    for (int64_t r = 0; r < kBatch; ++r)
      for (int64_t h = 0; h < kHidden; ++h) out[r * kHidden + h] = model.bias[h];
    dnnl_status_t s = dnnl_sgemm('N', 'N', kBatch, kHidden, kFeatures, 1.0f, a.inputs[0].as<float>(), kFeatures,
                                 model.weights.data(), kHidden, 1.0f, out, kHidden);
    if (s != dnnl_success) return actorflow::Internal("dnnl_sgemm failed with status " + std::to_string(s));
    for (int64_t i = 0; i < kBatch * kHidden; ++i) out[i] = out[i] > 0 ? out[i] : 0.0f;
    return Status::Ok();
  });
  std::ofstream predictions(output_path);
  if (!predictions) {
    std::fprintf(stderr, "cannot write %s\n", output_path.c_str());
    return 1;
  }
  // The writer produces nothing: the pipeline still waits for it before completing a call.
  pipeline.AddStage("writer", {dense}, {}, [&predictions](const StageArgs& a) {
    const float* x = a.inputs[0].as<float>();
    predictions << a.iteration << ":";
    for (int64_t r = 0; r < kBatch; ++r) {
      int64_t best = 0;
      for (int64_t h = 1; h < kHidden; ++h)
        if (x[r * kHidden + h] > x[r * kHidden + best]) best = h;
      predictions << ' ' << best;
    }
    predictions << '\n';
    return predictions ? Status::Ok() : actorflow::Internal("writing predictions failed");
  });
  pipeline.SetOutputs({dense});

  actorflow::PipelineOptions options;
  options.num_threads = 2;
  options.trace_path = trace_path;
  options.on_worker_start = [](int kernel_threads) { omp_set_num_threads(kernel_threads); };
  Status started = pipeline.Start(options);
  if (!started.ok()) {
    std::fprintf(stderr, "start: %s\n", started.ToString().c_str());
    return 1;
  }

  // Keep a window of asynchronous calls in flight; check a sample of them against the reference.
  constexpr int kWindow = 4;
  std::vector<std::vector<float>> outputs(kWindow, std::vector<float>(kBatch * kHidden));
  std::vector<std::future<Status>> pending(kWindow);
  int failures = 0;
  auto check = [&](int64_t iteration) {
    int slot = static_cast<int>(iteration % kWindow);
    Status s = pending[slot].get();
    if (!s.ok()) {
      std::fprintf(stderr, "iteration %lld: %s\n", static_cast<long long>(iteration), s.ToString().c_str());
      ++failures;
      return;
    }
    if (iteration % 10 != 0) return;
    std::vector<float> expected = Reference(model, iteration);
    for (size_t i = 0; i < expected.size(); ++i)
      if (std::fabs(outputs[slot][i] - expected[i]) > 1e-3f * (1.0f + std::fabs(expected[i]))) {
        std::fprintf(stderr, "iteration %lld element %zu: got %f, want %f\n", static_cast<long long>(iteration), i,
                     outputs[slot][i], expected[i]);
        ++failures;
        return;
      }
  };
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    if (i >= kWindow) check(i - kWindow);
    int slot = static_cast<int>(i % kWindow);
    pending[slot] = pipeline.PushAsync({}, {TensorView{outputs[slot].data(), activations}});
  }
  for (int64_t i = std::max<int64_t>(0, iterations - kWindow); i < iterations; ++i) check(i);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Status finished = pipeline.Finish();  // drains; writes the trace when asked for one
  if (!finished.ok()) {
    std::fprintf(stderr, "finish: %s\n", finished.ToString().c_str());
    return 1;
  }
  predictions.close();

  std::ifstream written(output_path);
  int lines = 0;
  for (std::string line; std::getline(written, line);) ++lines;
  if (lines != iterations) {
    std::fprintf(stderr, "writer wrote %d batches, expected %d\n", lines, iterations);
    ++failures;
  }
  std::printf("%d batches of %lldx%lld through reader -> preprocess -> dense -> writer: %.1f batches/s, %s\n",
              iterations, static_cast<long long>(kBatch), static_cast<long long>(kFeatures), iterations / seconds,
              failures == 0 ? "all checks passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}

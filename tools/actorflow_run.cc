// actorflow-run: runs a saved model directory (flow.save(graph, dir), flow.save(job, dir)) on
// NumPy .npy inputs and writes its outputs as .npy files, printing the latency.
//
//   actorflow-run DIR --input x.npy [--input ...] --output y.npy [--output ...]
//                 [--repeat N] [--threads N]
//
// Inputs are given in the model's input order (listed with no --input); each must have the
// dtype and shape the model takes (no casting). With --repeat N the model runs N times on the
// same inputs after one warm-up run; the outputs are those of the last run. Exit status: 0 on
// success, 1 when the model or an input cannot be read or run, 2 for a wrong command line.
// Errors go to stderr, naming the file and what is wrong.
#include <actorflow/model.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "session/npy.h"

namespace {

constexpr int kUsageError = 2;
constexpr int kRunError = 1;

void PrintUsage(std::FILE* to) {
  std::fprintf(to,
               "usage: actorflow-run DIR --input x.npy [--input ...] --output y.npy [--output ...] "
               "[--repeat N] [--threads N]\n"
               "  DIR        a saved model directory (model.json, plan.pb, weights)\n"
               "  --input    a .npy file per model input, in the model's input order\n"
               "  --output   a .npy file per model output, in the model's output order (replaced if present)\n"
               "  --repeat   timed runs after one warm-up run (default 1)\n"
               "  --threads  threads the kernels use (default: the number of cores)\n");
}

bool ParseCount(const char* text, int minimum, int* out) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < minimum || value > 100000000) return false;
  *out = static_cast<int>(value);
  return true;
}

std::string Specs(const std::vector<actorflow::ModelTensorSpec>& specs) {
  std::string out;
  for (const auto& s : specs) out += (out.empty() ? "" : ", ") + s.name + " " + s.desc.ToString();
  return out.empty() ? "none" : out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string directory;
  std::vector<std::string> inputs, outputs;
  int repeat = 1, threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "-h" || arg == "--help") {
      PrintUsage(stdout);
      return 0;
    } else if ((arg == "--input" || arg == "--output" || arg == "--repeat" || arg == "--threads") && !has_value) {
      std::fprintf(stderr, "actorflow-run: %s needs a value\n", arg.c_str());
      return kUsageError;
    } else if (arg == "--input") {
      inputs.push_back(argv[++i]);
    } else if (arg == "--output") {
      outputs.push_back(argv[++i]);
    } else if (arg == "--repeat" || arg == "--threads") {
      const char* value = argv[++i];
      if (!ParseCount(value, arg == "--repeat" ? 1 : 0, arg == "--repeat" ? &repeat : &threads)) {
        std::fprintf(stderr, "actorflow-run: %s expects a whole number %s, got '%s'\n", arg.c_str(),
                     arg == "--repeat" ? ">= 1" : ">= 0", value);
        return kUsageError;
      }
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "actorflow-run: unknown option '%s'\n", arg.c_str());
      PrintUsage(stderr);
      return kUsageError;
    } else if (directory.empty()) {
      directory = arg;
    } else {
      std::fprintf(stderr, "actorflow-run: a second model directory '%s' (only one is run)\n", arg.c_str());
      return kUsageError;
    }
  }
  if (directory.empty()) {
    PrintUsage(stderr);
    return kUsageError;
  }

  actorflow::ModelOptions options;
  options.num_threads = threads;
  const auto load_started = std::chrono::steady_clock::now();
  auto model = actorflow::LoadModel(directory, options);
  if (!model.ok()) {
    std::fprintf(stderr, "actorflow-run: %s\n", model.status().ToString().c_str());
    return kRunError;
  }
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_started).count();
  if (inputs.size() != model->inputs().size()) {
    std::fprintf(stderr, "actorflow-run: model '%s' takes %zu inputs (%s), got %zu --input\n", directory.c_str(),
                 model->inputs().size(), Specs(model->inputs()).c_str(), inputs.size());
    return kUsageError;
  }
  if (outputs.size() != model->outputs().size()) {
    std::fprintf(stderr, "actorflow-run: model '%s' has %zu outputs (%s), got %zu --output\n", directory.c_str(),
                 model->outputs().size(), Specs(model->outputs()).c_str(), outputs.size());
    return kUsageError;
  }
  std::vector<actorflow::HostTensor> input_tensors;
  std::vector<actorflow::TensorView> input_views;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto tensor = actorflow::ReadNpyFile(inputs[i]);
    if (!tensor.ok()) {
      std::fprintf(stderr, "actorflow-run: input '%s': %s\n", model->inputs()[i].name.c_str(),
                   tensor.status().ToString().c_str());
      return kRunError;
    }
    if (tensor->desc != model->inputs()[i].desc) {
      std::fprintf(stderr, "actorflow-run: input '%s' (file '%s'): expected %s, the file holds %s\n",
                   model->inputs()[i].name.c_str(), inputs[i].c_str(), model->inputs()[i].desc.ToString().c_str(),
                   tensor->desc.ToString().c_str());
      return kRunError;
    }
    input_views.push_back(tensor->view());
    input_tensors.push_back(std::move(tensor).value());
  }
  std::vector<actorflow::HostTensor> output_tensors;
  std::vector<actorflow::TensorView> output_views;
  for (const auto& spec : model->outputs()) {
    auto tensor = actorflow::AllocateHostTensor(spec.desc, "output '" + spec.name + "'");
    if (!tensor.ok()) {
      std::fprintf(stderr, "actorflow-run: %s\n", tensor.status().ToString().c_str());
      return kRunError;
    }
    output_views.push_back(tensor->view());
    output_tensors.push_back(std::move(tensor).value());
  }

  // One warm-up run (first-touch of registers, kernel caches), then `repeat` timed runs.
  std::vector<double> latencies;
  for (int run = 0; run <= repeat; ++run) {
    const auto started = std::chrono::steady_clock::now();
    actorflow::Status status = model->Run(input_views, output_views);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    if (!status.ok()) {
      std::fprintf(stderr, "actorflow-run: %s\n", status.ToString().c_str());
      return kRunError;
    }
    if (run > 0) latencies.push_back(ms);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    actorflow::Status written = actorflow::WriteFileDurably(outputs[i], actorflow::EncodeNpy(output_views[i]), true);
    if (!written.ok()) {
      std::fprintf(stderr, "actorflow-run: output '%s': %s\n", model->outputs()[i].name.c_str(),
                   written.ToString().c_str());
      return kRunError;
    }
  }
  std::vector<double> sorted = latencies;
  std::sort(sorted.begin(), sorted.end());
  double total = 0;
  for (double ms : latencies) total += ms;
  std::printf("actorflow-run: model '%s' loaded in %.2f ms; latency over %d run(s): mean %.3f ms, median %.3f ms, "
              "min %.3f ms\n",
              model->job_name().c_str(), load_ms, repeat, total / repeat, sorted[sorted.size() / 2], sorted.front());
  return 0;
}

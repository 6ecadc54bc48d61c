// actorflow's deployment API: run a saved model directory from C++, without Python.
//
//   auto model = actorflow::LoadModel("1/model");           // written by flow.save(graph, dir)
//   if (!model.ok()) { std::cerr << model.status().ToString(); return 1; }
//   auto outputs = model->Run({actorflow::TensorView{x_data, model->inputs()[0].desc}});
//   // outputs->at(0).name, .desc, .data (64-byte aligned, owned)
//
// The directory holds model.json (the manifest: inputs, outputs, weights, format and writer
// versions), plan.pb (the compiled plan) and one .npy file per weight. LoadModel checks every
// file (present, regular, size and CRC-32 as the manifest says, weights and inputs/outputs
// against the plan, every op known to this build's registry with the shapes its inference
// gives) before it builds anything: a damaged, truncated or incomplete directory is an
// InvalidArgument or NotFound naming the file and what is wrong, never a crash.
//
// Run checks each input's dtype and shape against inputs() (InvalidArgument naming the input,
// what it expected and what came; the next call still works). The model's weights are its own
// copy, read once at load; predict models do not change them.
//
// Thread-safety: Run may be called from several threads; calls are pipelined by the runtime
// (at most the plan's register count in flight, the others wait). A Model is movable, not
// copyable; destroying it drains the calls in flight.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"

namespace actorflow {

struct ModelTensorSpec {
  std::string name;
  TensorDesc desc;
};

// An output of Model::Run: owned, 64-byte aligned host memory.
struct ModelOutput {
  std::string name;
  TensorDesc desc;
  std::shared_ptr<void> data;
  TensorView view() const { return TensorView{data.get(), desc}; }
};

struct ModelOptions {
  int num_threads = 0;  // threads the kernels may use (0: the number of cores)
};

class Model {
 public:
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const std::vector<ModelTensorSpec>& inputs() const;   // in Run's order
  const std::vector<ModelTensorSpec>& outputs() const;  // in Run's order
  const std::string& job_name() const;
  const std::string& actorflow_version() const;  // of the program that saved it

  // Inputs in inputs() order; outputs allocated per call, in outputs() order.
  StatusOr<std::vector<ModelOutput>> Run(const std::vector<TensorView>& inputs);
  // Into caller buffers matching outputs() exactly (no allocation per call).
  Status Run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs);

 private:
  friend struct ModelLoader;  // LoadModel's implementation
  struct State;
  explicit Model(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

StatusOr<Model> LoadModel(const std::string& directory, const ModelOptions& options = {});

// The version this library writes into model.json (and LoadModel reports of a model).
const char* ActorflowVersion();

}  // namespace actorflow

// The saved model directory (the loader's contract is include/actorflow/model.h):
//
//   model.json            the manifest (session/proto/model.proto, protobuf JSON mapping)
//   plan.pb               the compiled plan (actors/proto/plan.proto), binary
//   000000-<name>.npy ... one file per weight, the variables the plan reads
//
// SaveModel writes those files into `directory`, which must be missing (it is created; its
// parent must exist) or empty: it never replaces or removes anything. Each file is written
// with O_EXCL and fsynced; the directory is synced last. Making a save atomic over an existing
// model directory is the caller's (the Python front end writes a temporary sibling and swaps
// it in, as checkpoints are written).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "actorflow/model.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {

inline constexpr char kModelManifestFile[] = "model.json";
inline constexpr char kModelPlanFile[] = "plan.pb";
inline constexpr char kModelFormat[] = "actorflow-model";
inline constexpr int kModelFormatVersion = 1;

struct ModelContents {
  const plan::Plan* plan = nullptr;
  std::vector<ModelTensorSpec> inputs;   // by feed_index
  std::vector<ModelTensorSpec> outputs;  // the main sink's blobs, in order
  std::vector<std::pair<std::string, TensorView>> weights;  // every variable the plan reads
};

// Checks the contents as LoadModel will (inputs, outputs and weights against the plan) and
// writes the directory. InvalidArgument naming what does not fit, or the path that cannot be
// written.
Status SaveModel(const std::string& directory, const ModelContents& contents);

// The file name SaveModel gives weight `index` named `name`: "<index>-<readable part>.npy",
// unique by its index whatever the name holds.
std::string WeightFileName(size_t index, const std::string& name);

}  // namespace actorflow

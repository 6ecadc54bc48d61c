// JobBuilder: how a traced job function becomes a Graph. Each add_* call checks its input now
// (inference runs as the op is added) so a failure points at the user's source line.
// The builder is the C++ side of _C.JobBuilder (python_bindings/C_API.md).
//
// Thread-safety: none; one tracing thread per builder.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/proto/job.pb.h"

namespace actorflow {
namespace graph {

class JobBuilder {
 public:
  // job_type: "predict" | "train" (InvalidArgument otherwise, see Create).
  static StatusOr<JobBuilder> Create(const std::string& name, const std::string& job_type);

  // The devices of the job's config (flow.config.cpu_device_num / gpu_device_num; 0 = one CPU
  // device). Call before placements are set. gpu_device_num > 0 needs a CUDA build and that many
  // GPUs present (CheckGpuDevices: FailedPrecondition naming the count found and
  // cpu_device_num(n) as the CPU equivalent otherwise); ops outside a placement scope then run
  // on the GPUs.
  Status SetDeviceNum(int cpu_device_num, int gpu_device_num = 0);
  // The machines (processes) of the job (flow.config.machine_num; 0 = one). Call before
  // placements are set; device counts are per machine.
  Status SetMachineNum(int machine_num);
  // Back to the config's default placement (every CPU device; the GPUs when configured).
  Status ClearPlacement();
  // The job's view, recorded as JobConfig.default_logical_view: "consistent" ("" too) or
  // "mirrored". The front end builds both on the consistent machinery (a mirrored job's list
  // placeholders are logical inputs split on axis 0), so the compiler does not read it.
  Status SetLogicalView(const std::string& view);
  // Placement for the ops added from now on (flow.scope.placement); an empty device list means
  // every device of the config. InvalidArgument naming the placement unless ResolvePlacement
  // accepts it for the device count set so far.
  Status SetPlacement(const Placement& placement);
  const Placement& placement() const { return placement_; }

  // A placeholder; feeds follow the order of these calls. Returns "name/out".
  StatusOr<std::string> AddInput(const std::string& name, const Shape& shape, DType dtype, const std::string& location);
  // A variable read by this job. Adding the same variable name twice returns the same
  // reference (layers that share weights); a different shape/dtype is InvalidArgument.
  StatusOr<std::string> AddVariable(const std::string& name, const Shape& shape, DType dtype,
                                    const std::string& location, bool trainable = true);
  // Runs inference now; "op '<name>' (<type>) at <location>: <message>" on failure.
  // Repeated names get _1, _2, ... appended. Returns the node (its output refs and descs).
  StatusOr<const Node*> AddOp(const std::string& type, const std::string& name, const std::vector<std::string>& inputs,
                              const Attrs& attrs, const std::string& location);
  StatusOr<TensorDesc> TensorDescOf(const std::string& ref) const { return graph_.Desc(ref); }
  // A layout hint on the blob `ref` ("op/output": flow.distribute.* on a variable, an input or a
  // layer's output). The SBP pass honours it or fails naming the op and its line.
  Status SetOutputSbpHint(const std::string& ref, const Sbp& sbp);
  // Placeholder `ref` is fed per machine (graph::FedPerMachine, the mirrored view across
  // machines): placed on every device of every machine and hinted S(0), each machine's rank
  // feeds its own devices' rows. InvalidArgument for anything else.
  Status SetFedPerMachine(const std::string& ref);
  Status SetOutputs(const std::vector<std::string>& refs);
  Status AddWatch(const std::string& ref, const std::string& handler_name, bool diff, const std::string& location);
  Status AddLoss(const std::string& ref);
  Status SetOptimizer(const OptimizerSpec& spec);

  const Graph& graph() const { return graph_; }
  // Every node's part of the job cache's key (graph/job_key.h), written as each node was added;
  // null once a node was changed after it was added (then the key is written whole).
  const std::string* node_key() const {
    return node_key_valid_ && keyed_nodes_ == graph_.nodes().size() ? &node_key_ : nullptr;
  }
  job::Job ToJob() const;
  // Rebuilds a builder from its serialized form, re-running inference.
  static StatusOr<JobBuilder> FromJob(const job::Job& job);

 private:
  JobBuilder() = default;
  // Appends the newest node's part of the key.
  void KeyNewNode();

  Graph graph_;
  std::string node_key_;
  size_t keyed_nodes_ = 0;
  bool node_key_valid_ = true;
  Placement placement_;
  Placement default_placement_;
  std::string logical_view_;
};

}  // namespace graph
}  // namespace actorflow

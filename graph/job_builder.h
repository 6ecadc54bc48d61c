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

  // Placement for the ops added from now on (flow.scope.placement); empty machine_device_ids:
  // all devices of the config. InvalidArgument naming the placement unless it is well formed
  // (CheckPlacementSyntax); whether the devices exist is the compiler's check.
  Status SetPlacement(const Placement& placement);
  // The user's layout hint on `ref`, the only output of its op (a placeholder, a variable,
  // parallel_cast's identity): OpConf.output_sbp. InvalidArgument for an op with several
  // outputs or a split axis outside the output's rank.
  Status SetOutputSbpHint(const std::string& ref, const Sbp& sbp);
  // flow.config's devices (JobConfig cpu_device_num, gpu_device_num).
  Status SetDeviceNum(int cpu_device_num, int gpu_device_num);
  // The job's view: "consistent" ("" too) or "mirrored" (JobConfig default_logical_view).
  Status SetLogicalView(const std::string& view);
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
  Status SetOutputs(const std::vector<std::string>& refs);
  Status AddWatch(const std::string& ref, const std::string& handler_name, bool diff, const std::string& location);
  Status AddLoss(const std::string& ref);
  Status SetOptimizer(const OptimizerSpec& spec);

  const Graph& graph() const { return graph_; }
  job::Job ToJob() const;
  // Rebuilds a builder from its serialized form, re-running inference.
  static StatusOr<JobBuilder> FromJob(const job::Job& job);

 private:
  JobBuilder() = default;
  Graph graph_;
  Placement placement_;
};

}  // namespace graph
}  // namespace actorflow

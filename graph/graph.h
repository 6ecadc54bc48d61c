// The compiler's in-memory logical graph: what a job function traced, plus what the passes
// add (backward ops, optimizer updates, control edges). Nodes are kept in a topological
// order at all times: a node is appended only after every node it reads, so every pass can
// walk `nodes()` forwards (or backwards) without sorting.
//
// Thread-safety: a value type; not synchronized. One thread builds and compiles a graph.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"
#include "graph/name_index.h"
#include "kernels/op_registry.h"

namespace actorflow {
namespace graph {

enum class NodeKind { kInput, kVariable, kOp };

// Where a node runs: a device type and "machine:device" ranges ("0:0-1", "0:2", "0-1:0": machines
// 0 and 1, device 0 of each; one process is machine 0). Empty machine_device_ids: every device
// of every machine of the job's config (ops outside any placement scope).
struct Placement {
  std::string device_type = "cpu";
  std::vector<std::string> machine_device_ids;
  std::string ToString() const;  // "cpu 0:0-1", "cpu (all devices)"
};
// The global device ids of `placement` on `machine_num` machines with `device_num` CPU devices
// each (device d of machine m is m * device_num + d), in order and without repeats.
// InvalidArgument naming the placement and the problem: syntax, a machine >= machine_num ("machine
// 2 does not exist: machine_num is 2"), a device >= device_num ("device 3 does not exist:
// cpu_device_num is 2"), a device type other than cpu or gpu. A "gpu" placement resolves against
// `gpu_device_num` (flow.config.gpu_device_num; 0: no GPU, the placement is refused) and names
// one GPU so far (boxing between GPUs needs the device collectives).
StatusOr<std::vector<int>> ResolvePlacement(const Placement& placement, int device_num, int gpu_device_num = 0,
                                            int machine_num = 1);
// Placement naming exactly `devices` ("0:0", "0:1", ...).
Placement PlacementOf(const std::vector<int>& devices, const std::string& device_type = "cpu");

struct Node {
  // The fields every pass reads come first, together in the first cache lines of the node (a
  // pass walks thousands of nodes; the rarely read fields below them stay out of its way).
  std::string name;
  NodeKind kind = NodeKind::kOp;
  // kVariable: trainable for the optimizer; the session creates it filled with zeros when
  // missing (optimizer state).
  bool trainable = false;
  bool zeros_if_missing = false;
  std::string type;                     // registry op type; "input" / "variable" otherwise
  std::vector<std::string> inputs;      // data inputs, "op/output"
  std::vector<std::string> output_names;
  std::vector<TensorDesc> output_descs;
  std::vector<std::string> control_inputs;  // node names that must act first (same iteration)
  std::vector<int> mutable_inputs;      // indices into `inputs` written in place
  // Filled by the placement pass: the device ids (machine 0) the node runs on.
  std::vector<int> devices;
  // Filled by the SBP pass: the layout of each input as this node reads it and of each output
  // over `devices` (all broadcast on one device). Inputs and variables are held whole in one
  // register; their output_sbp is the layout their readers are steered towards (the consistent
  // view's S(0) for feeds, a user hint), and boxing slices them where a reader splits.
  std::vector<Sbp> input_sbp, output_sbp;
  Attrs attrs;
  // kVariable: name in the session's variable store.
  std::string variable_name;
  std::string location;                 // user's file:line
  Placement placement;
  // The user's layout hints, one per output (std::nullopt: the compiler chooses); may be empty.
  std::vector<std::optional<Sbp>> output_sbp_hints;

  std::string output_ref(size_t i) const { return name + "/" + output_names[i]; }
};

struct Watch {
  std::string ref;
  std::string handler_name;
  bool diff = false;
  std::string location;
};

// Mirrors the optimizer spec of python_bindings/C_API.md.
struct OptimizerSpec {
  std::string type;  // "sgd" | "momentum" | "adam" | "adamw" | "rmsprop" | "lamb"
  double momentum = 0.9;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double decay_rate = 0.99;
  double weight_decay = 0.0;
  double clip_norm = 0.0;               // 0 = off
  std::vector<std::string> variables;   // variable names; empty = all trainable
  // adam/adamw: the learning-rate feed is (3,) = [lr, 1/(1-beta1^t), 1/(1-beta2^t)] and the
  // update applies PyTorch's bias corrections to the moments (nn.Graph, matching flow.optim.Adam);
  // false: the caller folds them into a (1,) lr (the job functions' optimizer, as OneFlow's).
  bool exact_bias_correction = false;
};

// "op/output" -> ("op", "output"); InvalidArgument on a malformed reference.
StatusOr<std::pair<std::string, std::string>> SplitRef(const std::string& ref);

class Graph {
 public:
  Graph() = default;
  Graph(std::string job_name, std::string job_type) : job_name_(std::move(job_name)), job_type_(std::move(job_type)) {}

  const std::string& job_name() const { return job_name_; }
  const std::string& job_type() const { return job_type_; }
  bool is_train() const { return job_type_ == "train"; }
  // CPU devices of the job's config (flow.config.cpu_device_num; 1 by default).
  int device_num() const { return device_num_; }
  void set_device_num(int device_num) { device_num_ = device_num < 1 ? 1 : device_num; }
  // Machines (processes) of the job (flow.config.machine_num; 1 by default). Node devices are
  // global ids over all machines: machine = id / device_num(), device = id % device_num().
  int machine_num() const { return machine_num_; }
  void set_machine_num(int machine_num) { machine_num_ = machine_num < 1 ? 1 : machine_num; }
  int total_device_num() const { return device_num_ * machine_num_; }
  // GPU devices of the job's config (flow.config.gpu_device_num; 0 by default). Set only once
  // they were found present (JobBuilder::SetDeviceNum); placements on "gpu" resolve against it.
  int gpu_device_num() const { return gpu_device_num_; }
  void set_gpu_device_num(int gpu_device_num) { gpu_device_num_ = gpu_device_num < 0 ? 0 : gpu_device_num; }

  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& mutable_nodes() { return nodes_; }
  // By name; a std::string_view is looked up without building a string (a ref's node part).
  const Node* FindNode(std::string_view name) const;
  Node* FindMutableNode(std::string_view name);
  // Node and output index of a reference; NotFound naming the reference otherwise.
  StatusOr<std::pair<const Node*, int>> Resolve(const std::string& ref) const;
  StatusOr<TensorDesc> Desc(const std::string& ref) const;

  // `base`, or base_1, base_2, ... (the first free one) if taken (OneFlow's convention for
  // repeated names). Amortized O(1) per name: the suffix search resumes where it last stopped
  // (names are only added between Retain calls, which forget that).
  std::string UniqueName(const std::string& base) const;
  // The kVariable node holding session variable `variable_name` (the first), or nullptr.
  const Node* FindVariable(const std::string& variable_name) const;
  // Appends a node whose name is already unique and whose inputs exist (CHECKed).
  Node& Append(Node node);
  // Room for `count` nodes in all (a caller about to Append many).
  void Reserve(size_t count) {
    nodes_.reserve(count);
    index_.Reserve(count);
  }
  // Moves node `name` to just after node `after` (both must exist, `name` after `after`); the
  // caller keeps the order topological (nothing between them may feed `name`).
  void MoveAfter(const std::string& name, const std::string& after);
  // Keeps the nodes with keep[i] true (order preserved); control inputs to dropped nodes go too.
  void Retain(const std::vector<bool>& keep);

  // Adds an op of a registry type: resolves inputs, runs the OpDef's inference and appends
  // the node under a unique name derived from `name`. The error names op, type and location.
  StatusOr<const Node*> AddOp(const std::string& type, const std::string& name,
                              const std::vector<std::string>& inputs, const Attrs& attrs,
                              const std::string& location, const Placement& placement = {});

  // The feeds of a call in order: placeholder node names (then "learning_rate" for train jobs,
  // added by the optimizer pass).
  std::vector<std::string>& feeds() { return feeds_; }
  const std::vector<std::string>& feeds() const { return feeds_; }
  std::vector<std::string>& outputs() { return outputs_; }
  const std::vector<std::string>& outputs() const { return outputs_; }
  std::vector<Watch>& watches() { return watches_; }
  const std::vector<Watch>& watches() const { return watches_; }
  std::vector<std::string>& losses() { return losses_; }
  const std::vector<std::string>& losses() const { return losses_; }
  std::unique_ptr<OptimizerSpec>& optimizer() { return optimizer_; }
  const OptimizerSpec* optimizer() const { return optimizer_.get(); }
  // Gradient of a forward reference, filled by the autodiff pass ("" when none flows).
  std::map<std::string, std::string>& gradients() { return gradients_; }
  const std::map<std::string, std::string>& gradients() const { return gradients_; }

  Graph(const Graph& other) { *this = other; }
  Graph& operator=(const Graph& other);
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  // Graphviz text of the logical graph: one box per node (type, output descs, location; after
  // the placement and SBP passes also devices and the layout of every blob; boxing nodes filled
  // orange).
  std::string ToDot() const;

 private:
  std::string job_name_;
  std::string job_type_ = "predict";
  int device_num_ = 1;
  int machine_num_ = 1;
  int gpu_device_num_ = 0;
  // Looked up by std::string_view (no string built per lookup; every pass resolves thousands
  // of refs) in one flat table (graph/name_index.h).
  std::vector<Node> nodes_;
  NameIndex index_;
  // variable_name -> name of its first kVariable node (rebuilt by Retain; checked on use).
  std::unordered_map<std::string, std::string> variable_index_;
  // base -> the smallest suffix UniqueName has not yet seen taken (see UniqueName).
  mutable std::unordered_map<std::string, int> next_suffix_;
  std::vector<std::string> feeds_;
  std::vector<std::string> outputs_;
  std::vector<Watch> watches_;
  std::vector<std::string> losses_;
  std::unique_ptr<OptimizerSpec> optimizer_;
  std::map<std::string, std::string> gradients_;
};

}  // namespace graph
}  // namespace actorflow

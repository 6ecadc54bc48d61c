// The compiler pipeline: small ordered passes over a Graph, then lowering to a plan::Plan.
//   autodiff (train) -> optimizer (train) -> prune -> fusion -> ordering -> lower
// Each pass can dump the graph it leaves as DOT (CompileOptions::dump_dot_dir or the
// ACTORFLOW_DUMP_DOT environment variable), named <job>.<NN>-<pass>.dot.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace graph {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  virtual Status Run(Graph& graph) = 0;
};

// Backward ops from each OpDef's gradient rule. Each loss is seeded with ones / (number of its
// elements) (OneFlow: a per-sample loss vector trains like its mean). Fills graph.gradients()
// for trainable variables and for the refs of watch_diff. No-op for predict jobs.
std::unique_ptr<Pass> MakeAutodiffPass();
// Adds the "learning_rate" feed (float32 (1,), last) to train jobs, optional clipping by global
// norm, and one update op per trainable variable with its state variables (zeros if missing).
std::unique_ptr<Pass> MakeOptimizerPass();
// Control edges: every op that writes a variable in place runs after every other reader of
// that variable in the same iteration. Outputs and watches of such a variable first read an
// identity copy placed before the writer: `return w` and `flow.watch(w)` both see the value
// this iteration's forward pass read (the pre-update value), whatever the worker count.
std::unique_ptr<Pass> MakeOrderingPass();
// Drops ops nothing needs (outputs, watches, in-place writers and their inputs are needed).
std::unique_ptr<Pass> MakePrunePass();
// Dense layers: matmul -> bias_add (last axis, optional fused relu) with the matmul read only by
// the bias_add becomes one matmul with attrs fuse_bias (its third input) and fuse_relu.
std::unique_ptr<Pass> MakeFusionPass();

struct CompileOptions {
  int register_num = 2;       // registers per output of sources and compute tasks
  std::string dump_dot_dir;   // "" = ACTORFLOW_DUMP_DOT if set, else no dumps
};

// Runs the pipeline on `graph` (modified in place) and lowers it.
StatusOr<plan::Plan> CompileGraph(Graph& graph, const CompileOptions& options);

// Lowering alone (expects the passes to have run): one SOURCE per feed, one VARIABLE per
// variable, one COMPUTE per op, the main SINK over the outputs and a SINK per watch.
StatusOr<plan::Plan> LowerToPlan(const Graph& graph, const CompileOptions& options);

// Internal error unless every task reading a register that some task writes in place (sinks
// included) runs before that writer in the same iteration (is its ancestor through data and
// control edges): an unordered reader races with the write, and one after it would see this
// iteration's update where every other reader saw the value before it. Two writers of one
// register need only be ordered. CompileGraph runs it on every plan.
Status VerifyInPlaceOrder(const plan::Plan& plan);

// Graphviz text of a plan: tasks, registers (register_num), data and control edges.
std::string PlanToDot(const plan::Plan& plan);

}  // namespace graph
}  // namespace actorflow

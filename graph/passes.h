// The compiler pipeline: small ordered passes over a Graph, then lowering to a plan::Plan.
//   autodiff (train) -> optimizer (train) -> prune -> fusion -> gradient update fusion (train)
//   -> conv fusion -> channels last (predict) -> ordering -> placement -> sbp
//   -> boxing -> lower
// Ordering runs on the logical graph before the layout passes; lowering then orders, task by
// task, each in-place writer after the readers of other devices (see LowerToPlan).
// Each pass can dump the graph it leaves as DOT (CompileOptions::dump_dot_dir or the
// ACTORFLOW_DUMP_DOT environment variable), named <job>.<NN>-<pass>.dot.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/plan_tasks.h"
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
// the bias_add becomes one matmul with attrs fuse_bias (its third input) and fuse_relu (the
// relu stays a separate op where a user hint splits a matmul operand's contraction axis).
std::unique_ptr<Pass> MakeFusionPass();
// For the fusion passes, after they fused nodes away: every reader of a ref in `renamed` reads
// its replacement, and every control edge on a node in `absorbed` points at the node that
// absorbed it (an edge that would point at its own node keeps the old name, which
// Graph::Retain drops). The job's outputs, watches, losses and gradients stay the pass's to
// rename: what they may name differs per pass.
void RedirectFusedReaders(Graph& graph, const std::map<std::string, std::string>& renamed,
                          const std::map<std::string, std::string>& absorbed);
// For the fusion passes: how many node inputs read each ref (control inputs aside).
std::map<std::string, int> CountReaders(const Graph& graph);
// The same counts in a hash map: what a pass looking up a few refs among thousands should use
// (a lookup hashes the ref instead of comparing strings down a tree).
std::unordered_map<std::string, int> CountReadersHashed(const Graph& graph);
// The counts of only the refs a pass will ask about: `asked(node)` names the ref of `node` the
// pass asks about (nullptr: none). One hashed lookup per node input, no string per ref of
// the graph. A ref not asked about counts 0 (a pass asking for it would see no reader).
std::unordered_map<std::string, int> CountReadersOf(const Graph& graph,
                                                    const std::function<const std::string*(const Node&)>& asked);
// For the fusion passes: refs that must stay where they are, the job's outputs, losses and
// every watched ref (a pass adds the gradients it must also keep).
std::set<std::string> PinnedRefs(const Graph& graph);
// For the fusion passes whose fused node takes a consumer's output ref: the job's outputs,
// watches (not diff watches: they name a forward ref only to find its gradient), losses and
// gradients that name a ref in `renamed` name its replacement.
void RenameJobRefs(Graph& graph, const std::map<std::string, std::string>& renamed);
// Train jobs on one device: sgd_update(var, matmul(a, b), lr) with the matmul read by nothing
// else becomes matmul_sgd_update(var, a, b, lr), the GEMM accumulating into the variable.
// `placed` (after the SBP pass, jobs on several devices of one machine): only where the matmul
// and the update run whole on the same one device.
std::unique_ptr<Pass> MakeGradientUpdateFusionPass(bool placed = false);
// Single-device CPU train jobs: sgd_update(bias, bias_add_grad(dy), lr) with the bias gradient
// read by nothing else becomes bias_add_grad_sgd_update(bias, dy, lr).
std::unique_ptr<Pass> MakeBiasGradientUpdateFusionPass();
// Train jobs: relu_grad(y, max_pool2d_grad(y, ...)) becomes max_pool2d_grad with attr
// relu_mask (the routed gradient kept where y > 0), the pooling gradient read by nothing else.
std::unique_ptr<Pass> MakePoolReluGradFusionPass();
// CPU train jobs: relu_grad(y, matmul(...)) becomes the matmul with attr fuse_relu_grad and a
// third input y (the product masked where y > 0), the matmul read by nothing else.
std::unique_ptr<Pass> MakeMatmulReluGradFusionPass();
// Added when the "gemm_chunks" fusion is off: CPU matmul / matmul_sgd_update get attr omp_team
// (one OpenMP team per GEMM instead of blocks on the kernel helper threads, kernels/gemm.h).
std::unique_ptr<Pass> MakeOpenMpGemmPass();
// Added when the "gemv" fusion is off: CPU matmuls get attr gemv=false (a few rows of a run
// as oneDNN GEMMs instead of the kernels' GEMV loop, kernels/gemv.h).
std::unique_ptr<Pass> MakeNoGemvPass();
// Added when the "narrow_gemm" fusion is off (graph/narrow_gemm.cc): CPU matmul /
// matmul_sgd_update get attr narrow_gemm=false (GEMMs with one small dimension run as oneDNN
// GEMMs instead of the kernels' register-tiled loops, kernels/matmul_narrow.h).
std::unique_ptr<Pass> MakeNoNarrowGemmPass();
// Added when the "packed_weights" fusion is off: CPU matmuls and conv2ds get attr
// packed_weights=false (a right operand the job only reads stays where it is instead of a copy
// in oneDNN's packed layout, kernels/matmul_packed.h; conv2d: its channels-last 1x1 GEMM). These four passes: graph/kernel_choice.cc.
std::unique_ptr<Pass> MakeNoPackedWeightsPass();
// CPU train jobs (graph/softmax_fusion.cc): sparse_softmax_cross_entropy and its gradient, prob
// read by nothing else, become sparse_softmax_cross_entropy_with_grad (loss and dlogits).
std::unique_ptr<Pass> MakeSoftmaxCrossEntropyGradFusionPass();
// Single-device CPU jobs (graph/matmul_bias_grad.cc, "matmul_bias_grad"): bias_add_grad(dy) on
// the last axis of a float32 matmul's output dy becomes that matmul's second output (attr
// fuse_bias_grad); a bias_add_grad_sgd_update of such a dy becomes sgd_update of it.
std::unique_ptr<Pass> MakeMatmulBiasGradFusionPass();

// Single-device CPU jobs (graph/conv_fusion.cc): a conv2d's only reader fuses into it as an
// epilogue: bias_add and inference batch_normalization (`batch_norm`), relu and clamp
// (`activation`); whatever a job returns or watches stays as it was. `placed`: the same after
// the SBP pass on several devices of one machine, where both ops share devices and layouts.
std::unique_ptr<Pass> MakeConvFusionPass(bool batch_norm, bool activation, bool placed = false);
// Train jobs on one CPU device (graph/conv_fusion.cc, "conv_bias_grad"): a conv layer's
// bias_add_grad(dy) becomes the second output of its conv2d_grad_filter(dy, x). `placed`: as
// for MakeConvFusionPass.
std::unique_ptr<Pass> MakeConvBiasGradFusionPass(bool placed = false);
// Predict jobs on one CPU device (graph/channels_last.cc): regions of convolutions and the
// per-element/per-channel ops between them run in NHWC, converted once at their borders.
std::unique_ptr<Pass> MakeChannelsLastPass();
// Jobs on one CPU device (graph/blocked_layout.cc, "blocked_layout"): tensors between
// convolutions, pools and elementwise ops that all work on oneDNN's blocked channel layout
// nChw{B}c are stored in it (attrs channel_block, blocked_inputs, blocked_outputs), instead of
// being reordered in and out of it by each convolution. channel_block < 0: this CPU's own
// (kernels/blocked_layout.h NativeChannelBlock; 0 turns the pass off). `placed`: the same after
// the SBP pass on several devices of one machine, for tensors written and read as S(0), B or
// P only (their boxings move whole samples or sum element by element: layout-blind).
std::unique_ptr<Pass> MakeBlockedLayoutPass(int64_t channel_block = -1, bool placed = false);

// The fusions a user can turn off to bisect a numerical difference (CompileOptions::
// disabled_fusions): "dense" (MakeFusionPass), "gradient_update", "conv_batch_norm" and
// "conv_activation" (MakeConvFusionPass), "channels_last" (MakeChannelsLastPass) and
// "gemm_chunks" (CPU GEMMs split into blocks over the kernel helper threads; off:
// MakeOpenMpGemmPass), "pool_relu_grad" (MakePoolReluGradFusionPass), "matmul_relu_grad"
// (MakeMatmulReluGradFusionPass), "bias_gradient_update" (MakeBiasGradientUpdateFusionPass),
// "conv_bias_grad" (MakeConvBiasGradFusionPass), "gemv" (batch-1 matmuls as the kernels' GEMV
// loop; off: MakeNoGemvPass), "narrow_gemm" (GEMMs with one small dimension as the kernels'
// loops; off: MakeNoNarrowGemmPass), "packed_weights" (a predict job's weights in oneDNN's
// packed layout; off: MakeNoPackedWeightsPass), "softmax_cross_entropy_grad"
// (MakeSoftmaxCrossEntropyGradFusionPass), "blocked_layout" (MakeBlockedLayoutPass) and
// "matmul_bias_grad" (MakeMatmulBiasGradFusionPass).
const std::vector<std::string>& FusionNames();

// Resolves every node's placement to device ids (Node::devices): an empty placement is every
// device of graph.device_num(); backward ops and updates carry their forward op's and
// variable's placement from the passes that made them. Errors name op, placement and line.
std::unique_ptr<Pass> MakePlacementPass();
// Chooses each op's SBP signature in topological order among CandidateSbpSignatures: the one
// whose inputs cost the fewest bytes of boxing from what their producers chose, plus its
// outputs' boxing to readers whose layout is known already (updates, outputs, watches) (ties:
// the op's order), among those that split only axes long enough and honour the user's hints.
// An all-broadcast choice runs on one device (its register serves every device); an op without
// inputs takes the layout all its readers chose. Feeds are
// steered to S(0) (B if the batch axis is too short), variables to B, unless hinted. In-place
// writers run once, on their variable's first device (variables are one buffer), except where
// every variable they write is stored split (StoredLayout) and one of their signatures writes
// each with its stored layout: then on every device, each on its shard; ops without an
// SBP function run whole on their placement's first device. A split no signature avoids and an
// impossible hint are InvalidArgument naming op, blob, axis and line.
std::unique_ptr<Pass> MakeSbpPass();
// Inserts a "boxing" node (kernels/boxing.h) on each edge whose producer's (devices, layout)
// differs from what the reader's signature needs, and before the outputs and watches (the whole
// tensor on one device). P->B on the same devices becomes P->S(k) then S(k)->B.
std::unique_ptr<Pass> MakeBoxingPass();
// How a variable or placeholder is stored over its devices: S(k) where it is laid out S(k)
// (a variable: hinted; a placeholder: as the SBP pass chose, S(0) by default) on several
// devices of one machine and each device's shard is a byte range of the one buffer (every
// axis before k has length 1), else B. It stays one whole buffer (checkpoints, the store and
// the feed see the logical tensor), but each device's readers with the same layout read its
// shard in place (InputDesc.part), and a variable's elementwise updates run on every device,
// each writing only its shard: no task slices the tensor and none gathers a variable's
// gradient. Variables stored B (strided splits included) are read whole and updated on their
// first device.
// In a job over several machines a variable hinted S(k) is stored as shards instead
// (ShardedVariable), whatever k: one VARIABLE task and buffer per device of its placement, each
// holding that device's part only, so no machine allocates another machine's part.
Sbp StoredLayout(const Graph& graph, const Node& source);
// Whether `source` is a variable stored as one buffer per device (jobs over several machines,
// hinted S(k) on several devices): StoredLayout is then that split, its VARIABLE tasks carry
// the attrs "shard_axis", "shard_index" and "shard_parts", and its readers and updates on the
// same devices read and write their own device's shard whole.
bool ShardedVariable(const Graph& graph, const Node& source);

// The attribute of a placeholder fed per machine (JobBuilder::SetFedPerMachine).
inline constexpr const char* kFedPerMachineAttr = "fed_per_machine";
// Whether `n` is a placeholder fed per machine in a job of several machines: the mirrored
// view's list placeholder, laid out S(0) over every device of every machine. Lowering makes one
// SOURCE per machine, on its first device, holding that machine's rows (its devices' shards in
// order; the call's feed on that machine's rank is those rows, Session's input desc), and each
// device reads its shard of its own machine's source in place: no rows cross machines unless
// a reader wants another layout (then the M sources are the shards of S(0) over M parts).
bool FedPerMachine(const Graph& graph, const Node& n);

// The attribute of an identity whose output, a call's output, is fetched per machine (the
// mirrored view's list results across machines).
inline constexpr const char* kOutputPerMachineAttr = "output_per_machine";
// Whether output `ref` of a job on several machines is fetched per machine: it is laid out S(0)
// over every device of every machine (the boxing pass makes it so instead of gathering it on
// one device), and each machine's main sink reads only its own devices' rows (one shard read
// in place, or a gather of the machine's shards on its first device); the session's output desc
// is the machine's rows. Nothing of it crosses machines.
bool OutputPerMachine(const Graph& graph, const std::string& ref);

// One line per node after the SBP pass: name (type) on placement: inputs->outputs  @ file:line.
std::string SbpSummary(const Graph& graph);

struct CompileOptions {
  int register_num = 2;       // registers per output of sources and compute tasks
  std::string dump_dot_dir;   // "" = ACTORFLOW_DUMP_DOT if set, else no dumps
  // Prints SbpSummary to stderr after compiling (also when ACTORFLOW_SBP_SUMMARY is set to a
  // value other than "0"); with DOT dumps it is written beside them as <job>.sbp.txt too.
  bool print_sbp_summary = false;
  // When set, receive (step, seconds) for each pass, then "lower", "verify" and "memory", in
  // order: wall time, and the compiling thread's CPU time (graph/step_clock.h).
  std::vector<std::pair<std::string, double>>* timings = nullptr;
  std::vector<std::pair<std::string, double>>* cpu_timings = nullptr;
  // Fusions to skip, by FusionNames(); an unknown name is InvalidArgument listing them.
  std::vector<std::string> disabled_fusions;
  // Registers whose lifetimes never overlap share memory, and tasks that cannot run ahead get
  // one register (graph/memory_plan.h). Off: every register its own memory, register_num each.
  bool memory_sharing = true;
  // Off: calls of the job never overlap (Plan.serial_iterations): each waits until the previous
  // one finished, so every register may share memory, even in a pipeline that could run ahead.
  bool pipelining = true;
};

// Runs the pipeline on `graph` (modified in place) and lowers it.
StatusOr<plan::Plan> CompileGraph(Graph& graph, const CompileOptions& options);
// The same plan, built in a protobuf arena that the pointer owns: its tasks, registers and
// inputs lie in a few large blocks in the order lowering made them, so every later pass over
// them (checks, memory plan, job cache index, runtime start) walks memory in order instead of
// chasing ~30 heap blocks per task (a plan of thousands of tasks outgrows the caches).
StatusOr<std::shared_ptr<plan::Plan>> CompileGraphShared(Graph& graph, const CompileOptions& options);

// Lowering alone (expects the passes to have run): one SOURCE per feed, one VARIABLE per
// variable (each holding the whole tensor on its first device), one COMPUTE per op and device
// of its placement (named <op>@<device> when there are several) with physical shapes and
// attributes, the main SINK over the outputs and a SINK per watch.
StatusOr<plan::Plan> LowerToPlan(const Graph& graph, const CompileOptions& options);
// The same into `plan` (empty; any arena).
Status LowerInto(const Graph& graph, const CompileOptions& options, plan::Plan& plan);

// Internal error unless every task reading a register that some task writes in place (sinks
// included) runs before that writer in the same iteration (is its ancestor through data and
// control edges): an unordered reader races with the write, and one after it would see this
// iteration's update where every other reader saw the value before it. Two writers of one
// register need only be ordered. CompileGraph runs it on every plan.
Status VerifyInPlaceOrder(const plan::Plan& plan);
// The same on `tasks`, read from `plan` as it is now (PlanTasks::Of, graph/plan_tasks.h).
Status VerifyInPlaceOrder(const plan::Plan& plan, const PlanTasks& tasks);

// Data parallelism across machines without a funnel: every variable of machine 0 gets a copy on
// every machine whose tasks read one of them, and so does every task writing one (the optimizer's updates) and
// what those read from machine 0 (back to the feeds and to tasks reading several machines: each
// copy reads those through the network). A boxing summing partial values of several machines
// (P -> B, float32/float64) that the copies read becomes one ALL_REDUCE task per machine over
// that machine's partial values (op type "all_reduce", asynchronous, attrs channel and ring, the
// machines in order; comm/data_plane.h): each machine updates its own copy with the same sum.
// Other machines' tasks read their own machine's copy; a copy keeps the control inputs (in-place
// order) from its own machine only; each machine's main sink waits for its copies as machine
// 0's waits for the originals. A plan whose variables only machine 0 reads comes back as is.
// Shards of variables stored per device (ShardedVariable) and their updates are not copied:
// each lives on its own machine only (model parallelism across machines).
StatusOr<plan::Plan> ReplicateVariablesAcrossMachines(const plan::Plan& plan);

// A plan whose tasks live on several machines (Task.machine_id), with every edge whose producer
// and consumer are on different machines replaced by a SEND task on the producer's machine and a
// RECV task on the consumer's (op types "send"/"recv", asynchronous; attrs channel (the pair's
// index, the same on both sides), peer (the other machine), bytes). One pair per (register,
// consumer machine); a control edge becomes a pair carrying no bytes. Each machine's main sink
// waits for its sends. Tasks are renumbered (still topological). A plan on one machine comes
// back unchanged. CompileGraph runs it when machine_num > 1.
StatusOr<plan::Plan> InsertCrossMachineTransfers(const plan::Plan& plan, int register_num);

// The tasks of one machine, what that machine's process instantiates. Task ids stay those of
// the whole plan; SOURCE feed indices are renumbered 0..k-1 and `feeds[k]` is the whole plan's
// feed index of local feed k.
struct MachinePlan {
  plan::Plan plan;
  std::vector<int> feeds;
};
StatusOr<MachinePlan> ExtractMachinePlan(const plan::Plan& plan, int machine);

// Graphviz text of a plan: tasks, registers (register_num), data and control edges.
std::string PlanToDot(const plan::Plan& plan);

}  // namespace graph
}  // namespace actorflow

// The pipeline driver (CompileGraph): the passes in order, lowering, and the checks and
// rewrites of the lowered plan; optional DOT dumps after each step.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "graph/device_placement.h"
#include "graph/memory_plan.h"
#include "graph/passes.h"
#include "graph/step_clock.h"

namespace actorflow {
namespace graph {
namespace {

std::string SafeFileName(const std::string& s) {
  std::string out;
  for (char c : s) out += (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return out;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) return InvalidArgument("cannot write DOT dump '" + path + "'");
  return Status::Ok();
}

}  // namespace

namespace {
Status CompileInto(Graph& graph, const CompileOptions& options, plan::Plan& plan);
}  // namespace

StatusOr<plan::Plan> CompileGraph(Graph& graph, const CompileOptions& options) {
  plan::Plan plan;
  AF_RETURN_IF_ERROR(CompileInto(graph, options, plan));
  return plan;
}

StatusOr<std::shared_ptr<plan::Plan>> CompileGraphShared(Graph& graph, const CompileOptions& options) {
  // On the heap, not in a protobuf arena: a plan built in an arena and shared with the job
  // cache crashed in the arena's destructor (a map field's cleanup, libprotobuf 3.21) in about
  // half the runs of the installed C++ consumer under TSan (install_consumer).
  auto plan = std::make_shared<plan::Plan>();
  AF_RETURN_IF_ERROR(CompileInto(graph, options, *plan));
  return plan;
}

namespace {
Status CompileInto(Graph& graph, const CompileOptions& options, plan::Plan& plan) {
  std::string dump_dir = options.dump_dot_dir;
  if (dump_dir.empty()) {
    const char* env = std::getenv("ACTORFLOW_DUMP_DOT");
    if (env != nullptr) dump_dir = env;
  }
  std::string prefix = dump_dir.empty() ? "" : dump_dir + "/" + SafeFileName(graph.job_name()) + ".";
  if (!dump_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(dump_dir, error);
    if (error) return InvalidArgument("cannot create DOT dump directory '" + dump_dir + "': " + error.message());
  }
  if (!prefix.empty()) AF_RETURN_IF_ERROR(WriteFile(prefix + "00-traced.dot", graph.ToDot()));
  auto enabled = [&](const std::string& fusion) {
    return std::find(options.disabled_fusions.begin(), options.disabled_fusions.end(), fusion) ==
           options.disabled_fusions.end();
  };
  for (const std::string& fusion : options.disabled_fusions)
    if (std::find(FusionNames().begin(), FusionNames().end(), fusion) == FusionNames().end())
    {
      std::string known;
      for (const std::string& name : FusionNames()) known += (known.empty() ? "" : ", ") + name;
      return InvalidArgument("unknown fusion '" + fusion + "' to disable (known: " + known + ")");
    }
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(MakeAutodiffPass());
  passes.push_back(MakeOptimizerPass());
  passes.push_back(MakePrunePass());
  if (enabled("dense")) passes.push_back(MakeFusionPass());
  if (enabled("gradient_update")) passes.push_back(MakeGradientUpdateFusionPass());
  // Before bias_gradient_update: a conv layer's bias gradient is summed by its filter
  // gradient's kernel (no pass over dy); the dense layers' go to their SGD update.
  if (enabled("conv_bias_grad")) passes.push_back(MakeConvBiasGradFusionPass());
  if (enabled("bias_gradient_update")) passes.push_back(MakeBiasGradientUpdateFusionPass());
  if (enabled("pool_relu_grad")) passes.push_back(MakePoolReluGradFusionPass());
  if (enabled("matmul_relu_grad")) passes.push_back(MakeMatmulReluGradFusionPass());
  if (enabled("softmax_cross_entropy_grad")) passes.push_back(MakeSoftmaxCrossEntropyGradFusionPass());
  // After matmul_relu_grad (the masked data-gradient matmul) and bias_gradient_update.
  if (enabled("matmul_bias_grad")) passes.push_back(MakeMatmulBiasGradFusionPass());
  if (enabled("conv_batch_norm") || enabled("conv_activation"))
    passes.push_back(MakeConvFusionPass(enabled("conv_batch_norm"), enabled("conv_activation")));
  if (enabled("channels_last")) passes.push_back(MakeChannelsLastPass());
  // After channels_last: the convolutions it moved to NHWC are not blocked.
  if (enabled("blocked_layout")) passes.push_back(MakeBlockedLayoutPass());
  if (!enabled("gemm_chunks")) passes.push_back(MakeOpenMpGemmPass());
  if (!enabled("gemv")) passes.push_back(MakeNoGemvPass());
  if (!enabled("narrow_gemm")) passes.push_back(MakeNoNarrowGemmPass());
  if (!enabled("packed_weights")) passes.push_back(MakeNoPackedWeightsPass());
  passes.push_back(MakeOrderingPass());
  passes.push_back(MakePlacementPass());
  passes.push_back(MakeSbpPass());
  if (enabled("gradient_update")) passes.push_back(MakeGradientUpdateFusionPass(/*placed=*/true));
  if (enabled("conv_bias_grad")) passes.push_back(MakeConvBiasGradFusionPass(/*placed=*/true));
  if (enabled("conv_batch_norm") || enabled("conv_activation"))
    passes.push_back(MakeConvFusionPass(enabled("conv_batch_norm"), enabled("conv_activation"), /*placed=*/true));
  // After the placed fusions (their fused ops are what reads and writes the tensors), before
  // boxing (a tensor a boxing would read stays plain).
  if (enabled("blocked_layout")) passes.push_back(MakeBlockedLayoutPass(-1, /*placed=*/true));
  passes.push_back(MakeBoxingPass());
  StepClock clock(options.timings, options.cpu_timings);
  auto lap = [&](const std::string& step) { clock.Lap(step); };
  for (size_t i = 0; i < passes.size(); ++i) {
    AF_RETURN_IF_ERROR(passes[i]->Run(graph).WithContext("job '" + graph.job_name() + "'"));
    lap(passes[i]->name());
    if (!prefix.empty()) {
      char number[24];
      std::snprintf(number, sizeof(number), "%02zu", i + 1);
      AF_RETURN_IF_ERROR(WriteFile(prefix + number + "-" + passes[i]->name() + ".dot", graph.ToDot()));
      clock.Restart();  // dumps are not compiling
    }
  }
  const char* summary_env = std::getenv("ACTORFLOW_SBP_SUMMARY");
  if (options.print_sbp_summary || (summary_env != nullptr && std::string(summary_env) != "0" && *summary_env))
    std::fprintf(stderr, "SBP of job '%s':\n%s", graph.job_name().c_str(), SbpSummary(graph).c_str());
  if (!prefix.empty()) AF_RETURN_IF_ERROR(WriteFile(prefix + "sbp.txt", SbpSummary(graph)));
  clock.Restart();  // the optional summary and dumps are not compiling
  AF_RETURN_IF_ERROR(LowerInto(graph, options, plan));
  AF_RETURN_IF_ERROR(PlaceOnDevices(plan).WithContext("job '" + graph.job_name() + "'"));
  lap("lower");
  {
    // The check and the memory planner read the plan's tasks once, into flat arrays.
    StatusOr<PlanTasks> tasks = PlanTasks::Of(plan);
    if (!tasks.ok()) return tasks.status().WithContext("job '" + graph.job_name() + "'");
    AF_RETURN_IF_ERROR(VerifyInPlaceOrder(plan, tasks.value()).WithContext("job '" + graph.job_name() + "'"));
    lap("verify");
    plan.set_serial_iterations(!options.pipelining);
    if (options.memory_sharing && graph.machine_num() == 1) {
      AF_RETURN_IF_ERROR(
          PlanRegisterMemory(plan, tasks.value()).WithContext("job '" + graph.job_name() + "'"));  // and verifies
      lap("memory");
    }
  }
  if (!prefix.empty()) AF_RETURN_IF_ERROR(WriteFile(prefix + "memory.txt", MemoryPlanText(plan)));
  // After the order check: a recv has no inputs in the plan, so the order a writer keeps with
  // a reader on another machine runs through the network (the reader's send copies the bytes
  // before the reader, and so the writer, can act), which the check cannot follow.
  if (graph.machine_num() > 1) {
    AF_ASSIGN_OR_RETURN(plan, ReplicateVariablesAcrossMachines(plan));
    AF_RETURN_IF_ERROR(VerifyInPlaceOrder(plan).WithContext("job '" + graph.job_name() + "', variables on every machine"));
    AF_ASSIGN_OR_RETURN(plan, InsertCrossMachineTransfers(plan, options.register_num));
    lap("send/recv");
    // What each machine's process instantiates (memory.txt above is the plan before the
    // variables' copies and the send/recv pairs, every machine together).
    for (int machine = 0; machine < graph.machine_num() && !prefix.empty(); ++machine) {
      AF_ASSIGN_OR_RETURN(MachinePlan part, ExtractMachinePlan(plan, machine));
      AF_RETURN_IF_ERROR(
          WriteFile(prefix + "machine" + std::to_string(machine) + ".memory.txt", MemoryPlanText(part.plan)));
    }
  }
  MarkStreamOrderedTasks(plan);
  if (!prefix.empty()) AF_RETURN_IF_ERROR(WriteFile(prefix + "plan.dot", PlanToDot(plan)));
  return Status::Ok();
}
}  // namespace

}  // namespace graph
}  // namespace actorflow

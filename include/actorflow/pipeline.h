// actorflow's C++ embedding API: build a DAG of your own C++ kernels over tensors and run it
// on the actor runtime, with register_num per edge as the backpressure bound.
//
//   actorflow::Pipeline p;
//   auto in = p.AddInput("batch", {{64, 784}, actorflow::DType::kFloat32});
//   auto y = p.AddStage("scale", {in}, {{{64, 784}, actorflow::DType::kFloat32}},
//                       [](const actorflow::StageArgs& a) { ...; return actorflow::Status::Ok(); });
//   p.SetOutputs({y});
//   p.Start();
//   p.Run({input_view}, {output_view});
//
// Thread-safety: build (Add*, SetOutputs, EnableTrace, Start) from one thread; after Start,
// Push/Run/Drain are thread-safe. Stage functions run on runtime threads, one call at a time
// per stage, iterations in order. An asynchronous stage (AddAsyncStage) starts its work there
// and completes it from any thread.
//
// Errors: a bad argument to Add*/SetOutputs (a negative dimension, an unknown dtype,
// register_num < 1, an empty stage function, an unknown port) is reported by Start; a bad
// Push (wrong count, desc or a null buffer) fails that Push and the next one still works.
// A stage that returns an error or throws fails that iteration only (the error names the stage
// and, for an exception, its what()); later iterations run normally.
//
// Completions (and stages) run on runtime threads. Push, PushAsync and Run called from a
// completion or a stage fail at once with FailedPrecondition (they could wait for the thread
// they block); Drain returns at once there. To push from a completion, hand the work to
// another thread. A completion that throws is caught and reported on stderr (once per
// pipeline); the pipeline carries on.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "actors/status.h"
#include "actors/tensor.h"

namespace actorflow {

// One output of a node (an input or a stage).
struct Port {
  int node = -1;
  int output = 0;
};

struct StageArgs {
  const std::vector<TensorView>& inputs;
  const std::vector<TensorView>& outputs;
  int64_t iteration;
};
using StageFn = std::function<Status(const StageArgs&)>;
// An asynchronous stage: starts work and returns; the work calls done.Complete(status) exactly
// once, from any thread, when it has finished writing the outputs (see actors/kernel.h for the
// whole contract). Until then the iteration's input and output registers stay held, so the
// work may read args.inputs[i].data and write args.outputs[i].data; copy those pointers
// before returning (the vectors are valid only during the call). Returning an error fails the
// iteration (the stage still waits for `done`, or for every copy of it to be dropped).
using AsyncStageFn = std::function<Status(const StageArgs& args, KernelCompletion done)>;

struct PipelineOptions {
  int num_threads = 0;          // thread budget; 0: number of cores (see RuntimeOptions)
  std::string trace_path;       // non-empty: record a Chrome trace, written by Finish()
  // Or record into your own observer (not owned; must outlive the Pipeline); Finish() does not
  // write it. Ignored when trace_path is set.
  RuntimeObserver* observer = nullptr;
  // Called on each runtime thread as it starts with the threads a stage may use, e.g.
  // [](int n) { omp_set_num_threads(n); } for stages calling oneDNN/BLAS.
  std::function<void(int kernel_threads)> on_worker_start;
  // See RuntimeOptions: how long Shutdown/the destructor waits before abandoning in-flight
  // iterations and stopping the actors (an error, never silent), and who hears of it.
  std::chrono::milliseconds shutdown_timeout{30000};
  std::function<void(const Status&)> on_forced_shutdown;
};

class Pipeline {
 public:
  Pipeline();
  ~Pipeline();  // drains in-flight iterations, stops every actor
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // A host-fed input; `register_num` inputs may be in flight before Push blocks.
  Port AddInput(const std::string& name, TensorDesc desc, int register_num = 2);
  // A stage reading `inputs` and writing one register per output (register_num each).
  // Returns the first output's port; other outputs are {node, k}. `op` names the stage's acts
  // in traces (empty: the stage's name; stages running the same code may share one op).
  Port AddStage(const std::string& name, std::vector<Port> inputs, std::vector<TensorDesc> outputs, StageFn fn,
                int register_num = 2, const std::string& op = "");
  // A stage whose work completes later (AsyncStageFn): up to `register_num` iterations of it
  // may be in flight at once; completions may come in any order, the stage's outputs are
  // announced in iteration order.
  Port AddAsyncStage(const std::string& name, std::vector<Port> inputs, std::vector<TensorDesc> outputs,
                     AsyncStageFn fn, int register_num = 2, const std::string& op = "");
  // What Push delivers into the caller's buffers (may be empty: then a call completes when
  // every stage finished its iteration).
  void SetOutputs(std::vector<Port> outputs);

  Status Start(PipelineOptions options = {});

  StatusOr<int64_t> Push(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                         Completion done);
  std::future<Status> PushAsync(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs);
  Status Run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs);
  void Drain();
  // Drains and stops every actor (the destructor does it too); an error if that needed longer
  // than shutdown_timeout. Push fails afterwards.
  Status Shutdown();
  // Drains and, if tracing, writes the trace file.
  Status Finish();
  // Pauses (false) or resumes (true) trace recording, e.g. to skip warm-up iterations; acts
  // in progress finish unrecorded. Thread-safe; no effect without a trace.
  void SetTraceRecording(bool on);

  std::string PlanText() const;  // the generated plan, protobuf text format

 private:
  Port AddStageTask(const char* call, const std::string& name, std::vector<Port> inputs, std::vector<TensorDesc> outputs,
                    int register_num, const std::string& op, bool asynchronous);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorflow

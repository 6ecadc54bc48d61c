// Session: the process's variable store and the jobs compiled against it. The C++ side of
// _C.Session / _C.CompiledJob (python_bindings/C_API.md); no Python in here.
//
// Variables are aligned host buffers keyed by name, shared by every job of the session (a
// predict job defining the same layers reads what a train job learned). Jobs are ordered per
// variable they share, not per session: a call of a job that writes variable v starts once no
// other job reading or writing v has iterations in flight, and a call of a job reading v once
// no other job writing v has; jobs sharing nothing, or only reading, run concurrently. Waiting
// callers are served in arrival order (a job pushing asynchronously cannot starve another).
// Variable copies in and out (Get/SetVariable) are ordered the same way.
//
// Every job's runtime runs on the process's Environment (session/environment.h).
//
// fork(): in the child, each job rebuilds its runtime on the child's environment at its next
// call (the plan and the variables, copied by fork, are kept); what was in flight in the
// parent at fork time is not delivered in the child.
//
// Thread-safety: all methods are thread-safe. Completions and sink callbacks run on actor
// threads (see actors/runtime.h) and must not call back into the session.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <condition_variable>
#include <set>

#include "actors/runtime.h"
#include "graph/job_builder.h"
#include "graph/passes.h"
#include "session/environment.h"
#include "session/job_cache.h"
#include "session/variable_parts.h"

namespace actorflow {

class SessionState;

struct JobOptions {
  int num_threads = 0;        // runtime thread budget (0 = number of cores)
  // CAF workers (0 = 1, or min(devices, num_threads) for a job spread over several devices;
  // jobs with equal counts share the scheduler)
  int num_workers = 0;
  int kernel_threads = 0;     // intra-op threads per kernel (0 = num_threads / num_workers, >= 1)
  bool print_sbp_summary = false;  // graph::CompileOptions::print_sbp_summary
  int register_num = 2;
  std::string dump_dot_dir;   // "" = ACTORFLOW_DUMP_DOT or nothing
  std::string trace_path;     // Chrome trace written at drain()/shutdown when set
  // Reuse the compiled plan of an earlier job whose trace is the same up to names (see
  // session/job_cache.h). Off by itself while DOT dumps or the SBP summary are asked for.
  bool use_job_cache = true;
  // graph::CompileOptions::disabled_fusions, plus the comma-separated names in the environment
  // variable ACTORFLOW_DISABLE_FUSION (to bisect a numerical difference without editing code).
  std::vector<std::string> disabled_fusions;
  // graph::CompileOptions::memory_sharing; ACTORFLOW_DISABLE_MEMORY_SHARING=1 turns it off for
  // every job (to bisect a wrong result without editing code).
  bool memory_sharing = true;
  bool pipelining = true;  // graph::CompileOptions::pipelining
  // Synchronous calls of an idle job run on the caller's thread (RuntimeOptions::run_inline)
  // when its plan allows and no op keeps kernel state (OpDef::stateful_kernel); one process,
  // CPU only. ACTORFLOW_DISABLE_RUN_INLINE=1 turns it off for every job (to bisect).
  bool run_inline = true;
};

// Watch handlers: (handler name, iteration, views valid only during the call). Actor thread.
using SinkCallback = std::function<void(const std::string&, int64_t, const std::vector<TensorView>&)>;

struct NamedDesc {
  std::string name;
  TensorDesc desc;
};

class ClusterMembership;

class CompiledJob {
 public:
  ~CompiledJob();
  const std::string& name() const;
  const std::vector<NamedDesc>& input_descs() const { return input_descs_; }
  const std::vector<NamedDesc>& output_descs() const { return output_descs_; }
  // The compiled plan and graph under this job's names. A job whose structure came from the job
  // cache runs the cached plan under a table of its names (PlanNames); these copies of it are
  // made on the first call (thread-safe), for whoever reads them (dumps, summaries, tests).
  const plan::Plan& plan() const;
  const graph::Graph& graph() const;
  // The tasks this process runs: plan(), or on a rank of a job over several machines its
  // machine's part (graph::ExtractMachinePlan: its own tasks, send/recv included).
  const plan::Plan& machine_plan() const { return distributed_ ? local_plan_ : plan(); }
  // This process's machine in the job: 0 unless it runs over several machines.
  int machine() const;
  // Whether the job has a watch (flow.watch / watch_diff) whose handler is `name`.
  bool has_watch_handler(const std::string& name) const;
  // Variables the plan reads without writing them, and variables it writes (in place).
  const std::set<std::string>& reads() const { return reads_; }
  const std::set<std::string>& writes() const { return writes_; }
  // Where Session::Compile spent its time: (step, seconds) for copying the traced graph, each
  // compiler pass, lowering, the in-place order check, binding variables and starting the
  // runtime, in that order.
  const std::vector<std::pair<std::string, double>>& compile_timings() const { return compile_timings_; }
  // The same steps' CPU time on the compiling thread (graph/step_clock.h): what each step
  // costs, without the waits for a core that a loaded host adds to the wall time.
  const std::vector<std::pair<std::string, double>>& compile_cpu_timings() const { return compile_cpu_timings_; }

  // One iteration (see Runtime::Push); first waits for the jobs it conflicts with. `inputs`
  // must match input_descs exactly (InvalidArgument naming the input otherwise); `outputs`
  // are caller buffers matching output_descs, valid until `done` ran. Blocks under
  // backpressure. FailedPrecondition after Shutdown.
  // `may_run_inline`: see Runtime::Push (the caller waits for `done`; Run's and Python's run).
  StatusOr<int64_t> Push(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs, Completion done,
                         bool may_run_inline = false);
  // Why synchronous calls go through the actors ("" when they run inline; JobOptions::run_inline).
  std::string inline_refusal() const;
  Status Run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs);
  // Waits for every pushed iteration (and writes the trace if one was asked for).
  void Drain();
  // Drains and destroys the runtime; later calls fail. Idempotent.
  void Shutdown();
  int64_t in_flight() const { return in_flight_.load(); }
  // The thread budget's split for this job: actor workers and intra-op threads per kernel.
  int num_workers() const { return runtime_options_.num_workers; }
  int kernel_threads() const { return runtime_options_.kernel_threads; }
  // Checks inputs against input_descs: "input 'x': expected float32(2, 3), got float32(3, 2)".
  Status CheckInputs(const std::vector<TensorView>& inputs) const;

 private:
  friend class Session;
  friend class SessionState;
  CompiledJob() = default;
  void WriteTrace();  // the recorder to options_.trace_path; a failure goes to stderr
  // runtime_mu_ held. Builds the runtime on this process's environment (again after fork).
  Status InstantiateLocked();
  // runtime_mu_ held. After fork, abandons the parent's runtime and builds a fresh one.
  Status RefreshAfterForkLocked();
  void Finished();  // an iteration's completion ran

  // The renamed copies of a job from the cache, made by graph() or plan() (once).
  void MakeRenamedCopies() const;

  std::shared_ptr<SessionState> session_;
  // Immutable once compiled; shared with the job cache's entry (session/job_cache.h). plan_ is
  // what the runtime runs: for a job from the cache, the entry's plan under names_.
  mutable std::shared_ptr<const graph::Graph> graph_;  // a job from the cache: made by MakeRenamedCopies
  std::shared_ptr<const plan::Plan> plan_;
  // A job from the cache (else null): the entry it shares and its own names for it.
  std::shared_ptr<const CachedCompile> cached_;
  std::shared_ptr<const JobNames> names_;
  mutable std::once_flag renamed_once_;
  mutable std::shared_ptr<const plan::Plan> renamed_plan_;
  // A job over several machines (graph machine_num > 1): this rank's tasks, and for each of
  // its feeds the index of the job's input it reads (the other inputs are read elsewhere).
  bool distributed_ = false;
  std::shared_ptr<ClusterMembership> membership_;  // distributed_: counts and watches the calls
  plan::Plan local_plan_;
  std::vector<int> local_feeds_;
  std::vector<TensorView> local_inputs_;  // scratch for Push, guarded by runtime_mu_
  JobOptions options_;
  std::vector<NamedDesc> input_descs_, output_descs_;
  std::vector<std::shared_ptr<void>> variables_;  // keeps the store's buffers alive
  std::unique_ptr<RuntimeObserver> recorder_;
  std::set<std::string> reads_, writes_;
  // The version counters of the variables this job writes (StoredVariable::version), bumped at
  // each call: kernels of jobs that only read them derive their data again.
  std::vector<std::shared_ptr<std::atomic<int64_t>>> written_versions_;
  std::vector<std::pair<std::string, double>> compile_timings_, compile_cpu_timings_;
  RuntimeHooks hooks_;            // kept to rebuild the runtime after fork
  RuntimeOptions runtime_options_;
  std::unique_ptr<Runtime> runtime_;
  uint64_t generation_ = 0;       // Environment::generation() when runtime_ was built
  bool shut_down_ = false;
  std::atomic<int64_t> in_flight_{0};
  mutable std::mutex runtime_mu_;  // guards runtime_ against Shutdown during a call
};

class Session {
 public:
  Session();
  ~Session();  // shuts down every job

  bool HasVariable(const std::string& name) const;
  // InvalidArgument if it exists (with another shape/dtype) or the data size is wrong.
  Status CreateVariable(const std::string& name, const TensorDesc& desc, const void* initial);
  // A variable over memory someone else owns (an eager tensor's storage, session/eager.h):
  // jobs read and write `storage` itself, so a compiled job's updates are seen by the owner
  // and the owner's writes by later calls; the caller orders its own writes against calls in
  // flight. `storage` must hold desc.byte_size() bytes, aligned like a variable's (64), and is
  // kept alive while the session or a job holds the variable. When a variable over the same
  // storage and desc exists already, its name is returned and nothing is created (so jobs
  // sharing a tensor are ordered by one variable); otherwise one named `name` is created
  // (InvalidArgument if that name is taken, the storage is null or misaligned). `version`: the
  // owner's counter that moves with every write to the storage (an eager tensor's); the session
  // bumps it too when a job writes the variable, and jobs only reading it may keep data derived
  // from it until it moves (KernelInit::input_versions). Null: the owner's writes are not
  // counted, so no job keeps anything derived from the variable.
  StatusOr<std::string> CreateVariableOver(const std::string& name, const TensorDesc& desc, std::shared_ptr<void> storage,
                                           std::shared_ptr<std::atomic<int64_t>> version = nullptr);
  // Removes a variable no compiled job holds (FailedPrecondition if one does, NotFound if it
  // does not exist): what a job that failed to compile created is rolled back this way.
  Status DeleteVariable(const std::string& name);
  StatusOr<TensorDesc> VariableDesc(const std::string& name) const;
  // Copies out/in after draining every job; sizes must match VariableDesc.
  Status GetVariable(const std::string& name, void* out, size_t bytes);
  Status SetVariable(const std::string& name, const TensorDesc& desc, const void* data);
  std::vector<std::string> VariableNames() const;
  // How the jobs over several machines hold the variable (session/variable_parts.h); no
  // machines when no such job bound it. On a rank holding only parts or none of it,
  // GetVariable is FailedPrecondition naming the layout, SetVariable keeps this rank's parts of
  // the logical value, and GetVariablePart copies out part `index` (NotFound unless held here).
  StatusOr<VariableLayout> VariableLayoutOf(const std::string& name) const;
  Status GetVariablePart(const std::string& name, int index, void* out, size_t bytes);
  // Writes part `index` held here (NotFound otherwise; InvalidArgument unless `desc` is the part's).
  Status SetVariablePart(const std::string& name, int index, const TensorDesc& desc, const void* data);

  // Runs the passes on a copy of the builder's graph (or takes the compiled plan of an earlier
  // job of the same structure from the session's job cache, renamed to this job's names),
  // creates missing optimizer state (zeros), checks every variable the job reads exists with
  // the declared shape/dtype, and instantiates the runtime.
  StatusOr<std::shared_ptr<CompiledJob>> Compile(const graph::JobBuilder& builder, const JobOptions& options,
                                                 SinkCallback on_watch = nullptr);
  void WaitAll();
  // Shuts down every job (they fail later calls), drops all variables and the job cache.
  void Reset();
  // Compiled structures held for reuse (at most 16, the most recent).
  size_t job_cache_size() const;

 private:
  std::shared_ptr<SessionState> state_;
};

}  // namespace actorflow

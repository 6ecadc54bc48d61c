#include "session/session.h"
#include "session/session_state.h"

#include "session/cluster_membership.h"
#include "session/variable_parts.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "actors/call_wait.h"
#include "actors/check.h"
#include "actors/environment.h"
#include "actors/device.h"
#include "actors/trace_recorder.h"
#include "graph/attr_convert.h"
#include "graph/device_placement.h"
#include "graph/step_clock.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {

using graph::Graph;
using graph::Node;
using graph::NodeKind;

namespace {
TensorDesc DescOfBlob(const plan::BlobDesc& blob) {
  return TensorDesc{Shape(blob.shape().begin(), blob.shape().end()), FromProtoDType(blob.dtype())};
}
}  // namespace

// ---------------------------------------------------------------------------------- CompiledJob

CompiledJob::~CompiledJob() {
  Shutdown();
  std::lock_guard<std::mutex> lock(session_->order_mu);
  session_->ordered_jobs.erase(this);
}

const std::string& CompiledJob::name() const { return names_ ? names_->job_name : plan_->job_name(); }

void CompiledJob::MakeRenamedCopies() const {
  std::call_once(renamed_once_, [&] {
    graph_ = std::make_shared<const Graph>(RenamedGraph(*cached_, *names_));
    renamed_plan_ = RenamedPlan(*cached_, *names_);
  });
}

const plan::Plan& CompiledJob::plan() const {
  if (!names_) return *plan_;
  MakeRenamedCopies();
  return *renamed_plan_;
}

int CompiledJob::machine() const { return distributed_ ? membership_->rank() : 0; }

const graph::Graph& CompiledJob::graph() const {
  if (names_) MakeRenamedCopies();
  return *graph_;
}

bool CompiledJob::has_watch_handler(const std::string& name) const {
  const std::vector<graph::Watch>& watches = names_ ? names_->traced_watches : graph_->watches();
  for (const graph::Watch& w : watches)
    if (w.handler_name == name) return true;
  return false;
}

Status CompiledJob::CheckInputs(const std::vector<TensorView>& inputs) const {
  if (inputs.size() != input_descs_.size())
    return InvalidArgument("job '" + name() + "' takes " + std::to_string(input_descs_.size()) + " inputs, got " +
                           std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].desc != input_descs_[i].desc)
      return InvalidArgument("job '" + name() + "', input '" + input_descs_[i].name + "': expected " +
                             input_descs_[i].desc.ToString() + ", got " + inputs[i].desc.ToString());
    if (inputs[i].data == nullptr && inputs[i].byte_size() > 0)
      return InvalidArgument("job '" + name() + "', input '" + input_descs_[i].name + "': no data");
  }
  return Status::Ok();
}

void CompiledJob::Finished() {
  if (in_flight_.fetch_sub(1) != 1) return;
  // The last iteration in flight: callers of conflicting jobs may start now.
  std::lock_guard<std::mutex> lock(session_->order_mu);
  session_->order_cv.notify_all();
}

Status CompiledJob::InstantiateLocked() {
  AF_ASSIGN_OR_RETURN(std::shared_ptr<ActorEnvironment> actors, session_->environment->ActorsFor(runtime_options_.num_workers));
  generation_ = Environment::generation();
  // The compiled plan is shared with the runtime (and the job cache), not copied.
  std::shared_ptr<const plan::Plan> plan = distributed_ ? std::make_shared<const plan::Plan>(local_plan_) : plan_;
  AF_ASSIGN_OR_RETURN(runtime_, Runtime::Create(std::move(plan), hooks_, runtime_options_, std::move(actors)));
  return Status::Ok();
}

Status CompiledJob::RefreshAfterForkLocked() {
  if (generation_ == Environment::generation()) return Status::Ok();
  // The parent's runtime has no threads here and cannot be drained or destroyed: abandon it.
  (void)runtime_.release();
  in_flight_.store(0);  // the parent's iterations are not delivered in this process
  if (recorder_) (void)recorder_.release();  // its lanes belong to the abandoned runtime
  if (!options_.trace_path.empty()) {
    recorder_ = std::make_unique<ChromeTraceRecorder>();
    runtime_options_.observer = recorder_.get();
  }
  if (shut_down_) return Status::Ok();
  return InstantiateLocked();
}

std::string CompiledJob::inline_refusal() const {
  std::lock_guard<std::mutex> lock(runtime_mu_);
  return runtime_ ? runtime_->inline_refusal() : "the job is shut down";
}

StatusOr<int64_t> CompiledJob::Push(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                                    Completion done, bool may_run_inline) {
  AF_RETURN_IF_ERROR(CheckInputs(inputs));
  if (outputs.size() != output_descs_.size())
    return InvalidArgument("job '" + name() + "' has " + std::to_string(output_descs_.size()) + " outputs, got " +
                           std::to_string(outputs.size()) + " output buffers");
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].desc != output_descs_[i].desc)
      return InvalidArgument("job '" + name() + "', output '" + output_descs_[i].name + "': buffer is " +
                             outputs[i].desc.ToString() + ", expected " + output_descs_[i].desc.ToString());
  {
    std::unique_lock<std::mutex> order(session_->order_mu);
    session_->WaitTurn(order, this, reads_, writes_);
    in_flight_.fetch_add(1);  // from here on conflicting callers wait for this job
  }
  for (const auto& version : written_versions_) version->fetch_add(1, std::memory_order_release);
  std::lock_guard<std::mutex> lock(runtime_mu_);
  Status refreshed = RefreshAfterForkLocked();
  if (!refreshed.ok() || !runtime_) {
    Finished();
    if (!refreshed.ok()) return refreshed.WithContext("job '" + name() + "': rebuilding the runtime after fork()");
    return FailedPrecondition("job '" + name() + "' was shut down (session reset or interpreter exit)");
  }
  uint64_t watch = 0;
  if (distributed_) {
    // After a lost rank or a missed call deadline every call fails at once, with the cause.
    Status healthy = membership_->cluster().health();
    if (!healthy.ok()) {
      Finished();
      const std::string context = "job '" + name() + "'";
      return healthy.message().rfind(context, 0) == 0 ? healthy : healthy.WithContext(context);
    }
    // This rank's feeds only: the job's other inputs are read by the ranks holding their sources.
    local_inputs_.clear();
    for (int feed : local_feeds_) local_inputs_.push_back(inputs[feed]);
    watch = membership_->StartCall(name());
  }
  auto result = runtime_->Push(distributed_ ? local_inputs_ : inputs, outputs,
                               [this, watch, done = std::move(done)](int64_t iteration, const Status& status) {
    if (watch != 0) membership_->EndCall(watch);
    done(iteration, status);
    Finished();
  }, may_run_inline);
  if (!result.ok()) {
    if (watch != 0) membership_->EndCall(watch);
    Finished();
  }
  return result;
}

Status CompiledJob::Run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) {
  CallWait wait;
  AF_RETURN_IF_ERROR(Push(inputs, outputs, wait.completion(), /*may_run_inline=*/true).status());
  return wait.Wait();
}

// Drain and shutdown have no caller to return an error to: a failed write is reported on stderr
// (the path was checked when the job was compiled; this is a disk full or a removed directory).
void CompiledJob::WriteTrace() {
  Status written = static_cast<ChromeTraceRecorder*>(recorder_.get())->Write(options_.trace_path);
  if (!written.ok()) std::fprintf(stderr, "actorflow: the trace was not written: %s\n", written.ToString().c_str());
}

void CompiledJob::Drain() {
  std::lock_guard<std::mutex> lock(runtime_mu_);
  if (!RefreshAfterForkLocked().ok() || !runtime_) return;
  runtime_->Drain();
  if (recorder_ && !options_.trace_path.empty()) WriteTrace();
}

void CompiledJob::Shutdown() {
  std::lock_guard<std::mutex> lock(runtime_mu_);
  shut_down_ = true;
  if (generation_ != Environment::generation()) {
    // In a forked child: nothing of the parent's runtime can be waited for here.
    (void)RefreshAfterForkLocked();
    return;
  }
  if (!runtime_) return;
  runtime_->Drain();
  runtime_.reset();  // ends every actor before the variables and the recorder go
  if (recorder_ && !options_.trace_path.empty()) WriteTrace();
}

// -------------------------------------------------------------------------------------- Session

Session::Session() : state_(std::make_shared<SessionState>()) {}

Session::~Session() { Reset(); }


StatusOr<std::shared_ptr<CompiledJob>> Session::Compile(const graph::JobBuilder& builder, const JobOptions& options,
                                                        SinkCallback on_watch) {
  std::shared_ptr<CompiledJob> job(new CompiledJob());
  graph::StepClock clock(&job->compile_timings_, &job->compile_cpu_timings_);
  auto lap = [&](const std::string& step) { clock.Lap(step); };
  job->session_ = state_;
  // The trace, read in place by the cache's key and a hit; a miss compiles a copy of it.
  const Graph& traced = builder.graph();
  job->options_ = options;
  graph::CompileOptions compile_options;
  compile_options.register_num = options.register_num;
  compile_options.dump_dot_dir = options.dump_dot_dir;
  compile_options.print_sbp_summary = options.print_sbp_summary;
  compile_options.timings = &job->compile_timings_;
  compile_options.cpu_timings = &job->compile_cpu_timings_;
  compile_options.disabled_fusions = options.disabled_fusions;
  if (const char* env = std::getenv("ACTORFLOW_DISABLE_FUSION")) {
    std::string list = env;
    for (size_t start = 0; start <= list.size();) {
      size_t end = list.find(',', start);
      if (end == std::string::npos) end = list.size();
      if (end > start) compile_options.disabled_fusions.push_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  auto environment_set = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != 0 && std::string(value) != "0";
  };
  compile_options.memory_sharing = options.memory_sharing && !environment_set("ACTORFLOW_DISABLE_MEMORY_SHARING");
  compile_options.pipelining = options.pipelining;
  // Dumps and summaries describe a compile: a job asking for them compiles.
  const bool cacheable = options.use_job_cache && options.dump_dot_dir.empty() && !options.print_sbp_summary &&
                         std::getenv("ACTORFLOW_DUMP_DOT") == nullptr && !environment_set("ACTORFLOW_SBP_SUMMARY");
  std::string key;
  bool from_cache = false;
  if (cacheable) {
    key = CanonicalJobKey(builder, options.register_num);
    for (const std::string& fusion : compile_options.disabled_fusions) key += "\nfusion off: " + fusion;
    if (!compile_options.memory_sharing) key += "\nmemory sharing off";
    if (!compile_options.pipelining) key += "\npipelining off";
    lap("job cache key");
    if (std::shared_ptr<const CachedCompile> hit = state_->job_cache.Find(key)) {
      if (std::shared_ptr<const JobNames> names = BindNames(*hit, traced)) {
        if (hit->compiled->machine_num() > 1 || !options.trace_path.empty()) {
          // Every rank checks and splits a multi-machine plan by its task names, and a trace
          // records the plan's names: those jobs run a renamed copy.
          job->graph_ = std::make_shared<const Graph>(RenamedGraph(*hit, *names));
          job->plan_ = RenamedPlan(*hit, *names);
        } else {
          // The runtime runs the entry's plan under this job's names: nothing is copied.
          job->plan_ = hit->plan;
          job->cached_ = std::move(hit);
          job->names_ = std::move(names);
        }
        from_cache = true;
      }
    }
    lap(from_cache ? "job cache hit" : "job cache miss");
  }
  if (!from_cache) {
    graph::Graph working = traced;  // which the passes turn into the compiled graph
    lap("copy graph");
    auto entry = cacheable ? std::make_shared<CachedCompile>() : nullptr;
    if (entry) {
      entry->traced = traced;
      lap("job cache store");
    }
    clock.Restart();
    AF_ASSIGN_OR_RETURN(std::shared_ptr<plan::Plan> compiled_plan, CompileGraphShared(working, compile_options));
    // The job and the cache entry share the compiled graph and plan (immutable from here on).
    job->graph_ = std::make_shared<const Graph>(std::move(working));
    job->plan_ = std::move(compiled_plan);
    if (entry) {
      entry->compiled = job->graph_;
      entry->plan = job->plan_;
      clock.Restart();
      PrepareRebind(*entry);  // part of storing the structure: hits then only rename
      lap("job cache index");
      state_->job_cache.Insert(key, std::move(entry));
    }
  }
  clock.Restart();
  // The compiled graph (for a job from the cache, the entry's, under the entry's names: its
  // structure and descs are this job's) and this job's names for its nodes and tasks.
  const JobNames* names = job->names_.get();
  const Graph& graph = names != nullptr ? *job->cached_->compiled : *job->graph_;
  const std::string& job_name = job->name();
  auto variable_of = [&](size_t i) -> std::string_view {
    return names != nullptr ? names->variable_names[i] : graph.nodes()[i].variable_name;
  };
  auto location_of = [&](size_t i) -> std::string {
    return std::string(names != nullptr ? names->node_locations[i] : graph.nodes()[i].location);
  };
  auto task_variable_of = [&](int t) -> std::string_view {
    return names != nullptr ? names->task_variable_names[t] : job->plan_->tasks(t).variable_name();
  };

  // A job over several machines: this rank's membership, checked before the variables are bound
  // (each rank binds only what its machine's tasks use).
  std::shared_ptr<ClusterMembership> membership;
  if (graph.machine_num() > 1) {
    membership = ClusterMembership::Get();
    if (!membership || membership->world_size() != graph.machine_num())
      return FailedPrecondition(
          "job '" + job_name + "' runs on " + std::to_string(graph.machine_num()) +
          " machines (flow.config.machine_num), but this process is " +
          (membership ? "rank " + std::to_string(membership->rank()) + " of a cluster of " +
                            std::to_string(membership->world_size())
                      : std::string("not part of a cluster")) +
          ": run the program on every machine, e.g. python -m actorflow.launch --nproc " +
          std::to_string(graph.machine_num()) + " program.py");
  }
  const int rank = membership ? membership->rank() : 0;
  // The variable_buffer hook looks each task up by (variable, shard index; -1 for a whole one).
  // Hashed: the runtime start asks once per variable task (a tree of string keys costs a
  // dozen cold nodes per lookup in a job of thousands of variables).
  struct BufferKeyHash {
    size_t operator()(const std::pair<std::string, int64_t>& key) const {
      return std::hash<std::string>{}(key.first) ^ (std::hash<int64_t>{}(key.second) * 0x9e3779b97f4a7c15ull);
    }
  };
  std::unordered_map<std::pair<std::string, int64_t>, void*, BufferKeyHash> buffers;
  std::set<int> devices;  // of every task; counted in the pass over the plan's tasks below
  // (variable task, its version) for the variables the job only reads, by task (ascending): the
  // readers' kernels get the counter (KernelInit::input_versions). Not in jobs over several
  // machines (other ranks' writes are not counted here).
  std::vector<std::pair<int, std::shared_ptr<const std::atomic<int64_t>>>> stable;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (size_t i = 0; i < graph.nodes().size(); ++i) {
      const Node& n = graph.nodes()[i];
      if (n.kind != NodeKind::kVariable) continue;
      auto it = state_->variables.find(variable_of(i));
      if (it == state_->variables.end()) {
        if (!n.zeros_if_missing)
          return FailedPrecondition("job '" + job_name + "': variable '" + std::string(variable_of(i)) +
                                    "' (declared at " + location_of(i) + ") was not created in the session");
        StoredVariable v(n.output_descs[0], AllocateZeros(n.output_descs[0].byte_size()));
        it = state_->variables.emplace(std::string(variable_of(i)), std::move(v)).first;
      }
      const std::string& variable = it->first;
      if (it->second.desc != n.output_descs[0])
        return InvalidArgument("job '" + job_name + "': variable '" + variable + "' is declared as " +
                               n.output_descs[0].ToString() + " at " + location_of(i) + " but the session holds " +
                               it->second.desc.ToString());
      if (membership) {
        AF_ASSIGN_OR_RETURN(VariableLayout layout, LayoutInPlan(*job->plan_, n.variable_name, n.output_descs[0]));
        AF_RETURN_IF_ERROR(HoldAs(variable, it->second, layout, rank, job_name));
      }
      if (it->second.parts) {
        if (!membership)
          return FailedPrecondition("job '" + job_name + "' runs on one machine, but " +
                                    it->second.NotWholeHere(variable, CurrentRank()) +
                                    " for a job over several machines");
        for (const auto& [index, buffer] : it->second.parts->local) {
          job->variables_.push_back(buffer);
          buffers[{n.variable_name, index}] = buffer.get();
        }
        continue;
      }
      job->variables_.push_back(it->second.data);
      buffers[{n.variable_name, -1}] = it->second.data.get();
    }
    // Variables the compiler placed on a GPU read and write a device buffer instead. A variable
    // lives on one side for all jobs: moving it between host and GPU per call is not supported.
    // The one pass over the plan's tasks here also counts their devices and which variables
    // the job reads and writes (each pass over thousands of cold tasks costs a miss per task).
    int last_device = -1;
    for (int t = 0; t < job->plan_->tasks_size(); ++t) {
      const plan::Task& task = job->plan_->tasks(t);
      if (task.device_id() != last_device) devices.insert(last_device = task.device_id());
      if (task.kind() != plan::VARIABLE) continue;
      (task.read_only() ? job->reads_ : job->writes_).emplace(task_variable_of(t));
      if (task.registers_size() == 0 || task.machine_id() != rank) continue;
      auto found = state_->variables.find(task_variable_of(t));
      AF_CHECK(found != state_->variables.end()) << "variable task " << t << " of a variable the job did not bind";
      const std::string& variable = found->first;
      StoredVariable& stored = found->second;
      if (stored.parts) {
        if (task.registers(0).memory_case().kind() == plan::MEMORY_DEVICE)
          return FailedPrecondition("job '" + job_name + "': variable '" + variable +
                                    "' is held in parts across machines and placed on a GPU; parts live on the "
                                    "host for now");
        continue;
      }
      const plan::MemoryCase& where = task.registers(0).memory_case();
      const std::string what = "job '" + job_name + "': variable '" + variable + "'";
      if (stored.version != nullptr) {
        if (!task.read_only()) job->written_versions_.push_back(stored.version);
        else if (!membership) stable.emplace_back(t, stored.version);
      }
      if (where.kind() != plan::MEMORY_DEVICE) {
        if (stored.device != nullptr)
          return FailedPrecondition(what + " lives on " + stored.device->memory_case.ToString() +
                                    " for another job, and this job reads it on the CPU; place both jobs' readers "
                                    "on the same device");
        stored.bound_on_host = true;
        continue;
      }
      const MemoryCase memory_case{MemoryKind::kDevice, where.device_id()};
      if (stored.device == nullptr) {
        if (stored.bound_on_host)
          return FailedPrecondition(what + " is read on the CPU by another job, and this job places it on " +
                                    memory_case.ToString() + "; place both jobs' readers on the same device");
        auto device = std::make_shared<DeviceVariable>();
        device->memory_case = memory_case;
        AF_ASSIGN_OR_RETURN(device->allocator, AllocatorRegistry::Global().Find(memory_case));
        auto block = device->allocator->Allocate(memory_case, stored.desc.byte_size(), 256);
        if (!block.ok()) return block.status().WithContext(what);
        device->data = block.value();
        stored.device = device;
        AF_RETURN_IF_ERROR(stored.CopyToDevice().WithContext(what));
      } else if (stored.device->memory_case != memory_case) {
        return FailedPrecondition(what + " lives on " + stored.device->memory_case.ToString() + " for another job, and "
                                  "this job places it on " + memory_case.ToString());
      }
      job->variables_.push_back(std::shared_ptr<void>(stored.device, stored.device->data));
      buffers[{task.variable_name(), -1}] = stored.device->data;
    }
  }
  // A variable some task of the job writes is not stable for its readers.
  std::vector<std::shared_ptr<std::atomic<int64_t>>>& written = job->written_versions_;
  std::sort(written.begin(), written.end());
  written.erase(std::unique(written.begin(), written.end()), written.end());
  std::erase_if(stable, [&](const auto& entry) {
    return std::binary_search(written.begin(), written.end(), entry.second);
  });
  for (size_t k = 0; k < graph.feeds().size(); ++k) {
    const std::string& feed = graph.feeds()[k];
    TensorDesc desc = graph.Desc(feed + "/out").value();
    // A placeholder fed per machine: each rank feeds its own machine's rows (graph::FedPerMachine).
    const graph::Node* node = graph.FindNode(feed);
    if (node != nullptr && graph::FedPerMachine(graph, *node)) desc.shape[0] /= graph.machine_num();
    job->input_descs_.push_back({names != nullptr ? names->feeds[k] : feed, std::move(desc)});
  }
  for (size_t k = 0; k < graph.outputs().size(); ++k) {
    const std::string& ref = graph.outputs()[k];
    TensorDesc desc = graph.Desc(ref).value();
    if (graph::OutputPerMachine(graph, ref)) desc.shape[0] /= graph.machine_num();  // this machine's rows
    job->output_descs_.push_back({names != nullptr ? names->outputs[k] : ref, std::move(desc)});
  }

  const plan::Plan* plan = job->plan_.get();
  // One thread budget (ARCHITECTURE.md): workers x kernel threads stays within num_threads,
  // resolved as the runtime resolves it, so each kernel gets the share the runtime assumes.
  const int budget = options.num_threads > 0 ? options.num_threads : std::max(1u, std::thread::hardware_concurrency());
  // Default for compiled jobs: one actor worker and the whole budget inside each kernel. A
  // training step is mostly a chain of large kernels, so intra-op threads use the cores
  // better than running actors side by side, and one worker saves a thread wake-up per hop
  // (measured on 2 cores: MLP train step 1.5 ms vs 2.1-2.5 ms with 2 workers x 1 thread).
  // With n devices, each device is a share of the budget where the budget allows two threads
  // per device (DefaultWorkerCount): that many workers run the devices' tasks side by side and
  // each kernel gets budget / workers intra-op threads; on fewer cores one worker runs every
  // device's tasks, each kernel on the whole budget. The process uses num_threads in all.
  const int device_count = static_cast<int>(devices.size());
  const int workers = options.num_workers > 0 ? options.num_workers : DefaultWorkerCount(budget, device_count);
  const int kernel_threads = options.kernel_threads > 0 ? options.kernel_threads : std::max(1, budget / workers);
  if (membership) {
    auto checked = membership->CheckAndExtract(*job->plan_);
    if (!checked.ok()) return checked.status().WithContext("job '" + job_name + "'");
    graph::MachinePlan local = std::move(checked).value();
    job->distributed_ = true;
    job->membership_ = membership;
    job->local_plan_ = std::move(local.plan);
    job->local_feeds_ = std::move(local.feeds);
    lap("plan check with every rank");
  }
  RuntimeHooks& hooks = job->hooks_;
  hooks.make_kernel = [plan, kernel_threads, membership,
                       stable = std::move(stable)](const plan::Task& task) -> StatusOr<KernelFn> {
    if (membership && DataPlane::Handles(task.op_type()))
      return membership->data_plane().MakeKernel(plan->job_name(), task);
    KernelInit init;
    init.inputs.reserve(task.inputs_size());
    for (const plan::InputDesc& in : task.inputs()) {
      if (in.control()) continue;
      const int producer_id = static_cast<int>(in.producer_task_id());
      const plan::Task& producer = plan->tasks(producer_id);
      TensorDesc desc = DescOfBlob(producer.registers(in.producer_register()).blobs(in.blob_index()));
      if (in.has_view()) desc.shape.assign(in.view_shape().begin(), in.view_shape().end());
      if (producer.kind() == plan::VARIABLE) {
        auto found = std::lower_bound(stable.begin(), stable.end(), producer_id,
                                      [](const auto& entry, int id) { return entry.first < id; });
        if (found != stable.end() && found->first == producer_id) init.SetInputVersion(init.inputs.size(), found->second);
      }
      init.inputs.push_back(std::move(desc));
    }
    for (const plan::RegisterDesc& r : task.registers())
      for (const plan::BlobDesc& b : r.blobs()) init.outputs.push_back(DescOfBlob(b));
    init.attrs = graph::AttrsFromProto(task.attrs());
    init.num_threads = kernel_threads;
    if (task.device_type() != "gpu") return MakeCpuKernel(task.op_type(), init);
    // A GPU task (graph/device_placement.h): its CUDA kernel on the device's compute stream,
    // or its copy stream for the compiler's copies.
    init.device_type = kCudaDevice;
    init.device_id = task.device_id();
    AF_ASSIGN_OR_RETURN(auto backend, DeviceRegistry::Global().Find(kCudaDevice));
    const bool copy = task.op_type() == graph::kCopyHostToDevice || task.op_type() == graph::kCopyDeviceToHost;
    AF_ASSIGN_OR_RETURN(init.device_stream,
                        copy ? backend->CopyStream(task.device_id()) : backend->ComputeStream(task.device_id()));
    init.stream = init.device_stream->native_handle();
    return MakeKernel(task.op_type(), init);
  };
  hooks.variable_buffer = [buffers = std::move(buffers)](const plan::Task& task) -> StatusOr<void*> {
    auto shard = task.attrs().find("shard_index");
    auto it = buffers.find({task.variable_name(), shard == task.attrs().end() ? -1 : shard->second.i()});
    if (it == buffers.end()) return NotFound("no buffer for variable '" + task.variable_name() + "'");
    return it->second;
  };
  // A job from the cache: the plan's sinks carry the entry's handler names; the callback gets this job's.
  hooks.sink_handler = [on_watch, names = job->names_](const std::string& name, int64_t iteration,
                                                       const std::vector<TensorView>& views) {
    if (!on_watch) return Status::Ok();
    if (names != nullptr) {
      auto it = names->handlers.find(name);
      if (it != names->handlers.end()) {
        on_watch(it->second, iteration, views);
        return Status::Ok();
      }
    }
    on_watch(name, iteration, views);
    return Status::Ok();
  };
  RuntimeOptions& runtime_options = job->runtime_options_;
  runtime_options.num_threads = budget;
  // The table's views live in the job's names: the runtime holds them through it.
  runtime_options.names = names != nullptr ? std::shared_ptr<const PlanNames>(job->names_, &names->tasks) : nullptr;
  runtime_options.num_workers = workers;
  runtime_options.kernel_threads = kernel_threads;
  // Devices lend their share to one computing while they wait on it (a gradient's matmul on
  // the update's device while the others idle), so n devices lose no cores to idle shares.
  runtime_options.lend_idle_threads = device_count > 1 && options.kernel_threads <= 0;
  // The inline copy has its own kernels: an op whose kernel keeps state (a random stream)
  // would draw one stream per copy, so such plans stay on the actors.
  runtime_options.run_inline = options.run_inline && !environment_set("ACTORFLOW_DISABLE_RUN_INLINE") &&
                               !job->distributed_ && device_count == 1;
  // A plan writing variables never runs inline (InlineRun::Ineligible refuses it, saying so):
  // its ops need no look-up, one per task.
  if (runtime_options.run_inline && job->writes_.empty())
    for (const plan::Task& task : plan->tasks()) {
      if (task.kind() != plan::COMPUTE) continue;
      auto def = OpRegistry::Global().Find(task.op_type());
      if (!def.ok() || def.value()->stateful_kernel || task.device_type() == "gpu") {
        runtime_options.run_inline = false;
        break;
      }
    }
  if (!options.trace_path.empty()) {
    AF_RETURN_IF_ERROR(ChromeTraceRecorder::CheckWritable(options.trace_path));
    job->recorder_ = std::make_unique<ChromeTraceRecorder>();
    runtime_options.observer = job->recorder_.get();
  }
  lap("bind variables");
  {
    std::lock_guard<std::mutex> lock(job->runtime_mu_);
    AF_RETURN_IF_ERROR(job->InstantiateLocked());
  }
  lap("runtime start");
  if (environment_set("ACTORFLOW_COMPILE_TIMINGS")) {
    std::string report = "compile of job '" + job_name + "' (" + std::to_string(job->plan_->tasks_size()) +
                         " tasks), ms wall / cpu:";
    for (size_t i = 0; i < job->compile_timings_.size(); ++i) {
      char step[160];
      std::snprintf(step, sizeof(step), "\n  %-24s %9.2f %9.2f", job->compile_timings_[i].first.c_str(),
                    1e3 * job->compile_timings_[i].second, 1e3 * job->compile_cpu_timings_[i].second);
      report += step;
    }
    std::fprintf(stderr, "%s\n", report.c_str());
  }
  {
    std::lock_guard<std::mutex> lock(state_->order_mu);
    state_->ordered_jobs.insert(job.get());
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->jobs.push_back(job);
  return job;
}

void Session::WaitAll() {
  for (auto& job : state_->LiveJobs()) job->Drain();
}

size_t Session::job_cache_size() const { return state_->job_cache.size(); }

void Session::Reset() {
  state_->job_cache.Clear();
  for (auto& job : state_->LiveJobs()) job->Shutdown();
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->jobs.clear();
  state_->variables.clear();  // buffers live on while a (shut down) job still holds them
}

}  // namespace actorflow

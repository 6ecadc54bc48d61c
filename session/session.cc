#include "session/session.h"

#include "session/cluster_membership.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "actors/environment.h"
#include "actors/device.h"
#include "actors/trace_recorder.h"
#include "graph/attr_convert.h"
#include "graph/device_placement.h"
#include "graph/step_clock.h"
#include "actors/proto/plan.pb.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace actorflow {

using graph::Graph;
using graph::Node;
using graph::NodeKind;

namespace {
constexpr size_t kVariableAlignment = 64;

std::shared_ptr<void> AllocateZeros(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + kVariableAlignment - 1) / kVariableAlignment * kVariableAlignment;
  void* p = std::aligned_alloc(kVariableAlignment, rounded);
  if (p == nullptr) return nullptr;
  std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

TensorDesc DescOfBlob(const plan::BlobDesc& blob) {
  return TensorDesc{Shape(blob.shape().begin(), blob.shape().end()), FromProtoDType(blob.dtype())};
}

bool Intersects(const std::set<std::string>& a, const std::set<std::string>& b) {
  for (const std::string& name : a)
    if (b.count(name)) return true;
  return false;
}
}  // namespace

// A variable the compiler placed on a GPU (graph/device_placement.h): its buffer there, made
// when a job first binds the variable on that device and filled from the host value. Jobs read
// and update it in place; GetVariable refreshes the host value from it and SetVariable writes
// through to it, so the host buffer is current whenever the session hands it out.
struct DeviceVariable {
  MemoryCase memory_case;
  std::shared_ptr<RegisterAllocator> allocator;
  void* data = nullptr;
  ~DeviceVariable() {
    if (data != nullptr) allocator->Free(memory_case, data);
  }
};

// `data` counts the store and the compiled jobs holding the variable (DeleteVariable relies on
// it); for a variable over outside memory it is an aliasing handle whose own count excludes
// the outside owners, and `external` is that memory.
struct StoredVariable {
  TensorDesc desc;
  std::shared_ptr<void> data;
  std::shared_ptr<void> external;
  std::shared_ptr<DeviceVariable> device;  // set once a job binds it on a GPU
  bool bound_on_host = false;              // a job reads the host buffer itself
  Status CopyFromDevice() {
    if (device == nullptr) return Status::Ok();
    return CopyBytes(data.get(), HostPlace(), device->data, MemoryPlace(device->memory_case, device->allocator.get()),
                     desc.byte_size());
  }
  Status CopyToDevice() {
    if (device == nullptr) return Status::Ok();
    return CopyBytes(device->data, MemoryPlace(device->memory_case, device->allocator.get()), data.get(), HostPlace(),
                     desc.byte_size());
  }
};

class SessionState {
 public:
  std::shared_ptr<Environment> environment = Environment::Global();
  mutable std::mutex mu;  // guards variables and jobs
  std::map<std::string, StoredVariable> variables;
  std::vector<std::weak_ptr<CompiledJob>> jobs;
  JobCache job_cache;  // synchronized itself

  // Ordering of calls between jobs (see session.h). A caller takes a ticket and waits until
  // no conflicting job has iterations in flight, no variable it touches is being copied, and
  // no conflicting caller with an older ticket waits (arrival order, so no starvation).
  std::mutex order_mu;
  std::condition_variable order_cv;
  uint64_t next_ticket = 0;
  struct Waiter {
    const CompiledJob* job;                      // null: a variable copy
    const std::set<std::string>* reads;
    const std::set<std::string>* writes;
  };
  std::map<uint64_t, Waiter> waiters;          // by ticket
  std::set<const CompiledJob*> ordered_jobs;   // live jobs, under order_mu
  std::map<std::string, int> copying;          // variables being copied in or out

  std::vector<std::shared_ptr<CompiledJob>> LiveJobs() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::shared_ptr<CompiledJob>> live;
    std::vector<std::weak_ptr<CompiledJob>> kept;
    for (auto& weak : jobs)
      if (auto job = weak.lock()) {
        live.push_back(job);
        kept.push_back(weak);
      }
    jobs = std::move(kept);
    return live;
  }

  static bool Conflict(const std::set<std::string>& reads_a, const std::set<std::string>& writes_a,
                       const std::set<std::string>& reads_b, const std::set<std::string>& writes_b) {
    return Intersects(writes_a, writes_b) || Intersects(writes_a, reads_b) || Intersects(reads_a, writes_b);
  }

  // order_mu held. Whether the caller holding `ticket` (job `self`, or a copy when null) may start.
  bool MayStart(uint64_t ticket, const CompiledJob* self, const std::set<std::string>& reads,
                const std::set<std::string>& writes) {
    for (const CompiledJob* other : ordered_jobs)
      if (other != self && other->in_flight() > 0 && Conflict(reads, writes, other->reads(), other->writes()))
        return false;
    for (const auto& [name, count] : copying)
      if (count > 0 && (writes.count(name) || (self != nullptr && reads.count(name)))) return false;
    for (const auto& [older, waiter] : waiters) {
      if (older >= ticket) break;
      if (waiter.job != self && Conflict(reads, writes, *waiter.reads, *waiter.writes)) return false;
    }
    return true;
  }

  // Waits for the turn of a caller touching reads/writes; returns with order_mu held.
  void WaitTurn(std::unique_lock<std::mutex>& lock, const CompiledJob* self, const std::set<std::string>& reads,
                const std::set<std::string>& writes) {
    const uint64_t ticket = next_ticket++;
    if (MayStart(ticket, self, reads, writes)) return;
    waiters.emplace(ticket, Waiter{self, &reads, &writes});
    order_cv.wait(lock, [&] { return MayStart(ticket, self, reads, writes); });
    waiters.erase(ticket);
    order_cv.notify_all();  // callers behind this one may be free now
  }

  // Copies variable `name` in or out once no job conflicting with the copy has iterations in
  // flight; jobs touching it wait for the copy.
  template <typename Fn>
  Status WithVariable(const std::string& name, bool writing, Fn&& copy) {
    std::set<std::string> none, names{name};
    {
      std::unique_lock<std::mutex> lock(order_mu);
      WaitTurn(lock, nullptr, writing ? none : names, writing ? names : none);
      ++copying[name];
    }
    Status status;
    {
      std::lock_guard<std::mutex> lock(mu);
      status = copy();
    }
    std::lock_guard<std::mutex> lock(order_mu);
    if (--copying[name] == 0) copying.erase(name);
    order_cv.notify_all();
    return status;
  }
};

// ---------------------------------------------------------------------------------- CompiledJob

CompiledJob::~CompiledJob() {
  Shutdown();
  std::lock_guard<std::mutex> lock(session_->order_mu);
  session_->ordered_jobs.erase(this);
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
  std::lock_guard<std::mutex> lock(runtime_mu_);
  Status refreshed = RefreshAfterForkLocked();
  if (!refreshed.ok() || !runtime_) {
    Finished();
    if (!refreshed.ok()) return refreshed.WithContext("job '" + name() + "': rebuilding the runtime after fork()");
    return FailedPrecondition("job '" + name() + "' was shut down (session reset or interpreter exit)");
  }
  if (distributed_) {
    // This rank's feeds only: the job's other inputs are read by the ranks holding their sources.
    local_inputs_.clear();
    for (int feed : local_feeds_) local_inputs_.push_back(inputs[feed]);
  }
  auto result = runtime_->Push(distributed_ ? local_inputs_ : inputs, outputs,
                               [this, done = std::move(done)](int64_t iteration, const Status& status) {
    done(iteration, status);
    Finished();
  }, may_run_inline);
  if (!result.ok()) Finished();
  return result;
}

Status CompiledJob::Run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) {
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::atomic<bool> finished_flag{false};
  Status result;
  AF_RETURN_IF_ERROR(Push(inputs, outputs, [&](int64_t, const Status& status) {
                       std::lock_guard<std::mutex> lock(mu);
                       result = status;
                       finished = true;
                       finished_flag.store(true, std::memory_order_release);
                       cv.notify_all();
                     }, /*may_run_inline=*/true).status());
  // A short call comes back in tens of microseconds; blocking at once would add a thread
  // wake-up on each side. Poll briefly (yielding the core to the actors), then block.
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
  while (!finished_flag.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < spin_until)
    std::this_thread::yield();
  std::unique_lock<std::mutex> lock(mu);  // also waits until the callback has left its lock
  cv.wait(lock, [&] { return finished; });
  return result;
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

bool Session::HasVariable(const std::string& name) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->variables.count(name) > 0;
}

Status Session::CreateVariable(const std::string& name, const TensorDesc& desc, const void* initial) {
  if (name.empty()) return InvalidArgument("variable name is empty");
  for (int64_t d : desc.shape)
    if (d <= 0) return InvalidArgument("variable '" + name + "': shape " + ShapeToString(desc.shape) + " has a dimension <= 0");
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->variables.find(name);
  if (it != state_->variables.end())
    return InvalidArgument("variable '" + name + "' already exists as " + it->second.desc.ToString());
  StoredVariable v{desc, AllocateZeros(desc.byte_size()), nullptr};
  if (!v.data) return Internal("out of memory for variable '" + name + "'");
  if (initial != nullptr) std::memcpy(v.data.get(), initial, desc.byte_size());
  state_->variables.emplace(name, std::move(v));
  return Status::Ok();
}

StatusOr<std::string> Session::CreateVariableOver(const std::string& name, const TensorDesc& desc,
                                                  std::shared_ptr<void> storage) {
  if (name.empty()) return InvalidArgument("variable name is empty");
  AF_RETURN_IF_ERROR(ValidateTensorDesc(desc, "variable '" + name + "'"));
  for (int64_t d : desc.shape)
    if (d <= 0) return InvalidArgument("variable '" + name + "': shape " + ShapeToString(desc.shape) + " has a dimension <= 0");
  if (!storage) return InvalidArgument("variable '" + name + "': no storage");
  if (reinterpret_cast<uintptr_t>(storage.get()) % kVariableAlignment != 0)
    return InvalidArgument("variable '" + name + "': the storage is not " + std::to_string(kVariableAlignment) +
                           "-byte aligned");
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const auto& [existing, v] : state_->variables)
    if (v.external == storage && v.desc == desc) return existing;
  auto it = state_->variables.find(name);
  if (it != state_->variables.end())
    return InvalidArgument("variable '" + name + "' already exists as " + it->second.desc.ToString() +
                           (it->second.external ? " over other memory" : ""));
  // The handle owns a reference to the storage; jobs copy the handle, outside owners do not.
  auto holder = std::make_shared<std::shared_ptr<void>>(storage);
  std::shared_ptr<void> handle(holder, storage.get());
  state_->variables.emplace(name, StoredVariable{desc, std::move(handle), std::move(storage)});
  return name;
}

Status Session::DeleteVariable(const std::string& name) {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->variables.find(name);
  if (it == state_->variables.end()) return NotFound("no variable named '" + name + "'");
  // Compiled jobs keep the buffers they use alive; the store being the only owner means no job
  // reads or writes this variable.
  if (it->second.data.use_count() > 1)
    return FailedPrecondition("variable '" + name + "' is used by a compiled job and cannot be deleted");
  state_->variables.erase(it);
  return Status::Ok();
}

StatusOr<TensorDesc> Session::VariableDesc(const std::string& name) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->variables.find(name);
  if (it == state_->variables.end()) return NotFound("no variable named '" + name + "'");
  return it->second.desc;
}

Status Session::GetVariable(const std::string& name, void* out, size_t bytes) {
  return state_->WithVariable(name, /*writing=*/false, [&]() -> Status {
    auto it = state_->variables.find(name);
    if (it == state_->variables.end()) return NotFound("no variable named '" + name + "'");
    if (bytes != it->second.desc.byte_size()) return InvalidArgument("variable '" + name + "': wrong buffer size");
    AF_RETURN_IF_ERROR(it->second.CopyFromDevice().WithContext("variable '" + name + "'"));
    std::memcpy(out, it->second.data.get(), bytes);
    return Status::Ok();
  });
}

Status Session::SetVariable(const std::string& name, const TensorDesc& desc, const void* data) {
  return state_->WithVariable(name, /*writing=*/true, [&]() -> Status {
    auto it = state_->variables.find(name);
    if (it == state_->variables.end()) return NotFound("no variable named '" + name + "'");
    if (desc != it->second.desc)
      return InvalidArgument("variable '" + name + "' is " + it->second.desc.ToString() + ", got " + desc.ToString());
    std::memcpy(it->second.data.get(), data, desc.byte_size());
    return it->second.CopyToDevice().WithContext("variable '" + name + "'");
  });
}

std::vector<std::string> Session::VariableNames() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  std::vector<std::string> names;
  for (const auto& [name, v] : state_->variables) names.push_back(name);
  return names;
}

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
    key = CanonicalJobKey(traced, options.register_num);
    for (const std::string& fusion : compile_options.disabled_fusions) key += "\nfusion off: " + fusion;
    if (!compile_options.memory_sharing) key += "\nmemory sharing off";
    if (!compile_options.pipelining) key += "\npipelining off";
    lap("job cache key");
    if (std::shared_ptr<const CachedCompile> hit = state_->job_cache.Find(key)) {
      if (auto rebound = RebindCompiled(*hit, traced)) {
        job->graph_ = std::make_shared<const Graph>(std::move(rebound->first));
        job->plan_ = std::move(rebound->second);
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
    AF_ASSIGN_OR_RETURN(plan::Plan compiled_plan, CompileGraph(working, compile_options));
    // The job and the cache entry share the compiled graph and plan (immutable from here on).
    job->graph_ = std::make_shared<const Graph>(std::move(working));
    job->plan_ = std::make_shared<const plan::Plan>(std::move(compiled_plan));
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
  const Graph& graph = *job->graph_;

  std::unordered_map<std::string, void*> buffers;  // the variable_buffer hook looks each task up
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (const Node& n : graph.nodes()) {
      if (n.kind != NodeKind::kVariable) continue;
      auto it = state_->variables.find(n.variable_name);
      if (it == state_->variables.end()) {
        if (!n.zeros_if_missing)
          return FailedPrecondition("job '" + graph.job_name() + "': variable '" + n.variable_name + "' (declared at " +
                                    n.location + ") was not created in the session");
        StoredVariable v{n.output_descs[0], AllocateZeros(n.output_descs[0].byte_size()), nullptr};
        it = state_->variables.emplace(n.variable_name, std::move(v)).first;
      }
      if (it->second.desc != n.output_descs[0])
        return InvalidArgument("job '" + graph.job_name() + "': variable '" + n.variable_name + "' is declared as " +
                               n.output_descs[0].ToString() + " at " + n.location + " but the session holds " +
                               it->second.desc.ToString());
      job->variables_.push_back(it->second.data);
      buffers[n.variable_name] = it->second.data.get();
    }
    // Variables the compiler placed on a GPU read and write a device buffer instead. A variable
    // lives on one side for all jobs: moving it between host and GPU per call is not supported.
    for (const plan::Task& task : job->plan_->tasks()) {
      if (task.kind() != plan::VARIABLE || task.registers_size() == 0) continue;
      StoredVariable& stored = state_->variables.at(task.variable_name());
      const plan::MemoryCase& where = task.registers(0).memory_case();
      const std::string what = "job '" + graph.job_name() + "': variable '" + task.variable_name() + "'";
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
      buffers[task.variable_name()] = stored.device->data;
    }
  }
  for (const std::string& feed : graph.feeds()) job->input_descs_.push_back({feed, graph.Desc(feed + "/out").value()});
  for (const std::string& ref : graph.outputs()) job->output_descs_.push_back({ref, graph.Desc(ref).value()});

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
  std::set<int> devices;
  for (const plan::Task& task : job->plan_->tasks()) devices.insert(task.device_id());
  const int device_count = static_cast<int>(devices.size());
  const int workers = options.num_workers > 0 ? options.num_workers : DefaultWorkerCount(budget, device_count);
  const int kernel_threads = options.kernel_threads > 0 ? options.kernel_threads : std::max(1, budget / workers);
  for (const plan::Task& task : job->plan_->tasks()) {
    if (task.kind() != plan::VARIABLE) continue;
    (task.read_only() ? job->reads_ : job->writes_).insert(task.variable_name());
  }
  std::shared_ptr<ClusterMembership> membership;
  if (graph.machine_num() > 1) {
    membership = ClusterMembership::Get();
    if (!membership || membership->world_size() != graph.machine_num())
      return FailedPrecondition(
          "job '" + graph.job_name() + "' runs on " + std::to_string(graph.machine_num()) +
          " machines (flow.config.machine_num), but this process is " +
          (membership ? "rank " + std::to_string(membership->rank()) + " of a cluster of " +
                            std::to_string(membership->world_size())
                      : std::string("not part of a cluster")) +
          ": run the program on every machine, e.g. python -m actorflow.launch --nproc " +
          std::to_string(graph.machine_num()) + " program.py");
    // Machine 0's variables have a copy on every machine (graph::ReplicateVariablesAcrossMachines);
    // one placed only elsewhere would be trained where rank 0 (checkpoints) cannot see it.
    std::set<std::string> on_machine_zero;
    for (const plan::Task& task : job->plan_->tasks())
      if (task.kind() == plan::VARIABLE && task.machine_id() == 0) on_machine_zero.insert(task.variable_name());
    for (const plan::Task& task : job->plan_->tasks())
      if (task.kind() == plan::VARIABLE && !on_machine_zero.count(task.variable_name()))
        return FailedPrecondition("job '" + graph.job_name() + "': variable '" + task.variable_name() +
                                  "' is placed on machine " + std::to_string(task.machine_id()) +
                                  (task.source_location().empty() ? "" : " at " + task.source_location()) +
                                  ": the variables of a multi-machine job start on machine 0 for now (every "
                                  "machine holds a copy; rank 0 writes the checkpoints); place them there");
    std::vector<std::pair<std::string, std::string>> ops;
    for (const plan::Task& task : job->plan_->tasks()) {
      // Deterministic: map fields (attrs) are otherwise serialized in an order that differs
      // between processes.
      std::string bytes;
      {
        google::protobuf::io::StringOutputStream stream(&bytes);
        google::protobuf::io::CodedOutputStream coded(&stream);
        coded.SetSerializationDeterministic(true);
        task.SerializeToCodedStream(&coded);
      }
      ops.emplace_back(task.name(), std::move(bytes));
    }
    AF_RETURN_IF_ERROR(membership->cluster()
                           .CheckPlan(PlanIdentity::FromOps(ops), membership->options().rendezvous_timeout)
                           .WithContext("job '" + graph.job_name() + "'"));
    AF_ASSIGN_OR_RETURN(graph::MachinePlan local, graph::ExtractMachinePlan(*job->plan_, membership->rank()));
    job->distributed_ = true;
    job->local_plan_ = std::move(local.plan);
    job->local_feeds_ = std::move(local.feeds);
    lap("plan check with every rank");
  }
  RuntimeHooks& hooks = job->hooks_;
  hooks.make_kernel = [plan, kernel_threads, membership](const plan::Task& task) -> StatusOr<KernelFn> {
    if (membership && DataPlane::Handles(task.op_type()))
      return membership->data_plane().MakeKernel(plan->job_name(), task);
    KernelInit init;
    for (const plan::InputDesc& in : task.inputs()) {
      if (in.control()) continue;
      const plan::Task& producer = plan->tasks(static_cast<int>(in.producer_task_id()));
      TensorDesc desc = DescOfBlob(producer.registers(in.producer_register()).blobs(in.blob_index()));
      if (in.has_view()) desc.shape.assign(in.view_shape().begin(), in.view_shape().end());
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
    auto it = buffers.find(task.variable_name());
    if (it == buffers.end()) return NotFound("no buffer for variable '" + task.variable_name() + "'");
    return it->second;
  };
  hooks.sink_handler = [on_watch](const std::string& name, int64_t iteration, const std::vector<TensorView>& views) {
    if (on_watch) on_watch(name, iteration, views);
    return Status::Ok();
  };
  RuntimeOptions& runtime_options = job->runtime_options_;
  runtime_options.num_threads = budget;
  runtime_options.num_workers = workers;
  runtime_options.kernel_threads = kernel_threads;
  // Devices lend their share to one computing while they wait on it (a gradient's matmul on
  // the update's device while the others idle), so n devices lose no cores to idle shares.
  runtime_options.lend_idle_threads = device_count > 1 && options.kernel_threads <= 0;
  // The inline copy has its own kernels: an op whose kernel keeps state (a random stream)
  // would draw one stream per copy, so such plans stay on the actors.
  runtime_options.run_inline = options.run_inline && !environment_set("ACTORFLOW_DISABLE_RUN_INLINE") &&
                               !job->distributed_ && device_count == 1;
  for (const plan::Task& task : plan->tasks()) {
    if (!runtime_options.run_inline || task.kind() != plan::COMPUTE) continue;
    auto def = OpRegistry::Global().Find(task.op_type());
    if (!def.ok() || def.value()->stateful_kernel || task.device_type() == "gpu") runtime_options.run_inline = false;
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
    std::string report = "compile of job '" + graph.job_name() + "' (" + std::to_string(job->plan_->tasks_size()) +
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

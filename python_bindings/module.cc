// actorflow._C: the pybind11 module. The contract is python_bindings/C_API.md.
//
// GIL discipline: every call into the runtime (push, run, drain, variable copies, compile's
// runtime start) releases the GIL. Actor threads never take it: completions and watch data go
// to the job's Dispatcher, whose thread calls Python in order. At interpreter exit an atexit
// hook (registered at import) drains every job and stops every dispatcher while Python is
// still alive, so nothing touches the interpreter during finalization.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <thread>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "actors/call_wait.h"
#include "graph/device_placement.h"
#include "graph/memory_plan.h"
#include "kernels/parallel_chunks.h"
#include "session/eager.h"
#include "session/model_export.h"
#include "session/cluster_membership.h"
#include "session/session.h"
#include "python_bindings/conversions.h"
#include "python_bindings/trace_reader.h"
#include "python_bindings/dispatcher.h"

namespace actorflow {
namespace python {

void BindEager(pybind11::module_& m);  // eager_bindings.cc

namespace {

namespace py = pybind11;

// Asynchronous calls allowed between push() and their callback; push() blocks beyond that,
// which bounds memory however fast the caller pushes.
constexpr int64_t kMaxPendingCalls = 64;

// How often a caller blocked in run() or push() checks for signals (Ctrl-C), so that
// KeyboardInterrupt reaches the user within this time.
constexpr std::chrono::milliseconds kSignalCheckInterval{50};

// A run() call's wait for its iteration, shared with the completion.
struct RunWait {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> finished{false};
  bool abandoned = false;          // the caller left on a signal; under mu
  Status status;
  std::vector<py::array> keep;     // the abandoned call's arrays, released by the dispatcher
};

class PyJob;
std::mutex g_jobs_mu;
std::set<PyJob*> g_jobs;  // live jobs, for the exit hook

py::list DescList(const std::vector<NamedDesc>& descs) {
  py::list out;
  for (const auto& d : descs) out.append(py::make_tuple(d.name, ShapeToList(d.desc.shape), DTypeName(d.desc.dtype)));
  return out;
}

// One push() in flight: the Python objects it needs until its callback ran. Owned by the
// caller until the runtime accepted it, then by the completion, then by the dispatcher.
struct PendingCall {
  py::object callback;
  std::vector<py::array> inputs;   // kept alive while the runtime may read them
  std::vector<py::array> outputs;  // filled by the main sink
  Status status;
};

class PyJob {
 public:
  explicit PyJob(const void* owner)
      : owner_(owner), dispatcher_(std::make_shared<Dispatcher>()), generation_(Environment::generation()) {
    std::lock_guard<std::mutex> lock(g_jobs_mu);
    g_jobs.insert(this);
  }
  ~PyJob() {
    {
      std::lock_guard<std::mutex> lock(g_jobs_mu);
      g_jobs.erase(this);
    }
    Shutdown();
  }

  // The watch callback given to the session at compile: copies the views (valid only during
  // the call) and hands them to the dispatcher. Runs on an actor thread; no GIL.
  // `handlers` belongs to the PyJob, which outlives the runtime (Shutdown destroys it first).
  static SinkCallback WatchForwarder(std::shared_ptr<Dispatcher> dispatcher, py::dict* handlers) {
    return [dispatcher, handlers](const std::string& name, int64_t, const std::vector<TensorView>& views) {
      if (views.empty()) return;
      TensorDesc desc = views[0].desc;
      auto buffer = std::make_shared<std::vector<char>>(desc.byte_size());
      std::memcpy(buffer->data(), views[0].data, desc.byte_size());
      dispatcher->Enqueue({[name, desc, buffer, handlers]() {
                             try {
                               if (!handlers->contains(name)) return;
                               py::object handler = (*handlers)[py::str(name)];
                               std::vector<py::ssize_t> shape(desc.shape.begin(), desc.shape.end());
                               auto* owned = new std::shared_ptr<std::vector<char>>(buffer);
                               py::capsule base(owned, [](void* p) { delete static_cast<std::shared_ptr<std::vector<char>>*>(p); });
                               py::array array(ToNumpyDType(desc.dtype), shape, (*owned)->data(), base);
                               handler(array);
                             } catch (py::error_already_set& e) {
                               e.discard_as_unraisable(py::str("actorflow watch handler '" + name + "'"));
                             }
                           },
                           nullptr});
    };
  }

  void Attach(std::shared_ptr<CompiledJob> job) { job_ = std::move(job); }
  py::dict* handlers() { return &handlers_; }
  std::shared_ptr<Dispatcher> dispatcher() const { return dispatcher_; }
  const void* owner() const { return owner_; }

  py::list input_descs() const { return DescList(job().input_descs()); }
  py::list output_descs() const { return DescList(job().output_descs()); }

  std::vector<py::array> CheckInputs(const py::sequence& inputs) const {
    const auto& descs = job().input_descs();
    if (static_cast<size_t>(py::len(inputs)) != descs.size())
      throw py::value_error("job '" + job().name() + "' takes " + std::to_string(descs.size()) + " inputs, got " +
                            std::to_string(py::len(inputs)));
    std::vector<py::array> arrays;
    for (size_t i = 0; i < descs.size(); ++i) arrays.push_back(CheckedInput(inputs[i], descs[i].name, descs[i].desc));
    return arrays;
  }

  std::vector<py::array> AllocateOutputs() const {
    std::vector<py::array> outputs;
    for (const auto& d : job().output_descs()) outputs.push_back(EmptyArray(d.desc));
    return outputs;
  }

  void Views(const std::vector<py::array>& arrays, const std::vector<NamedDesc>& descs,
             std::vector<TensorView>* views) const {
    for (size_t i = 0; i < arrays.size(); ++i) views->push_back(ViewOf(arrays[i], descs[i].desc));
  }

  // In a child of fork(): the dispatcher's thread stayed in the parent; start a fresh one (the
  // compiled job rebuilds its runtime itself, session.h). Callbacks of calls in flight in the
  // parent at fork time are not delivered here.
  void RefreshAfterFork() {
    if (generation_ == Environment::generation()) return;
    dispatcher_->AbandonAfterFork();
    generation_ = Environment::generation();
  }

  py::list Run(const py::sequence& inputs) {
    RefreshAfterFork();
    std::vector<py::array> in = CheckInputs(inputs);
    std::vector<py::array> out = AllocateOutputs();
    std::vector<TensorView> in_views, out_views;
    Views(in, job().input_descs(), &in_views);
    Views(out, job().output_descs(), &out_views);
    // Shared with the completion: a signal (Ctrl-C) may end the wait before the iteration does.
    auto wait = std::make_shared<RunWait>();
    std::shared_ptr<Dispatcher> dispatcher = dispatcher_;
    StatusOr<int64_t> pushed = Status(StatusCode::kInternal, "not pushed");
    bool finished = false;  // and this job's watch handlers ran: one GIL release for the whole call
    {
      py::gil_scoped_release release;
      pushed = job_->Push(in_views, out_views, [wait, dispatcher](int64_t, const Status& status) {
        std::unique_lock<std::mutex> lock(wait->mu);
        wait->status = status;
        wait->finished.store(true, std::memory_order_release);
        if (!wait->abandoned) {
          wait->cv.notify_all();
          return;
        }
        lock.unlock();
        // The caller left (KeyboardInterrupt); release the arrays the runtime used, with the GIL.
        dispatcher->Enqueue({nullptr, [wait] { wait->keep.clear(); }});
      }, /*may_run_inline=*/true);
      // A short call comes back in tens of microseconds: poll briefly before blocking (taking
      // kernel chunks meanwhile, actors/call_wait.h).
      finished = pushed.ok() && PollForCompletion(wait->finished);
      if (finished) dispatcher_->WaitIdle();  // watch handlers of this iteration run before run() returns
    }
    Check(pushed.status());
    for (; !finished;) {
      {
        py::gil_scoped_release release;
        std::unique_lock<std::mutex> lock(wait->mu);
        if (wait->cv.wait_for(lock, kSignalCheckInterval, [&] { return wait->finished.load(); })) break;
      }
      if (PyErr_CheckSignals() != 0) {
        std::lock_guard<std::mutex> lock(wait->mu);
        if (!wait->finished.load()) {
          // The iteration still runs: its arrays live until it completes; the error goes up.
          wait->abandoned = true;
          wait->keep = std::move(in);
          for (auto& a : out) wait->keep.push_back(std::move(a));
          throw py::error_already_set();
        }
        PyErr_Clear();  // it finished meanwhile: deliver the result, the signal was handled
        break;
      }
    }
    if (!finished) {
      py::gil_scoped_release release;
      dispatcher_->WaitIdle();
    }
    Check(wait->status);
    py::list result;
    for (auto& a : out) result.append(a);
    return result;
  }

  void Push(const py::sequence& inputs, py::object callback) {
    if (!PyCallable_Check(callback.ptr())) throw py::value_error("push: callback is not callable");
    RefreshAfterFork();
    auto call = std::make_unique<PendingCall>();
    call->callback = std::move(callback);
    call->inputs = CheckInputs(inputs);
    call->outputs = AllocateOutputs();
    std::vector<TensorView> in_views, out_views;
    Views(call->inputs, job().input_descs(), &in_views);
    Views(call->outputs, job().output_descs(), &out_views);
    std::shared_ptr<Dispatcher> dispatcher = dispatcher_;
    // Waits while kMaxPendingCalls are pending, checking for signals (Ctrl-C) between tries.
    for (;;) {
      bool began;
      {
        py::gil_scoped_release release;
        began = dispatcher->TryBeginCall(kMaxPendingCalls, kSignalCheckInterval);
      }
      if (began) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // nothing was pushed
    }
    PendingCall* raw = call.release();
    StatusOr<int64_t> pushed = Status(StatusCode::kInternal, "not pushed");
    {
      py::gil_scoped_release release;
      pushed = job_->Push(in_views, out_views, [dispatcher, raw](int64_t, const Status& status) {
        raw->status = status;
        dispatcher->Enqueue({[raw]() { Deliver(*raw); },
                             [dispatcher, raw]() {
                               delete raw;  // GIL held: releases the arrays and the callback
                               dispatcher->EndCall();
                             }});
      });
      if (!pushed.ok()) dispatcher->EndCall();
    }
    if (!pushed.ok()) {
      delete raw;
      ThrowStatus(pushed.status());
    }
  }

  static void Deliver(PendingCall& call) {
    try {
      if (call.status.ok()) {
        py::list result;
        for (auto& a : call.outputs) result.append(a);
        call.callback(result);
      } else {
        py::object type = call.status.code() == StatusCode::kInvalidArgument
                              ? py::module_::import("builtins").attr("ValueError")
                              : py::module_::import("builtins").attr("RuntimeError");
        call.callback(type(call.status.message()));
      }
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("actorflow push callback");
    }
  }

  void SetWatchHandler(const std::string& name, py::object fn) {
    if (!job().has_watch_handler(name)) throw py::value_error("job '" + job().name() + "' has no watch handler named '" + name + "'");
    handlers_[py::str(name)] = fn;
  }

  void Drain() {
    RefreshAfterFork();
    py::gil_scoped_release release;
    if (job_) job_->Drain();
    dispatcher_->WaitIdle();
  }

  // Drains, destroys the runtime, runs what the dispatcher holds and stops it. Needs the GIL
  // on entry (released inside); idempotent.
  void Shutdown() {
    RefreshAfterFork();
    {
      py::gil_scoped_release release;
      if (job_) job_->Shutdown();
      dispatcher_->Stop();
    }
    handlers_.clear();
  }

  std::string PlanDot() const { return graph::PlanToDot(job().plan()); }
  std::string InlineRefusal() const { return job().inline_refusal(); }
  std::string SbpSummary() const { return graph::SbpSummary(job().graph()); }
  std::string PlanText() const { return job().plan().DebugString(); }
  // On a rank of a job over several machines: this machine's part only (its variables and
  // registers, send/recv included), "machine" says which.
  py::dict MemoryReport() const {
    const graph::MemoryReport report = graph::PlanMemoryReport(job().machine_plan());
    const int machines = job().graph().machine_num();
    py::dict out;
    out["register_bytes"] = report.register_bytes;
    out["unshared_register_bytes"] = report.unshared_register_bytes;
    out["largest_live_bytes"] = report.largest_live_bytes;
    out["variable_bytes"] = report.variable_bytes;
    out["registers"] = report.registers;
    out["shared_registers"] = report.shared_registers;
    out["single_registers"] = report.single_registers;
    out["memory_blocks"] = report.memory_blocks;
    out["machine"] = job().machine();
    out["summary"] = (machines > 1 ? "machine " + std::to_string(job().machine()) + " of " + std::to_string(machines) +
                                         ": "
                                   : "") +
                     report.ToString();
    return out;
  }
  std::vector<std::pair<std::string, double>> CompileTimings() const { return job().compile_timings(); }
  std::vector<std::pair<std::string, double>> CompileCpuTimings() const { return job().compile_cpu_timings(); }
  const CompiledJob& job() const {
    if (!job_) throw std::runtime_error("job is not compiled");
    return *job_;
  }

 private:
  const void* owner_;  // the PySession that compiled it
  std::shared_ptr<CompiledJob> job_;
  py::dict handlers_;
  std::shared_ptr<Dispatcher> dispatcher_;
  uint64_t generation_;  // Environment::generation() the dispatcher's thread belongs to
};

class PySession {
 public:
  PySession() : session_(std::make_shared<Session>()) {}

  bool HasVariable(const std::string& name) const { return session_->HasVariable(name); }
  void DeleteVariable(const std::string& name) { Check(session_->DeleteVariable(name)); }

  void CreateVariable(const std::string& name, const py::iterable& shape, const std::string& dtype, const py::object& initial) {
    TensorDesc desc{ToShape(shape, "variable '" + name + "'"), ParseDTypeOrThrow(dtype)};
    py::array array = CheckedInput(initial, "initial value of variable '" + name + "'", desc);
    Check(session_->CreateVariable(name, desc, array.data()));
  }

  py::array GetVariable(const std::string& name) {
    TensorDesc desc = Unwrap(session_->VariableDesc(name));
    py::array out = EmptyArray(desc);
    void* data = out.mutable_data();
    Status status;
    {
      py::gil_scoped_release release;
      status = session_->GetVariable(name, data, desc.byte_size());
    }
    Check(status);
    return out;
  }

  // None unless a job over several machines holds the variable; else {"shape", "dtype" (the
  // logical tensor's), "axis": k (-1: whole
  // copies), "machines": [...], "starts": [...], "shapes": [...], "local": [part indices held
  // here], "whole_here": whether this process holds it whole}.
  py::object VariableLayout(const std::string& name) {
    actorflow::VariableLayout layout = Unwrap(session_->VariableLayoutOf(name));
    if (layout.machines.empty()) return py::none();
    const TensorDesc desc = Unwrap(session_->VariableDesc(name));
    py::dict out;
    out["shape"] = py::tuple(py::cast(desc.shape));
    out["dtype"] = DTypeName(desc.dtype);
    out["axis"] = layout.axis;
    out["machines"] = layout.machines;
    out["starts"] = layout.starts;
    py::list shapes;
    for (const TensorDesc& part : layout.parts) shapes.append(py::tuple(py::cast(part.shape)));
    out["shapes"] = shapes;
    auto membership = ClusterMembership::Get();
    const int rank = membership ? membership->rank() : 0;
    out["local"] = layout.PartsOn(rank);
    out["whole_here"] = layout.HeldWholeOn(rank);
    return out;
  }

  py::array GetVariablePart(const std::string& name, int index) {
    actorflow::VariableLayout layout = Unwrap(session_->VariableLayoutOf(name));
    if (index < 0 || static_cast<size_t>(index) >= layout.parts.size())
      throw py::value_error("get_variable_part('" + name + "'): part " + std::to_string(index) + " of " +
                            std::to_string(layout.parts.size()));
    const TensorDesc desc = layout.parts[static_cast<size_t>(index)];
    py::array out = EmptyArray(desc);
    void* data = out.mutable_data();
    Status status;
    {
      py::gil_scoped_release release;
      status = session_->GetVariablePart(name, index, data, desc.byte_size());
    }
    Check(status);
    return out;
  }

  void SetVariablePart(const std::string& name, int index, const py::object& value) {
    actorflow::VariableLayout layout = Unwrap(session_->VariableLayoutOf(name));
    if (index < 0 || static_cast<size_t>(index) >= layout.parts.size())
      throw py::value_error("set_variable_part('" + name + "'): part " + std::to_string(index) + " of " +
                            std::to_string(layout.parts.size()));
    const TensorDesc desc = layout.parts[static_cast<size_t>(index)];
    py::array array = CheckedInput(value, "variable '" + name + "' part " + std::to_string(index), desc);
    Status status;
    {
      py::gil_scoped_release release;
      status = session_->SetVariablePart(name, index, desc, array.data());
    }
    Check(status);
  }

  void SetVariable(const std::string& name, const py::object& value) {
    TensorDesc desc = Unwrap(session_->VariableDesc(name));
    py::array array = CheckedInput(value, "variable '" + name + "'", desc);
    Status status;
    {
      py::gil_scoped_release release;
      status = session_->SetVariable(name, desc, array.data());
    }
    Check(status);
  }

  std::vector<std::string> VariableNames() const { return session_->VariableNames(); }

  std::unique_ptr<PyJob> Compile(const graph::JobBuilder& builder, const py::dict& options) {
    JobOptions job_options;
    for (auto [key, value] : options) {
      std::string k = py::str(key).cast<std::string>();
      if (value.is_none()) continue;
      if (k == "num_threads") job_options.num_threads = value.cast<int>();
      else if (k == "kernel_threads") job_options.kernel_threads = value.cast<int>();
      else if (k == "num_workers") job_options.num_workers = value.cast<int>();
      else if (k == "register_num") job_options.register_num = value.cast<int>();
      else if (k == "dump_dot_dir") job_options.dump_dot_dir = value.cast<std::string>();
      else if (k == "trace_path") job_options.trace_path = value.cast<std::string>();
      else if (k == "use_job_cache") job_options.use_job_cache = value.cast<bool>();
      else if (k == "disabled_fusions") job_options.disabled_fusions = value.cast<std::vector<std::string>>();
      else if (k == "memory_sharing") job_options.memory_sharing = value.cast<bool>();
      else if (k == "pipelining") job_options.pipelining = value.cast<bool>();
      else if (k == "run_inline") job_options.run_inline = value.cast<bool>();
      else throw py::value_error("compile: unknown option '" + k +
                                 "' (num_threads, num_workers, kernel_threads, register_num, dump_dot_dir, trace_path, "
                                 "use_job_cache, disabled_fusions, memory_sharing, pipelining, run_inline)");
    }
    if (job_options.register_num < 1) throw py::value_error("compile: register_num must be >= 1");
    auto job = std::make_unique<PyJob>(this);
    SinkCallback forward = PyJob::WatchForwarder(job->dispatcher(), job->handlers());
    StatusOr<std::shared_ptr<CompiledJob>> compiled = Status(StatusCode::kInternal, "not compiled");
    {
      py::gil_scoped_release release;
      compiled = session_->Compile(builder, job_options, forward);
    }
    job->Attach(Unwrap(std::move(compiled)));
    return job;
  }

  // A variable over an eager tensor's storage (Session::CreateVariableOver); the name it has.
  std::string CreateVariableOver(const std::string& name, const std::shared_ptr<EagerTensor>& tensor) {
    if (!tensor) throw py::value_error("create_variable_over: no tensor");
    return Unwrap(session_->CreateVariableOver(name, tensor->desc(), tensor->storage(), tensor->version_counter()));
  }

  // Writes `job` as a model directory into `directory` (missing or empty; see session/model.h).
  void SaveModel(const PyJob& job, const std::string& directory) {
    if (job.owner() != this) throw py::value_error("save_model: the job was compiled by another session");
    Status status;
    {
      py::gil_scoped_release release;
      status = SaveCompiledJob(*session_, job.job(), directory);
    }
    Check(status);
  }

  void WaitAll() {
    py::gil_scoped_release release;
    session_->WaitAll();
  }

  void Reset() {
    std::vector<PyJob*> jobs;
    {
      std::lock_guard<std::mutex> lock(g_jobs_mu);
      jobs.assign(g_jobs.begin(), g_jobs.end());
    }
    for (PyJob* j : jobs)
      if (j->owner() == this) j->Shutdown();
    py::gil_scoped_release release;
    session_->Reset();
  }

 private:
  std::shared_ptr<Session> session_;
};

PySession& DefaultSession() {
  static PySession* session = new PySession();  // never destroyed: the exit hook shuts it down
  return *session;
}

void ShutdownAtExit() {
  std::vector<PyJob*> jobs;
  {
    std::lock_guard<std::mutex> lock(g_jobs_mu);
    jobs.assign(g_jobs.begin(), g_jobs.end());
  }
  for (PyJob* j : jobs) j->Shutdown();
}

graph::OptimizerSpec ToOptimizerSpec(const py::dict& spec) {
  graph::OptimizerSpec out;
  for (auto [key, value] : spec) {
    std::string k = py::str(key).cast<std::string>();
    if (value.is_none()) continue;
    try {
      if (k == "type") out.type = value.cast<std::string>();
      else if (k == "momentum") out.momentum = value.cast<double>();
      else if (k == "beta1") out.beta1 = value.cast<double>();
      else if (k == "beta2") out.beta2 = value.cast<double>();
      else if (k == "epsilon") out.epsilon = value.cast<double>();
      else if (k == "decay_rate") out.decay_rate = value.cast<double>();
      else if (k == "weight_decay") out.weight_decay = value.cast<double>();
      else if (k == "clip_norm") out.clip_norm = value.cast<double>();
      else if (k == "variables") out.variables = value.cast<std::vector<std::string>>();
      else if (k == "exact_bias_correction") out.exact_bias_correction = value.cast<bool>();
      // other keys (e.g. a scheduler description) belong to the Python side
    } catch (py::cast_error&) {
      throw py::value_error("optimizer spec: '" + k + "' has a value of the wrong type: " + py::repr(value).cast<std::string>());
    }
  }
  return out;
}

graph::Placement ToPlacement(const std::string& device_type, const py::object& ids) {
  graph::Placement p;
  p.device_type = device_type;
  if (py::isinstance<py::str>(ids)) p.machine_device_ids = {ids.cast<std::string>()};
  else p.machine_device_ids = ids.cast<std::vector<std::string>>();
  return p;
}

}  // namespace
}  // namespace python
}  // namespace actorflow

using namespace actorflow;          // NOLINT: the module definition reads better unqualified
using namespace actorflow::python;  // NOLINT

PYBIND11_MODULE(_C, m) {
  m.doc() = "actorflow's C++ core: job builder, compiler, session and runtime (see python_bindings/C_API.md)";
  RegisterAllOps();
  BindTraceReader(m);
  BindEager(m);

  m.def("op_types", [] { return OpRegistry::Global().Types(); });
  // (jobs, caller_only_jobs, wake_ups) of the kernels' helper pool since the process started
  // (kernels/parallel_chunks.h): which mode a bimodal short kernel ran in (benchmarks).
  m.def("_kernel_pool_counts", [] {
    ParallelChunksCounters c = ParallelChunksCounts();
    return py::make_tuple(c.jobs, c.caller_only_jobs, c.wake_ups);
  });
  // (ok, message): whether `n` GPUs can be used (graph::CheckGpuDevices), without raising.
  m.def("check_gpu_devices", [](int n) {
    Status status = graph::CheckGpuDevices(n);
    return py::make_tuple(status.ok(), status.message());
  });
  m.def("op_signature", [](const std::string& type) {
    const OpDef* def = Unwrap(OpRegistry::Global().Find(type));
    py::dict d;
    d["inputs"] = def->input_names;
    d["outputs"] = def->output_names;
    d["doc"] = def->doc;
    d["variadic_inputs"] = def->variadic_inputs;
    d["mutable_inputs"] = def->mutable_inputs;
    d["differentiable"] = static_cast<bool>(def->grad);
    return d;
  });

  py::class_<graph::JobBuilder>(m, "JobBuilder")
      .def(py::init([](const std::string& name, const std::string& job_type) {
             return std::make_unique<graph::JobBuilder>(Unwrap(graph::JobBuilder::Create(name, job_type)));
           }),
           py::arg("name"), py::arg("job_type"))
      .def_property_readonly("name", [](const graph::JobBuilder& b) { return b.graph().job_name(); })
      .def_property_readonly("job_type", [](const graph::JobBuilder& b) { return b.graph().job_type(); })
      .def("set_placement",
           [](graph::JobBuilder& b, const std::string& device_type, const py::object& ids) {
             Check(b.SetPlacement(ToPlacement(device_type, ids)));
           },
           py::arg("device_type"), py::arg("machine_device_ids") = "0:0")
      .def("clear_placement", [](graph::JobBuilder& b) { Check(b.ClearPlacement()); })
      .def("set_output_sbp",
           [](graph::JobBuilder& b, const std::string& ref, const std::string& kind, int64_t axis) {
             Sbp sbp;
             if (kind == "split") sbp = Sbp::Split(axis);
             else if (kind == "broadcast") sbp = Sbp::Broadcast();
             else if (kind == "partial_sum") sbp = Sbp::PartialSum();
             else throw py::value_error("set_output_sbp: kind must be 'split', 'broadcast' or 'partial_sum', got '" +
                                        kind + "'");
             Check(b.SetOutputSbpHint(ref, sbp));
           },
           py::arg("ref"), py::arg("kind"), py::arg("axis") = 0)
      .def("set_fed_per_machine",
           [](graph::JobBuilder& b, const std::string& ref) { Check(b.SetFedPerMachine(ref)); }, py::arg("ref"))
      .def("set_job_config",
           [](graph::JobBuilder& b, int cpu_device_num, int gpu_device_num, const std::string& view, int machine_num) {
             Check(b.SetDeviceNum(cpu_device_num, gpu_device_num));
             Check(b.SetMachineNum(machine_num));
             Check(b.SetLogicalView(view));
           },
           py::arg("cpu_device_num"), py::arg("gpu_device_num"), py::arg("default_logical_view"),
           py::arg("machine_num") = 0)
      .def("add_input",
           [](graph::JobBuilder& b, const std::string& name, const py::iterable& shape, const std::string& dtype,
              const std::string& location) {
             return Unwrap(b.AddInput(name, ToShape(shape, "placeholder '" + name + "' at " + location),
                                      ParseDTypeOrThrow(dtype), location));
           },
           py::arg("name"), py::arg("shape"), py::arg("dtype"), py::arg("location") = "")
      .def("add_variable",
           [](graph::JobBuilder& b, const std::string& name, const py::iterable& shape, const std::string& dtype,
              const std::string& location, bool trainable) {
             return Unwrap(b.AddVariable(name, ToShape(shape, "variable '" + name + "' at " + location),
                                         ParseDTypeOrThrow(dtype), location, trainable));
           },
           py::arg("name"), py::arg("shape"), py::arg("dtype"), py::arg("location") = "", py::arg("trainable") = true)
      .def("add_op",
           [](graph::JobBuilder& b, const std::string& type, const std::string& name, const std::vector<std::string>& inputs,
              const py::dict& attrs, const std::string& location) {
             Attrs converted = ToAttrs(attrs, "op '" + name + "' (" + type + ") at " + location);
             const graph::Node* node = Unwrap(b.AddOp(type, name, inputs, converted, location));
             py::list out;
             for (size_t i = 0; i < node->output_names.size(); ++i)
               out.append(py::make_tuple(node->output_ref(i), ShapeToList(node->output_descs[i].shape),
                                         DTypeName(node->output_descs[i].dtype)));
             return out;
           },
           py::arg("type"), py::arg("name"), py::arg("inputs"), py::arg("attrs") = py::dict(), py::arg("location") = "")
      .def("tensor_desc",
           [](const graph::JobBuilder& b, const std::string& ref) {
             TensorDesc d = Unwrap(b.TensorDescOf(ref));
             return py::make_tuple(ShapeToList(d.shape), DTypeName(d.dtype));
           })
      .def("set_outputs", [](graph::JobBuilder& b, const std::vector<std::string>& refs) { Check(b.SetOutputs(refs)); })
      .def("add_watch",
           [](graph::JobBuilder& b, const std::string& ref, const std::string& handler, bool diff, const std::string& location) {
             Check(b.AddWatch(ref, handler, diff, location));
           },
           py::arg("ref"), py::arg("handler_name"), py::arg("diff") = false, py::arg("location") = "")
      .def("add_loss", [](graph::JobBuilder& b, const std::string& ref) { Check(b.AddLoss(ref)); })
      .def("set_optimizer", [](graph::JobBuilder& b, const py::dict& spec) { Check(b.SetOptimizer(ToOptimizerSpec(spec))); })
      .def("to_dot", [](const graph::JobBuilder& b) { return b.graph().ToDot(); })
      .def("to_job_text", [](const graph::JobBuilder& b) { return b.ToJob().DebugString(); });

  py::class_<PyJob>(m, "CompiledJob")
      .def_property_readonly("input_descs", &PyJob::input_descs)
      .def_property_readonly("output_descs", &PyJob::output_descs)
      .def("run", &PyJob::Run, py::arg("inputs"))
      .def("push", &PyJob::Push, py::arg("inputs"), py::arg("callback"))
      .def("set_watch_handler", &PyJob::SetWatchHandler, py::arg("handler_name"), py::arg("fn"))
      .def("drain", &PyJob::Drain)
      .def("shutdown", &PyJob::Shutdown)
      .def("plan_dot", &PyJob::PlanDot)
      .def("plan_text", &PyJob::PlanText)
      .def("memory_report", &PyJob::MemoryReport)
      .def("inline_refusal", &PyJob::InlineRefusal)
      .def_property_readonly("compile_timings", &PyJob::CompileTimings)
      .def_property_readonly("compile_cpu_timings", &PyJob::CompileCpuTimings)
      .def("sbp_summary", &PyJob::SbpSummary);

  py::class_<PySession>(m, "Session")
      .def(py::init<>())  // an isolated session (tests); programs use default_session()
      .def("has_variable", &PySession::HasVariable)
      .def("delete_variable", &PySession::DeleteVariable, py::arg("name"))
      .def("create_variable", &PySession::CreateVariable, py::arg("name"), py::arg("shape"), py::arg("dtype"),
           py::arg("initial"))
      .def("get_variable", &PySession::GetVariable)
      .def("variable_layout", &PySession::VariableLayout, py::arg("name"))
      .def("get_variable_part", &PySession::GetVariablePart, py::arg("name"), py::arg("index"))
      .def("set_variable_part", &PySession::SetVariablePart, py::arg("name"), py::arg("index"), py::arg("value"))
      .def("set_variable", &PySession::SetVariable)
      .def("variable_names", &PySession::VariableNames)
      .def("compile", &PySession::Compile, py::arg("builder"), py::arg("options") = py::dict())
      .def("create_variable_over", &PySession::CreateVariableOver, py::arg("name"), py::arg("tensor"))
      .def("save_model", &PySession::SaveModel, py::arg("job"), py::arg("directory"))
      .def("wait_all", &PySession::WaitAll)
      .def("reset", &PySession::Reset);

  m.def("default_session", &DefaultSession, py::return_value_policy::reference);
  // This process as a rank of a multi-machine job (session/cluster_membership.h, docs/cluster.md).
  m.def(
      "cluster_start",
      [](int rank, int world_size, const std::string& host, int port, const std::string& job_id,
         const std::string& version, int rendezvous_ms, int heartbeat_ms, int connection_timeout_ms,
         const std::string& secret, const std::string& tls_certificate, const std::string& tls_key,
         const std::string& tls_ca, const std::string& data_host, int64_t call_deadline_ms) {
        if (port < 0 || port > 65535) throw py::value_error("cluster_start: port must be in [0, 65535], got " + std::to_string(port));
        // At most int32 milliseconds (about 24.8 days), as the other waits: a deadline of years
        // would overflow the watch's clock arithmetic into the past.
        if (call_deadline_ms < 0 || call_deadline_ms > std::numeric_limits<int32_t>::max())
          throw py::value_error("cluster_start: call_deadline_ms must be in [0, " +
                                std::to_string(std::numeric_limits<int32_t>::max()) + "] (0: none), got " +
                                std::to_string(call_deadline_ms));
        ClusterOptions options;
        options.rank = rank;
        options.world_size = world_size;
        options.coordinator_host = host;
        options.coordinator_port = static_cast<uint16_t>(port);
        options.job_id = job_id;
        options.version = version;
        options.secret = secret;
        options.tls = ClusterTls{tls_certificate, tls_key, tls_ca};
        options.data_host = data_host;
        options.rendezvous_timeout = std::chrono::milliseconds(rendezvous_ms);
        options.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
        options.connection_timeout = std::chrono::milliseconds(connection_timeout_ms);
        options.call_deadline = std::chrono::milliseconds(call_deadline_ms);
        Status started;
        {
          py::gil_scoped_release release;
          started = ClusterMembership::Start(options);
        }
        Check(started);
      },
      py::arg("rank"), py::arg("world_size"), py::arg("host"), py::arg("port"), py::arg("job_id"),
      py::arg("version") = "", py::arg("rendezvous_ms") = 60000, py::arg("heartbeat_ms") = 1000,
      py::arg("connection_timeout_ms") = 5000, py::arg("secret") = "", py::arg("tls_certificate") = "",
      py::arg("tls_key") = "", py::arg("tls_ca") = "", py::arg("data_host") = "", py::arg("call_deadline_ms") = 600000);
  m.def(
      "cluster_stop",
      [](int timeout_ms) {
        Status stopped;
        {
          py::gil_scoped_release release;
          stopped = ClusterMembership::Stop(std::chrono::milliseconds(timeout_ms));
        }
        Check(stopped);
      },
      py::arg("timeout_ms") = 30000);
  m.def(
      "cluster_barrier",
      [](int timeout_ms) {
        auto membership = ClusterMembership::Get();
        if (!membership) throw py::value_error("cluster_barrier: this process is not part of a cluster");
        Status status;
        {
          py::gil_scoped_release release;
          status = membership->cluster().Barrier(std::chrono::milliseconds(timeout_ms));
        }
        Check(status);
      },
      py::arg("timeout_ms"));
  m.def(
      "cluster_all_gather",
      [](const std::string& text, int timeout_ms) {
        auto membership = ClusterMembership::Get();
        if (!membership) throw py::value_error("cluster_all_gather: this process is not part of a cluster");
        StatusOr<std::vector<std::string>> texts = FailedPrecondition("not run");
        {
          py::gil_scoped_release release;
          texts = membership->cluster().AllGatherText(text, std::chrono::milliseconds(timeout_ms));
        }
        return Unwrap(std::move(texts));
      },
      py::arg("text"), py::arg("timeout_ms"));
  // Payload bytes this rank's data plane sent and received so far (bench/bench_cluster_mlp.py).
  m.def("cluster_payload_bytes", []() -> py::object {
    auto membership = ClusterMembership::Get();
    if (!membership) return py::none();
    auto [sent, received] = membership->data_plane().PayloadBytes();
    return py::make_tuple(sent, received);
  });
  m.def("cluster_rank", [] {
    auto membership = ClusterMembership::Get();
    return membership ? membership->rank() : -1;
  });
  // Drain and stop every job while the interpreter is fully alive (see the file comment).
  py::module_::import("atexit").attr("register")(py::cpp_function(&ShutdownAtExit));
}

#include "actorflow/pipeline.h"

#include <google/protobuf/text_format.h>

#include <map>

#include "actors/trace_recorder.h"
#include "actors/plan_dtype.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {

struct Pipeline::Impl {
  plan::Plan plan;
  std::map<std::string, StageFn> stages;
  std::map<std::string, AsyncStageFn> async_stages;
  std::vector<Port> outputs;
  std::unique_ptr<ChromeTraceRecorder> recorder;
  std::string trace_path;
  RuntimeObserver* observer = nullptr;  // the recorder or the caller's
  std::unique_ptr<Runtime> runtime;
  int feeds = 0;
  Status build_error;

  plan::Task& task(int node) { return *plan.mutable_tasks(node); }
  // Keeps the first build error: Start reports it.
  void Fail(Status status) {
    if (build_error.ok()) build_error = std::move(status);
  }
};

namespace {

plan::RegisterDesc MakeRegister(const std::string& name, const std::vector<TensorDesc>& blobs, int register_num) {
  plan::RegisterDesc reg;
  reg.set_name(name);
  reg.set_register_num(register_num);
  for (size_t b = 0; b < blobs.size(); ++b) {
    plan::BlobDesc* blob = reg.add_blobs();
    blob->set_name(name + "/" + std::to_string(b));
    for (int64_t d : blobs[b].shape) blob->add_shape(d);
    blob->set_dtype(ToProtoDType(blobs[b].dtype));
    blob->set_byte_size(static_cast<int64_t>(blobs[b].byte_size()));
  }
  return reg;
}

}  // namespace

Pipeline::Pipeline() : impl_(std::make_unique<Impl>()) { impl_->plan.set_job_name("pipeline"); }
Pipeline::~Pipeline() { impl_->runtime.reset(); }

Port Pipeline::AddInput(const std::string& name, TensorDesc desc, int register_num) {
  if (impl_->runtime) impl_->Fail(FailedPrecondition("AddInput('" + name + "') after Start"));
  impl_->Fail(ValidateTensorDesc(desc, "AddInput('" + name + "')"));
  if (register_num < 1)
    impl_->Fail(InvalidArgument("AddInput('" + name + "'): register_num must be >= 1, got " + std::to_string(register_num)));
  int node = impl_->plan.tasks_size();
  plan::Task* task = impl_->plan.add_tasks();
  task->set_id(node);
  task->set_name(name);
  task->set_kind(plan::SOURCE);
  task->set_device_type("cpu");
  task->set_feed_index(impl_->feeds++);
  *task->add_registers() = MakeRegister(name, {desc}, register_num);
  return Port{node, 0};
}

Port Pipeline::AddStage(const std::string& name, std::vector<Port> inputs, std::vector<TensorDesc> outputs, StageFn fn,
                        int register_num, const std::string& op) {
  if (!fn) impl_->Fail(InvalidArgument("AddStage('" + name + "'): the stage function is empty"));
  Port port = AddStageTask("AddStage", name, std::move(inputs), std::move(outputs), register_num, op, false);
  if (!impl_->stages.emplace(name, std::move(fn)).second || impl_->async_stages.count(name) > 0)
    impl_->Fail(InvalidArgument("stage name '" + name + "' is used twice"));
  return port;
}

Port Pipeline::AddAsyncStage(const std::string& name, std::vector<Port> inputs, std::vector<TensorDesc> outputs,
                             AsyncStageFn fn, int register_num, const std::string& op) {
  if (!fn) impl_->Fail(InvalidArgument("AddAsyncStage('" + name + "'): the stage function is empty"));
  Port port = AddStageTask("AddAsyncStage", name, std::move(inputs), std::move(outputs), register_num, op, true);
  if (!impl_->async_stages.emplace(name, std::move(fn)).second || impl_->stages.count(name) > 0)
    impl_->Fail(InvalidArgument("stage name '" + name + "' is used twice"));
  return port;
}

Port Pipeline::AddStageTask(const char* call, const std::string& name, std::vector<Port> inputs,
                            std::vector<TensorDesc> outputs, int register_num, const std::string& op,
                            bool asynchronous) {
  const std::string where = std::string(call) + "('" + name + "')";
  if (impl_->runtime) impl_->Fail(FailedPrecondition(where + " after Start"));
  if (register_num < 1)
    impl_->Fail(InvalidArgument(where + ": register_num must be >= 1, got " + std::to_string(register_num)));
  for (size_t k = 0; k < outputs.size(); ++k)
    impl_->Fail(ValidateTensorDesc(outputs[k], where + " output " + std::to_string(k)));
  int node = impl_->plan.tasks_size();
  plan::Task* task = impl_->plan.add_tasks();
  task->set_id(node);
  task->set_name(name);
  task->set_kind(plan::COMPUTE);
  task->set_op_type(op.empty() ? name : op);
  task->set_device_type("cpu");
  task->set_asynchronous(asynchronous);
  for (const Port& in : inputs) {
    if (in.node < 0 || in.node >= node || in.output >= impl_->task(in.node).registers_size()) {
      impl_->Fail(InvalidArgument("stage '" + name + "': input refers to an unknown node or output"));
      continue;
    }
    plan::InputDesc* desc = task->add_inputs();
    desc->set_producer_task_id(in.node);
    desc->set_producer_register(in.output);
    impl_->task(in.node).mutable_registers(in.output)->add_consumer_task_ids(node);
  }
  for (size_t k = 0; k < outputs.size(); ++k)
    *task->add_registers() = MakeRegister(name + "/out" + std::to_string(k), {outputs[k]}, register_num);
  if (outputs.empty()) *task->add_registers() = MakeRegister(name + "/done", {}, register_num);  // control only
  return Port{node, 0};
}

void Pipeline::SetOutputs(std::vector<Port> outputs) { impl_->outputs = std::move(outputs); }

Status Pipeline::Start(PipelineOptions options) {
  AF_RETURN_IF_ERROR(impl_->build_error);
  if (impl_->runtime) return FailedPrecondition("pipeline already started");
  // The main sink reads the chosen outputs, plus a control edge from every node nobody
  // consumes, so a call completes only when all its work is done.
  int sink = impl_->plan.tasks_size();
  plan::Task* task = impl_->plan.add_tasks();
  task->set_id(sink);
  task->set_name("output");
  task->set_kind(plan::SINK);
  task->set_device_type("cpu");
  for (const Port& out : impl_->outputs) {
    if (out.node < 0 || out.node >= sink || out.output >= impl_->task(out.node).registers_size() ||
        impl_->task(out.node).registers(out.output).blobs_size() == 0)
      return InvalidArgument("pipeline output refers to an unknown node or a stage without outputs");
    plan::InputDesc* desc = task->add_inputs();
    desc->set_producer_task_id(out.node);
    desc->set_producer_register(out.output);
    impl_->task(out.node).mutable_registers(out.output)->add_consumer_task_ids(sink);
  }
  for (int n = 0; n < sink; ++n) {
    plan::Task& t = impl_->task(n);
    for (int r = 0; r < t.registers_size(); ++r) {
      if (t.registers(r).consumer_task_ids_size() > 0) continue;
      plan::InputDesc* desc = task->add_inputs();
      desc->set_producer_task_id(n);
      desc->set_producer_register(r);
      desc->set_control(true);
      t.mutable_registers(r)->add_consumer_task_ids(sink);
    }
  }
  RuntimeOptions runtime_options;
  runtime_options.num_threads = options.num_threads;
  runtime_options.on_worker_start = options.on_worker_start;
  runtime_options.shutdown_timeout = options.shutdown_timeout;
  runtime_options.on_forced_shutdown = options.on_forced_shutdown;
  if (!options.trace_path.empty()) {
    AF_RETURN_IF_ERROR(ChromeTraceRecorder::CheckWritable(options.trace_path));
    impl_->recorder = std::make_unique<ChromeTraceRecorder>();
    impl_->trace_path = options.trace_path;
    runtime_options.observer = impl_->recorder.get();
  } else {
    runtime_options.observer = options.observer;
  }
  impl_->observer = runtime_options.observer;
  RuntimeHooks hooks;
  Impl* impl = impl_.get();
  hooks.make_kernel = [impl](const plan::Task& t) -> StatusOr<KernelFn> {
    auto async = impl->async_stages.find(t.name());
    if (async != impl->async_stages.end()) {
      AsyncStageFn fn = async->second;
      return KernelFn([fn](KernelContext& ctx) {
        return fn(StageArgs{*ctx.inputs, *ctx.outputs, ctx.iteration}, ctx.TakeCompletion());
      });
    }
    auto it = impl->stages.find(t.name());
    if (it == impl->stages.end()) return NotFound("no stage function for '" + t.name() + "'");
    StageFn fn = it->second;
    return KernelFn([fn](KernelContext& ctx) { return fn(StageArgs{*ctx.inputs, *ctx.outputs, ctx.iteration}); });
  };
  AF_ASSIGN_OR_RETURN(impl_->runtime, Runtime::Create(impl_->plan, std::move(hooks), runtime_options));
  return Status::Ok();
}

StatusOr<int64_t> Pipeline::Push(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                                 Completion done) {
  if (!impl_->runtime) return FailedPrecondition("Pipeline::Push before Start");
  return impl_->runtime->Push(inputs, outputs, std::move(done));
}

std::future<Status> Pipeline::PushAsync(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) {
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> future = promise->get_future();
  auto pushed = Push(inputs, outputs, [promise](int64_t, const Status& status) { promise->set_value(status); });
  if (!pushed.ok()) promise->set_value(pushed.status());
  return future;
}

Status Pipeline::Run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) {
  if (!impl_->runtime) return FailedPrecondition("Pipeline::Run before Start");
  return impl_->runtime->Run(inputs, outputs);
}

void Pipeline::Drain() {
  if (impl_->runtime) impl_->runtime->Drain();
}

Status Pipeline::Shutdown() {
  if (!impl_->runtime) return Status::Ok();
  return impl_->runtime->Shutdown();
}

Status Pipeline::Finish() {
  Drain();
  if (impl_->recorder) return impl_->recorder->Write(impl_->trace_path);
  return Status::Ok();
}

void Pipeline::SetTraceRecording(bool on) {
  if (impl_->observer != nullptr) impl_->observer->set_recording(on);
}

std::string Pipeline::PlanText() const {
  std::string text;
  google::protobuf::TextFormat::PrintToString(impl_->plan, &text);
  return text;
}

}  // namespace actorflow

#include "actors/task_state.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <utility>

namespace actorflow {

StatusOr<TaskPolicies> TaskPolicies::For(const plan::Task& task, bool has_in_edges) {
  TaskPolicies p;
  const InputPolicy ring_or_tick = has_in_edges ? InputPolicy::kRegisterRing : InputPolicy::kTick;
  switch (task.kind()) {
    case plan::SOURCE:
      p = {InputPolicy::kNone, OutputPolicy::kHostPool, ActPolicy::kNone};
      break;
    case plan::COMPUTE:
      p = {ring_or_tick, OutputPolicy::kOwnPool, task.asynchronous() ? ActPolicy::kAsyncKernel : ActPolicy::kKernel};
      break;
    case plan::SINK:
      p = {ring_or_tick, OutputPolicy::kOwnPool, ActPolicy::kDeliver};
      break;
    case plan::VARIABLE:
      p = {ring_or_tick, OutputPolicy::kExternal, ActPolicy::kNone};
      break;
    default:
      return InvalidArgument("plan: task '" + task.name() + "' has no kind");
  }
  if (task.asynchronous() && task.kind() != plan::COMPUTE)
    return InvalidArgument("plan: task '" + task.name() + "' is asynchronous, but only compute tasks can be (it is a " +
                           plan::TaskKind_Name(task.kind()) + ")");
  return p;
}

std::string TaskPolicies::ToString() const {
  static const char* const kInput[] = {"ring", "tick", "none"};
  static const char* const kOutput[] = {"own", "host", "external"};
  static const char* const kAct[] = {"none", "kernel", "async_kernel", "deliver"};
  return std::string("input=") + kInput[static_cast<int>(input)] + " output=" + kOutput[static_cast<int>(output)] +
         " act=" + kAct[static_cast<int>(act)];
}

TaskState::TaskState(const plan::Task& task, int index, RuntimeCore* core, RuntimeObserver* observer,
                     std::string_view name, std::string_view source_location, std::pmr::memory_resource* arena)
    : task_(task),
      name_(name),
      source_location_(source_location),
      index_(index),
      core_(core),
      observer_(observer),
      outputs_(arena),
      in_edges_(arena),
      data_inputs_(arena),
      chosen_registers_(arena),
      input_places_(arena) {}

std::string TaskState::where() const {
  std::string where;
  where.append("op '").append(name_).append("'");
  if (!task_.op_type().empty()) where.append(" (").append(task_.op_type()).append(")");
  if (!source_location_.empty()) where.append(" at ").append(source_location_);
  return where;
}

Status TaskState::FinishSetup(std::shared_ptr<const void> register_memory) {
  AF_ASSIGN_OR_RETURN(policies_, TaskPolicies::For(task_, !in_edges_.empty()));
  input_views_.resize(data_inputs_.size());
  input_places_.resize(data_inputs_.size());
  for (size_t i = 0; i < data_inputs_.size(); ++i) {
    DataInput& d = data_inputs_[i];
    input_views_[i].desc = std::move(d.desc);  // one copy of the shape per input (input_desc)
    if (d.in_edge < 0) input_views_[i].data = static_cast<char*>(d.constant->blob(0, d.blob_index)) + d.byte_offset;
    input_places_[i] = d.in_edge < 0 ? &d.constant->place : &in_edges_[d.in_edge].producer_slots->place;
  }
  output_views_.clear();
  size_t blobs = 0;
  for (const OutputSlots& out : outputs_) blobs += out.blob_descs.size();
  output_views_.reserve(blobs);
  for (const OutputSlots& out : outputs_)
    for (const TensorDesc& desc : out.blob_descs) output_views_.push_back(TensorView{nullptr, desc});
  chosen_registers_.assign(outputs_.size(), -1);

  if (policies_.act == ActPolicy::kDeliver && !task_.sink_name().empty()) {
    // A handler reads host memory: inputs elsewhere (device) are staged in host buffers
    // allocated here, once.
    delivered_views_ = input_views_;
    for (size_t i = 0; i < data_inputs_.size(); ++i) {
      if (input_places_[i]->host_accessible()) continue;
      staging_.push_back(std::make_unique<char[]>(std::max<size_t>(1, input_views_[i].byte_size())));
      delivered_views_[i].data = staging_.back().get();
      staged_ = true;
    }
  }

  if (policies_.act == ActPolicy::kAsyncKernel) {
    // As many launches in flight as the registers allow: each holds a free register of every
    // output and a ready register of every input.
    int capacity = 0;
    for (const OutputSlots& out : outputs_) capacity = capacity == 0 ? out.register_num : std::min(capacity, out.register_num);
    for (const InputSlots& in : in_edges_) {
      const int ring = static_cast<int>(in.ring.size());
      capacity = capacity == 0 ? ring : std::min(capacity, ring);
    }
    capacity = std::max(capacity, 1);
    launches_.assign(capacity, LaunchRecord{});
    launch_registers_.assign(static_cast<size_t>(capacity) * outputs_.size(), -1);
    const std::string named = where();
    for (int k = 0; k < capacity; ++k) {
      auto slot = std::make_shared<runtime_internal::CompletionSlot>();
      slot->index = k;
      slot->where = named;
      slot->register_memory = register_memory;
      slots_.push_back(std::move(slot));
    }
  }
  return Status::Ok();
}

void TaskState::BindActor(const caf::actor& actor) {
  for (auto& slot : slots_) {
    std::lock_guard<std::mutex> lock(slot->mu);
    slot->actor = actor;
  }
}

void TaskState::UnbindActor() {
  for (auto& slot : slots_) {
    std::lock_guard<std::mutex> lock(slot->mu);
    slot->actor = caf::actor();
  }
}

std::vector<std::string> TaskState::OutstandingCompletions() const {
  std::vector<std::string> outstanding;
  for (const auto& slot : slots_) {
    std::lock_guard<std::mutex> lock(slot->mu);
    if (slot->armed) outstanding.push_back(where() + ", iteration " + std::to_string(slot->iteration));
  }
  return outstanding;
}

bool TaskState::inputs_ready() const {
  switch (policies_.input) {
    case InputPolicy::kRegisterRing:
      for (const InputSlots& in : in_edges_)
        if (!in.ready()) return false;
      return true;
    case InputPolicy::kTick:  // roots act once per iteration the host started
      return pending_ticks_ > 0;
    case InputPolicy::kNone:  // sources act when the host fills them (OnFill)
      return false;
  }
  return false;
}

bool TaskState::outputs_free() const {
  for (const OutputSlots& out : outputs_)
    if (!out.has_free()) return false;
  return true;
}

void TaskState::NoteIdle(bool just_acted) {
  if (!tracing() || finished_) {
    waiting_ = false;  // a wait is only recorded whole
    return;
  }
  // A source waits for the host (its inputs are never ready), never for its own registers
  // (the host takes those).
  WaitReason reason = inputs_ready() ? WaitReason::kOutputRegistersFull : WaitReason::kInputNotReady;
  if (waiting_ && reason == wait_reason_) return;
  // After an act the wait starts where the act ended: no clock read.
  int64_t now = just_acted ? last_act_end_ : trace_clock::Now();
  if (waiting_) lane_->Wait(next_iteration_, wait_reason_, wait_start_, now);
  waiting_ = true;
  wait_reason_ = reason;
  wait_start_ = now;
}

void TaskState::TryAct(caf::event_based_actor* self) {
  bool acted = false;
  if (policies_.act == ActPolicy::kAsyncKernel) {
    while (inputs_ready() && outputs_free() && launch_count_ < launch_capacity()) {
      Launch(self);
      acted = true;
      RetireCompletedLaunches(self, last_act_end_);  // a launch that completed in its call, if the oldest
    }
  } else {
    while (inputs_ready() && outputs_free()) {
      Act(self);
      acted = true;
    }
  }
  NoteIdle(acted);
}

int64_t TaskState::TakeInputsAndOutputs(bool* failed, int* registers) {
  int64_t iteration = next_iteration_;
  *failed = false;
  switch (policies_.input) {
    case InputPolicy::kRegisterRing:
      for (size_t i = 0; i < data_inputs_.size(); ++i) {
        const DataInput& d = data_inputs_[i];
        if (d.in_edge < 0) continue;  // a read-only variable: the view never changes
        const InputSlots& in = in_edges_[d.in_edge];
        const int block = in.next().register_index;
        input_views_[i].data = static_cast<char*>(in.producer_slots->blob(block, d.blob_index)) + d.byte_offset;
        for (int e : d.slice_edges)
          AF_CHECK_EQ(in_edges_[e].next().register_index, block)
              << "'" << name_ << "' reads a block whole whose slices are in another block (rotation broken)";
      }
      for (InputSlots& in : in_edges_) {
        const InputSlots::Ready& ready = in.next();
        iteration = ready.iteration;  // the same on every edge (each delivers in iteration order)
        *failed = *failed || ready.failed;
        in.take();
      }
      break;
    case InputPolicy::kTick:
      iteration = next_tick_iteration_++;
      --pending_ticks_;
      break;
    case InputPolicy::kNone:
      AF_CHECK(false) << "act of '" << name_ << "', which the host fills";
  }
  size_t v = 0;
  for (size_t o = 0; o < outputs_.size(); ++o) {
    OutputSlots& out = outputs_[o];
    AF_CHECK(out.has_free()) << "act of '" << name_ << "' without a free output register";
    const int reg = out.take_free();
    registers[o] = reg;
    for (size_t b = 0; b < out.blob_descs.size(); ++b) output_views_[v++].data = out.blob(reg, static_cast<int>(b));
  }
  return iteration;
}

Status CallKernel(const KernelFn& kernel, KernelContext& ctx) {
  Status status;
  try {
    status = kernel(ctx);
  } catch (const std::exception& e) {
    status = Internal(std::string("kernel threw an exception: ") + e.what());
  } catch (...) {
    status = Internal("kernel threw an exception of unknown type");
  }
  if (ctx.completion_refused && status.ok())
    status = FailedPrecondition(
        "the kernel took a completion handle, but its task is synchronous (plan Task.asynchronous is false), so "
        "nothing holds its registers until the handle completes");
  return status;
}

Status TaskState::RunKernel(KernelContext& ctx) {
  ctx.inputs = &input_views_;
  ctx.outputs = &output_views_;
  return CallKernel(kernel_, ctx);
}

// The main sink copies into the caller's buffers (through CopyBytes, which knows both memory
// cases); a named sink hands its handler views valid during the call.
Status TaskState::Deliver(int64_t iteration) {
  if (task_.sink_name().empty()) {
    const std::vector<TensorView>* dst = core_->CallerOutputs(iteration);
    for (size_t i = 0; dst != nullptr && i < input_views_.size() && i < dst->size(); ++i)
      AF_RETURN_IF_ERROR(CopyBytes((*dst)[i].data, HostPlace(), input_views_[i].data, *input_places_[i],
                                   input_views_[i].byte_size()));
    return Status::Ok();
  }
  if (!staged_) return core_->NamedSink(task_.sink_name(), iteration, input_views_);
  for (size_t i = 0; i < input_views_.size(); ++i)
    if (delivered_views_[i].data != input_views_[i].data)
      AF_RETURN_IF_ERROR(CopyBytes(delivered_views_[i].data, HostPlace(), input_views_[i].data, *input_places_[i],
                                   input_views_[i].byte_size()));
  return core_->NamedSink(task_.sink_name(), iteration, delivered_views_);
}

// One synchronous act: take the next register of every input and a free register of every
// output, run the kernel (or deliver), announce the outputs, ack the inputs.
void TaskState::Act(caf::event_based_actor* self) {
  const bool trace = tracing();
  const int64_t start = trace ? trace_clock::Now() : 0;
  const int64_t actionable = trace ? ActionableSince() : 0;
  bool failed;
  const int64_t iteration = TakeInputsAndOutputs(&failed, chosen_registers_.data());
  Status status;
  if (!failed) {
    switch (policies_.act) {
      case ActPolicy::kKernel: {
        KernelContext ctx;
        ctx.iteration = iteration;
        if (lending_ != nullptr) ctx.threads = lending_->Borrow();
        status = RunKernel(ctx);
        if (lending_ != nullptr) lending_->Return();
        break;
      }
      case ActPolicy::kDeliver:
        status = Deliver(iteration);
        break;
      case ActPolicy::kNone:  // VARIABLE: the register already holds the state
      case ActPolicy::kAsyncKernel:  // launched by Launch, never here
        break;
    }
  }
  if (trace) RecordAct(iteration, start, actionable);
  next_iteration_ = iteration + 1;
  FinishAct(self, iteration, failed, status, chosen_registers_.data(), last_act_end_);
}

// One asynchronous act: as Act, but the kernel launches work and the act finishes when its
// completion arrives (OnComplete), in launch order. The trace records the launch as the act.
void TaskState::Launch(caf::event_based_actor* self) {
  const bool trace = tracing();
  const int64_t start = trace ? trace_clock::Now() : 0;
  const int64_t actionable = trace ? ActionableSince() : 0;
  const int position = (launch_head_ + launch_count_) % launch_capacity();
  LaunchRecord& record = launches_[position];
  bool failed;
  record.iteration = TakeInputsAndOutputs(&failed, launch_registers_.data() + position * outputs_.size());
  record.failed = failed;
  record.done = failed;  // a failed input: nothing to launch
  record.status = Status::Ok();
  ++launch_count_;
  const int64_t launch = launches_started_++;
  const std::shared_ptr<runtime_internal::CompletionSlot>& slot = slots_[position];
  {
    std::lock_guard<std::mutex> lock(slot->mu);
    slot->launch = launch;
    slot->armed = false;
    slot->holders = 0;
    slot->iteration = record.iteration;
    slot->status = Status::Ok();
  }
  if (!failed) {
    KernelContext ctx;
    ctx.iteration = record.iteration;
    ctx.completion_slot = &slot;
    ctx.completion_launch = launch;
    ctx.stream_ordered = task_.stream_ordered();
    Status status = RunKernel(ctx);
    if (!ctx.completion_taken) {  // it completed in the call
      record.done = true;
      record.status = std::move(status);
    } else if (!status.ok()) {  // the launch failed, but what it started may use the registers
      record.status = std::move(status);
    }
  }
  if (trace) RecordAct(record.iteration, start, actionable);
  next_iteration_ = record.iteration + 1;
}

void TaskState::RetireCompletedLaunches(caf::event_based_actor* self, int64_t sent) {
  while (launch_count_ > 0 && launches_[launch_head_].done) {
    LaunchRecord& record = launches_[launch_head_];
    FinishAct(self, record.iteration, record.failed, record.status,
              launch_registers_.data() + launch_head_ * outputs_.size(), sent);
    record.status = Status::Ok();
    launch_head_ = (launch_head_ + 1) % launch_capacity();
    --launch_count_;
  }
}

void TaskState::OnComplete(caf::event_based_actor* self, int slot_index, int64_t launch) {
  runtime_internal::CompletionSlot& slot = *slots_[slot_index];
  Status status;
  {
    std::lock_guard<std::mutex> lock(slot.mu);  // orders the completing thread's writes before us
    AF_CHECK(slot.launch == launch && !slot.armed)
        << "completion of launch " << launch << " of '" << name_ << "' in a slot serving launch " << slot.launch;
    status = std::move(slot.status);
  }
  LaunchRecord& record = launches_[slot_index];
  AF_CHECK(!record.done) << "second completion of one act of '" << name_ << "'";
  if (record.status.ok()) record.status = std::move(status);  // a failed launch keeps its own error
  record.done = true;
  RetireCompletedLaunches(self, tracing() ? trace_clock::Now() : last_act_end_);
  TryAct(self);  // a launch slot is free again
  TryFinish(self);
}

void TaskState::FinishAct(caf::event_based_actor* self, int64_t iteration, bool failed, const Status& status,
                          const int* registers, int64_t sent) {
  if (!status.ok()) {
    failed = true;
    core_->RecordError(iteration, status.WithContext(where() + ", iteration " + std::to_string(iteration)));
  }
  // Which actor this worker runs next: CAF's work-stealing worker runs the actors a handler's
  // sends woke last-in first-out, so the one sent to last runs first. A producer whose every
  // register waits here is stalled until its ack: ack it last, so it runs next and the pipeline
  // keeps flowing. Otherwise the acks can wait: send the readies last, so the consumer carrying
  // the iteration on runs next (a lone iteration's latency) instead of after each producer's
  // ack handler; the acks run after it or on another worker.
  bool producer_stalled = false;
  for (const InputSlots& in : in_edges_) producer_stalled |= in.size == static_cast<int>(in.ring.size());
  if (producer_stalled) Emit(self, registers, iteration, failed, sent);
  for (InputSlots& in : in_edges_) {
    const int reg = in.front().register_index;
    Send(self, in.producer, in.producer_slots->channel(reg), ack_atom::value, in.producer_output, reg, sent);
    in.pop();
  }
  if (!producer_stalled) Emit(self, registers, iteration, failed, sent);
  if (policies_.act == ActPolicy::kDeliver) core_->SinkDelivered(iteration);
}

// The trace clock when the messages the next act consumes had all been sent: the next register
// of every input, the output register freed last, a root's tick.
int64_t TaskState::ActionableSince() const {
  int64_t at = std::max(outputs_freed_at_, is_root() ? tick_sent_at_ : 0);
  for (const InputSlots& in : in_edges_) at = std::max(at, in.next().sent);
  return at;
}

// The act that started at `start` and ends now, with the wait it ended (if any). The part of
// the wait after `actionable` (the actor could act but had not run) is a wait for a worker.
void TaskState::RecordAct(int64_t iteration, int64_t start, int64_t actionable) {
  last_act_end_ = trace_clock::Now();
  if (waiting_ && actionable > wait_start_ && actionable < start) {
    lane_->Wait(iteration, wait_reason_, wait_start_, actionable);
    wait_start_ = actionable;
    wait_reason_ = WaitReason::kWorkerBusy;
  }
  lane_->Act(iteration, waiting_, wait_start_, wait_reason_, start, last_act_end_);
  waiting_ = false;
}

void TaskState::ReturnRegister(OutputSlots& out, int reg) {
  if (policies_.output == OutputPolicy::kHostPool)
    core_->ReleaseSourceRegister(index_, reg);  // sources' pools belong to the host side
  else
    out.free_registers.push_back(reg);
}

void TaskState::Emit(caf::event_based_actor* self, const int* regs, int64_t iteration, bool failed, int64_t sent) {
  for (size_t o = 0; o < outputs_.size(); ++o) {
    OutputSlots& out = outputs_[o];
    int reg = regs[o];
    if (out.consumers.empty()) {  // nobody reads it: free again at once
      ReturnRegister(out, reg);
      continue;
    }
    out.pending_acks[reg] = static_cast<int>(out.consumers.size());
    for (const OutputSlots::Consumer& c : out.consumers) {
      Send(self, c.actor, out.channel(reg), ready_atom::value, c.in_edge, reg, iteration, failed, sent);
    }
  }
}

void TaskState::OnReady(caf::event_based_actor* self, int in_edge, int reg, int64_t iteration, bool failed,
                        int64_t sent) {
  HappensAfterReceive(in_edges_[in_edge].producer_slots->channel(reg));
  in_edges_[in_edge].push(InputSlots::Ready{reg, iteration, failed, sent});
  TryAct(self);
}

void TaskState::OnAck(caf::event_based_actor* self, int output, int reg, int64_t sent) {
  OutputSlots& out = outputs_[output];
  HappensAfterReceive(out.channel(reg));
  AF_CHECK_GT(out.pending_acks[reg], 0) << "ack of register " << reg << " of '" << name_ << "' nobody holds";
  if (--out.pending_acks[reg] > 0) return;
  if (policies_.output == OutputPolicy::kHostPool) {
    core_->ReleaseSourceRegister(index_, reg);
  } else {
    out.free_registers.push_back(reg);
    if (out.free_registers.size() == 1) outputs_freed_at_ = std::max(outputs_freed_at_, sent);
    TryAct(self);
  }
  TryFinish(self);
}

void TaskState::OnFill(caf::event_based_actor* self, int reg, int64_t iteration, int64_t sent) {
  HappensAfterReceive(outputs_[0].channel(reg));  // the host's copy into the register
  if (tracing()) RecordAct(iteration, trace_clock::Now(), sent);
  next_iteration_ = iteration + 1;
  for (const TickTarget& t : tick_targets_)
    Send(self, t.actor, t.state->tick_channel(), tick_atom::value, iteration, last_act_end_);
  chosen_registers_[0] = reg;  // a source has exactly one output
  Emit(self, chosen_registers_.data(), iteration, false, last_act_end_);
  NoteIdle(true);
}

void TaskState::OnTick(caf::event_based_actor* self, int64_t iteration, int64_t sent) {
  HappensAfterReceive(tick_channel());
  if (pending_ticks_ == 0) {
    next_tick_iteration_ = iteration;
    tick_sent_at_ = sent;
  }
  ++pending_ticks_;
  TryAct(self);
}

void TaskState::OnEndOfStream(caf::event_based_actor* self, int in_edge) {
  HappensAfterReceive(in_edge >= 0 ? static_cast<const void*>(in_edges_[in_edge].producer_slots) : tick_channel());
  if (in_edge >= 0) in_edges_[in_edge].end_of_stream = true;
  ++end_of_stream_seen_;
  TryFinish(self);
}

// An actor ends once end-of-stream arrived on every input (roots: from the host), no launched
// act is outstanding and all its registers are back; then end-of-stream moves downstream.
void TaskState::TryFinish(caf::event_based_actor* self) {
  if (finished_) return;
  int needed = is_root() ? 1 : static_cast<int>(in_edges_.size());
  if (end_of_stream_seen_ < needed) return;
  if (launch_count_ > 0) return;  // asynchronous acts still hold registers
  for (const OutputSlots& out : outputs_) {
    int outstanding = 0;
    for (int acks : out.pending_acks) outstanding += acks > 0 ? 1 : 0;
    if (outstanding > 0) return;
  }
  finished_ = true;
  if (waiting_ && tracing()) {  // the last wait: for end of stream, or acks
    lane_->Wait(next_iteration_, wait_reason_, wait_start_, trace_clock::Now());
    waiting_ = false;
  }
  for (const OutputSlots& out : outputs_)
    for (const OutputSlots::Consumer& c : out.consumers) {
      Send(self, c.actor, &out, eos_atom::value, c.in_edge);
    }
  self->quit();  // the handler's end reports it (ReportFinished)
}

// Quitting from our own handler (not by an exit message) keeps the end of the actor, which
// destroys its behaviour, ordered after its handlers for TSan like every other handler.
void TaskState::OnAbandon(caf::event_based_actor* self) {
  if (finished_) return;
  finished_ = true;
  waiting_ = false;
  self->quit();  // the handler's end reports it (ReportFinished)
}

void TaskState::ReportFinished() const { core_->ActorFinished(); }

namespace {

thread_local bool in_actor_handler = false;
thread_local bool caf_logger_detached = false;

// CAF 0.17's worker loop (scheduler/worker.hpp) brackets every resume with the logger's
// per-thread actor id (CAF_PUSH_AID): two lookups in a hash map under a spinlock that every
// worker shares, even though this CAF is built with logging compiled out (CAF_LOG_LEVEL_QUIET)
// and so never writes a line that would name the id. That is ~0.1-0.2 us of each hop's resume,
// and a cache line bouncing between the workers. A worker thread whose current logger is null
// skips both lookups; handlers detach it the first time they run on a thread.
void DetachCafLoggerFromThisThread() {
  if (caf_logger_detached) return;
  caf_logger_detached = true;
  caf::logger::set_current_actor_system(nullptr);
}

// Brackets one handler: marks the thread as running a handler (InActorHandler), and orders it
// after the actor's previous handler (CAF runs them one at a time; see HappensBeforeSend).
// The handler that ends the task reports it last: the runtime may free the state from then on.
struct HandlerScope {
  explicit HandlerScope(const TaskState* state) : state(state), outer(in_actor_handler) {
    HappensAfterReceive(state);
    was_finished = state->finished();
    DetachCafLoggerFromThisThread();
    in_actor_handler = true;
  }
  ~HandlerScope() {
    in_actor_handler = outer;
    const bool ended = !was_finished && state->finished();  // read before the release
    HappensBeforeSend(state);
    if (ended) state->ReportFinished();
  }
  const TaskState* state;
  const bool outer;
  bool was_finished = false;
};

// A behaviour's closures (which hold `self` and `state`) are written on the worker that
// initializes the actor and read by whichever worker runs a handler; CAF publishes them
// internally. Handlers acquire this one address before touching their closure, and each
// behaviour releases it once built: startup writes only, so later races stay visible.
char behaviors_published;

}  // namespace

bool InActorHandler() { return in_actor_handler; }

ScopedActorHandler::ScopedActorHandler() : outer_(in_actor_handler) { in_actor_handler = true; }
ScopedActorHandler::~ScopedActorHandler() { in_actor_handler = outer_; }

// Arguments are taken by reference and copied by MessageArgs: they live in CAF's message, whose
// publication TSan cannot see (see HappensBeforeSend).
caf::behavior TaskActor(caf::event_based_actor* self, TaskState* state) {
  caf::behavior behavior{
      [=](ready_atom, const int& in_edge, const int& reg, const int64_t& iteration, const bool& failed,
          const int64_t& sent) {
        HappensAfterReceive(&behaviors_published);
        HandlerScope scope(state);
        auto [e, r, i, f, t] = MessageArgs(in_edge, reg, iteration, failed, sent);
        state->OnReady(self, e, r, i, f, t);
      },
      [=](ack_atom, const int& output, const int& reg, const int64_t& sent) {
        HappensAfterReceive(&behaviors_published);
        HandlerScope scope(state);
        auto [o, r, t] = MessageArgs(output, reg, sent);
        state->OnAck(self, o, r, t);
      },
      [=](fill_atom, const int& reg, const int64_t& iteration, const int64_t& sent) {
        HappensAfterReceive(&behaviors_published);
        HandlerScope scope(state);
        auto [r, i, t] = MessageArgs(reg, iteration, sent);
        state->OnFill(self, r, i, t);
      },
      [=](tick_atom, const int64_t& iteration, const int64_t& sent) {
        HappensAfterReceive(&behaviors_published);
        HandlerScope scope(state);
        auto [i, t] = MessageArgs(iteration, sent);
        state->OnTick(self, i, t);
      },
      [=](complete_atom, const int& slot, const int64_t& launch) {
        HappensAfterReceive(&behaviors_published);
        HandlerScope scope(state);
        auto [k, l] = MessageArgs(slot, launch);
        state->OnComplete(self, k, l);
      },
      [=](abandon_atom) {
        HappensAfterReceive(&behaviors_published);
        HandlerScope scope(state);
        state->OnAbandon(self);
      },
      [=](eos_atom, const int& in_edge) {
        HappensAfterReceive(&behaviors_published);
        HandlerScope scope(state);
        auto [e] = MessageArgs(in_edge);
        state->OnEndOfStream(self, e);
      },
  };
  HappensBeforeSend(&behaviors_published);
  return behavior;
}

// ---- KernelCompletion (kernel.h) ----

namespace {

// Completes `launch` of `slot` (under its lock): refused unless that launch is armed; sent to
// the actor unless the runtime is gone.
Status CompleteLocked(runtime_internal::CompletionSlot& slot, int64_t launch, int64_t iteration, Status status) {
  // Named only in the refusals below: a completion builds no string.
  auto act = [&] { return slot.where + ", iteration " + std::to_string(iteration); };
  if (slot.launch != launch || !slot.armed) {
    Status refused = FailedPrecondition("the completion of " + act() +
                                        " was called more than once (it must be called exactly once); ignored");
    std::cerr << "actorflow: " << refused.message() << std::endl;
    return refused;
  }
  slot.armed = false;
  if (!slot.actor) return FailedPrecondition("the completion of " + act() + " came after its runtime shut down; ignored");
  slot.status = std::move(status);
  // Under the lock: the runtime unbinds the actor (under the same lock) before it goes.
  caf::anon_send(slot.actor, complete_atom::value, slot.index, launch);
  return Status::Ok();
}

}  // namespace

KernelCompletion::KernelCompletion(std::shared_ptr<runtime_internal::CompletionSlot> slot, int64_t launch,
                                   int64_t iteration)
    : slot_(std::move(slot)), launch_(launch), iteration_(iteration) {
  std::lock_guard<std::mutex> lock(slot_->mu);
  if (slot_->launch == launch_) ++slot_->holders;
}

KernelCompletion::KernelCompletion(const KernelCompletion& other)
    : slot_(other.slot_), launch_(other.launch_), iteration_(other.iteration_) {
  if (slot_ == nullptr) return;
  std::lock_guard<std::mutex> lock(slot_->mu);
  if (slot_->launch == launch_) ++slot_->holders;
}

KernelCompletion::KernelCompletion(KernelCompletion&& other) noexcept
    : slot_(std::move(other.slot_)), launch_(other.launch_), iteration_(other.iteration_) {
  other.slot_ = nullptr;
}

KernelCompletion& KernelCompletion::operator=(KernelCompletion other) noexcept {
  std::swap(slot_, other.slot_);
  std::swap(launch_, other.launch_);
  std::swap(iteration_, other.iteration_);
  return *this;  // `other` releases what this held
}

KernelCompletion::~KernelCompletion() { Release(); }

// The last copy of an armed launch going away completes it with an error: the act would
// otherwise hold its registers, and its iteration, forever.
void KernelCompletion::Release() {
  if (slot_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(slot_->mu);
    if (slot_->launch == launch_ && slot_->holders > 0 && --slot_->holders == 0 && slot_->armed)
      CompleteLocked(*slot_, launch_, iteration_,
                     Internal("its completion handle was destroyed without being called"));
  }
  slot_ = nullptr;
}

Status KernelCompletion::Complete(Status status) {
  if (slot_ == nullptr)
    return FailedPrecondition(
        "Complete on an empty KernelCompletion (only asynchronous tasks get one from TakeCompletion)");
  std::lock_guard<std::mutex> lock(slot_->mu);
  return CompleteLocked(*slot_, launch_, iteration_, std::move(status));
}

KernelCompletion KernelContext::TakeCompletion() {
  if (completion_slot == nullptr) {
    completion_refused = true;
    return KernelCompletion();
  }
  if (!completion_taken) {
    std::lock_guard<std::mutex> lock((*completion_slot)->mu);
    (*completion_slot)->armed = true;
  }
  completion_taken = true;
  return KernelCompletion(*completion_slot, completion_launch, iteration);
}

}  // namespace actorflow

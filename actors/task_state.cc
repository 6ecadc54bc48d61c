#include "actors/task_state.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

namespace actorflow {

void TaskState::FinishSetup() {
  input_views_.resize(data_inputs_.size());
  for (size_t i = 0; i < data_inputs_.size(); ++i) {
    const DataInput& d = data_inputs_[i];
    input_views_[i].desc = d.desc;
    if (d.in_edge < 0) input_views_[i].data = d.constant->blob(0, d.blob_index);
  }
  output_views_.clear();
  for (const OutputSlots& out : outputs_)
    for (const TensorDesc& desc : out.blob_descs) output_views_.push_back(TensorView{nullptr, desc});
  chosen_registers_.assign(outputs_.size(), -1);
}

bool TaskState::inputs_ready() const {
  for (const InputSlots& in : in_edges_)
    if (!in.ready()) return false;
  // Roots (variables, input-less kernels) act once per iteration the host started.
  if (is_root() && task_.kind() != plan::SOURCE && pending_ticks_ == 0) return false;
  return true;
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
  // A source waits for the host, never for its own registers (the host takes those).
  WaitReason reason = task_.kind() != plan::SOURCE && inputs_ready() ? WaitReason::kOutputRegistersFull
                                                                      : WaitReason::kInputNotReady;
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
  while (inputs_ready() && outputs_free()) {
    Act(self);
    acted = true;
  }
  NoteIdle(acted);
}

// One act: take the head register of every input and a free register of every output, run
// the kernel (or deliver, for sinks), announce the outputs, ack the inputs.
void TaskState::Act(caf::event_based_actor* self) {
  const bool trace = tracing();
  const int64_t start = trace ? trace_clock::Now() : 0;
  int64_t iteration = next_iteration_;
  bool failed = false;
  if (!in_edges_.empty()) {
    iteration = in_edges_[0].front().iteration;
    for (const InputSlots& in : in_edges_) failed = failed || in.front().failed;
  } else {
    iteration = next_tick_iteration_++;
    --pending_ticks_;
  }
  for (size_t i = 0; i < data_inputs_.size(); ++i) {
    const DataInput& d = data_inputs_[i];
    if (d.in_edge < 0) continue;  // a read-only variable: the view never changes
    const InputSlots& in = in_edges_[d.in_edge];
    input_views_[i].data = in.producer_slots->blob(in.front().register_index, d.blob_index);
  }
  size_t v = 0;
  for (size_t o = 0; o < outputs_.size(); ++o) {
    OutputSlots& out = outputs_[o];
    AF_CHECK(out.has_free()) << "act of '" << task_.name() << "' without a free output register";
    int reg = out.free_registers.back();
    out.free_registers.pop_back();
    chosen_registers_[o] = reg;
    for (size_t b = 0; b < out.blob_descs.size(); ++b) output_views_[v++].data = out.blob(reg, static_cast<int>(b));
  }

  if (!failed) {
    Status status;
    switch (task_.kind()) {
      case plan::COMPUTE: {
        KernelContext ctx;
        ctx.inputs = &input_views_;
        ctx.outputs = &output_views_;
        ctx.iteration = iteration;
        // An exception fails the iteration like an error status (it must not reach CAF, which
        // would end the actor and leave the iteration unfinished).
        try {
          status = kernel_(ctx);
        } catch (const std::exception& e) {
          status = Internal(std::string("kernel threw an exception: ") + e.what());
        } catch (...) {
          status = Internal("kernel threw an exception of unknown type");
        }
        break;
      }
      case plan::SINK:
        if (task_.sink_name().empty()) {
          const std::vector<TensorView>* dst = core_->CallerOutputs(iteration);
          for (size_t i = 0; dst != nullptr && i < input_views_.size() && i < dst->size(); ++i)
            std::memcpy((*dst)[i].data, input_views_[i].data, input_views_[i].byte_size());
        } else {
          status = core_->NamedSink(task_.sink_name(), iteration, input_views_);
        }
        break;
      default:  // VARIABLE: the register already holds the state; nothing to compute.
        break;
    }
    if (!status.ok()) {
      failed = true;
      std::string where = "op '" + task_.name() + "'";
      if (!task_.op_type().empty()) where += " (" + task_.op_type() + ")";
      if (!task_.source_location().empty()) where += " at " + task_.source_location();
      core_->RecordError(iteration, status.WithContext(where + ", iteration " + std::to_string(iteration)));
    }
  }
  if (trace) RecordAct(iteration, start, ActionableSince());
  next_iteration_ = iteration + 1;

  Emit(self, chosen_registers_, iteration, failed);
  for (InputSlots& in : in_edges_) {
    const int reg = in.front().register_index;
    Send(self, in.producer, in.producer_slots->channel(reg), ack_atom::value, in.producer_output, reg, last_act_end_);
    in.pop();
  }
  if (task_.kind() == plan::SINK) core_->SinkDelivered(iteration);
}

// The trace clock when the messages this act consumes had all been sent: the head register of
// every input, the output register freed last, a root's tick.
int64_t TaskState::ActionableSince() const {
  int64_t at = std::max(outputs_freed_at_, is_root() ? tick_sent_at_ : 0);
  for (const InputSlots& in : in_edges_) at = std::max(at, in.front().sent);
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

void TaskState::Emit(caf::event_based_actor* self, const std::vector<int>& regs, int64_t iteration, bool failed) {
  for (size_t o = 0; o < outputs_.size(); ++o) {
    OutputSlots& out = outputs_[o];
    int reg = regs[o];
    if (out.consumers.empty()) {  // nobody reads it: free again at once
      if (task_.kind() == plan::SOURCE)
        core_->ReleaseSourceRegister(index_, reg);  // sources' pools belong to the host side
      else
        out.free_registers.push_back(reg);
      continue;
    }
    out.pending_acks[reg] = static_cast<int>(out.consumers.size());
    for (const OutputSlots::Consumer& c : out.consumers) {
      Send(self, c.actor, out.channel(reg), ready_atom::value, c.in_edge, reg, iteration, failed, last_act_end_);
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
  AF_CHECK_GT(out.pending_acks[reg], 0) << "ack of register " << reg << " of '" << task_.name() << "' nobody holds";
  if (--out.pending_acks[reg] > 0) return;
  if (task_.kind() == plan::SOURCE) {
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
  Emit(self, chosen_registers_, iteration, false);
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

// An actor ends once end-of-stream arrived on every input (roots: from the host) and all its
// registers are back; then end-of-stream moves downstream.
void TaskState::TryFinish(caf::event_based_actor* self) {
  if (finished_) return;
  int needed = is_root() ? 1 : static_cast<int>(in_edges_.size());
  if (end_of_stream_seen_ < needed) return;
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
  core_->ActorFinished();
  self->quit();
}

namespace {

thread_local bool in_actor_handler = false;

// Brackets one handler: marks the thread as running a handler (InActorHandler), and orders it
// after the actor's previous handler (CAF runs them one at a time; see HappensBeforeSend).
struct HandlerScope {
  explicit HandlerScope(const TaskState* state) : state(state), outer(in_actor_handler) {
    HappensAfterReceive(state);
    in_actor_handler = true;
  }
  ~HandlerScope() {
    in_actor_handler = outer;
    HappensBeforeSend(state);
  }
  const TaskState* state;
  const bool outer;
};

// A behaviour's closures (which hold `self` and `state`) are written on the worker that
// initializes the actor and read by whichever worker runs a handler; CAF publishes them
// internally. Handlers acquire this one address before touching their closure, and each
// behaviour releases it once built: startup writes only, so later races stay visible.
char behaviors_published;

}  // namespace

bool InActorHandler() { return in_actor_handler; }

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

}  // namespace actorflow

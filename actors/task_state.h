// Internal to the runtime: the state one actor owns, and the slot policies acting is built from.
// Owning actor only: every method here runs on the task's CAF actor, one message at a time;
// the host thread only touches the pools behind Runtime::Impl's mutex (sources).
#pragma once

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "actors/check.h"
#include "actors/kernel.h"
#include "actors/memory.h"
#include "actors/task_states.h"
#include "actors/tensor.h"
#include "actors/trace.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {

using ready_atom = caf::atom_constant<caf::atom("ready")>;
using ack_atom = caf::atom_constant<caf::atom("ack")>;
using fill_atom = caf::atom_constant<caf::atom("fill")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using eos_atom = caf::atom_constant<caf::atom("eos")>;
using complete_atom = caf::atom_constant<caf::atom("complete")>;
using abandon_atom = caf::atom_constant<caf::atom("abandon")>;

// True while this thread runs an actor's handler: kernels, sink handlers and completions all
// run inside one, and the runtime's blocking calls (Push, Run, Drain) must not wait there.
bool InActorHandler();
// Marks this thread as running a handler for its lifetime (the inline run's kernels and
// completion, actors/inline_run.h): Push, Run and Drain then refuse as they do on an actor.
class ScopedActorHandler {
 public:
  ScopedActorHandler();
  ~ScopedActorHandler();
  ScopedActorHandler(const ScopedActorHandler&) = delete;
  ScopedActorHandler& operator=(const ScopedActorHandler&) = delete;

 private:
  const bool outer_;
};

// Calls a synchronous kernel: an exception fails the act like an error status (it must not
// reach CAF, which would end the actor and leave the iteration unfinished), and so does taking
// a completion handle.
Status CallKernel(const KernelFn& kernel, KernelContext& ctx);

class RuntimeCore;  // Runtime::Impl's face towards actors (completions, errors, sources)

// ThreadSanitizer cannot see the happens-before that CAF's mailboxes provide (Debian's libcaf
// is not built with TSan). We state the edges the protocol relies on, each on its own channel,
// so that an access the protocol does not order stays visible as a race:
//  - a register slot (OutputSlots::channel(reg)): a producer releases it when it announces the
//    register (ready, fill), a consumer acquires it on receipt; the consumer releases it when it
//    acks, the producer acquires it on the ack. Data in one register is thus ordered only by
//    that register's own handover, never by traffic about other registers;
//  - an input stream's end (the producer's OutputSlots), a root's ticks (TaskState::
//    tick_channel);
//  - one actor's own handlers (its TaskState): CAF runs them one at a time, maybe on different
//    workers.
// The arguments of a message are published by CAF too; their reads are excluded from checking
// (MessageArgs) and nothing else is. No-ops in other builds.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
inline void HappensBeforeSend(const void* channel) { __tsan_release(const_cast<void*>(channel)); }
inline void HappensAfterReceive(const void* channel) { __tsan_acquire(const_cast<void*>(channel)); }
// Copies a message's arguments out of CAF's storage, unchecked (CAF's mailbox orders them).
template <typename... Ts>
std::tuple<Ts...> MessageArgs(const Ts&... args) {
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  std::tuple<Ts...> copy(args...);
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  return copy;
}
#else
inline void HappensBeforeSend(const void*) {}
inline void HappensAfterReceive(const void*) {}
template <typename... Ts>
std::tuple<Ts...> MessageArgs(const Ts&... args) {
  return std::tuple<Ts...>(args...);
}
#endif

// Sends `args` to `receiver` from `self`, or from the host when `self` is null, after releasing
// `channel` (see above): what the sender did before is ordered before the receiver's acquire of
// the same channel. Messages carry no sender: no handler replies or asks who sent, and naming
// one costs two atomic reference-count updates on the sender's control block per message
// (shared by the workers) plus a response promise built from it on receipt. From an actor the
// message still goes through its worker (`self->context()`), so a receiver it makes runnable
// is queued there as `self->send` would queue it.
template <typename... Ts>
void Send(caf::event_based_actor* self, caf::abstract_actor* receiver, const void* channel, Ts&&... args) {
  HappensBeforeSend(channel);
  if (receiver != nullptr)
    receiver->eq_impl(caf::make_message_id(), nullptr, self != nullptr ? self->context() : nullptr,
                      std::forward<Ts>(args)...);
}
// The same to an actor named by a handle.
template <typename... Ts>
void Send(caf::event_based_actor* self, const caf::actor& receiver, const void* channel, Ts&&... args) {
  Send(self, caf::actor_cast<caf::abstract_actor*>(receiver), channel, std::forward<Ts>(args)...);
}

// The arrays a task's state sizes at instantiation come from its runtime's arena
// (Runtime::Impl): a plan of thousands of tasks then makes a few large allocations instead of
// a dozen small ones per task, in instantiation order (the wiring and the first acts walk them
// in that order), and ending the runtime frees them at once. The arena is neither thread-safe
// nor able to free: none of these arrays may grow once the actors run (a stack such as
// free_registers stays within the capacity reserved at instantiation).
template <typename T>
using SetupVector = std::pmr::vector<T>;

// Pre-allocated registers of one output of a task, and who must ack each before reuse.
struct OutputSlots {
  explicit OutputSlots(std::pmr::memory_resource* arena)
      : blob_descs(arena), blob_offsets(arena), register_memory(arena), pending_acks(arena), free_registers(arena),
        consumers(arena) {}
  int register_num = 0;
  SetupVector<TensorDesc> blob_descs;
  SetupVector<size_t> blob_offsets;    // into each register's memory
  SetupVector<char*> register_memory;  // one block per register (or the variable's buffer)
  MemoryPlace place;                   // where the blocks live (memory case, allocator)
  SetupVector<int> pending_acks;       // per register
  // Stack of free register indices (actor-owned; sources: host-owned), register_num reserved.
  SetupVector<int> free_registers;
  // Registers shared with other tasks' (RegisterDesc.reserved_byte_size, slice_of) are used in
  // strict rotation 0, 1, ..., so every task of the group writes iteration i into block
  // i mod register_num: registers come back in iteration order (every consumer acks in order),
  // so waiting for the next one in rotation never waits longer than for any free one.
  bool rotating = false;
  int next_rotation = 0;
  struct Consumer {
    int task_index;  // the consumer's index in the plan
    int in_edge;     // index of the matching InputSlots in the consumer
    caf::abstract_actor* actor;  // not owning (see InputSlots::producer)
  };
  SetupVector<Consumer> consumers;

  void* blob(int reg, int b) const { return register_memory[reg] + blob_offsets[b]; }
  // TSan channel of one register's handover (ready/fill and ack); stable after instantiation.
  const void* channel(int reg) const { return &pending_acks[reg]; }
  bool has_free() const {
    if (!rotating) return !free_registers.empty();
    return std::find(free_registers.begin(), free_registers.end(), next_rotation) != free_registers.end();
  }
  // A free register for the next act (has_free()): the last freed, or the next in rotation.
  int take_free() {
    if (!rotating) {
      const int reg = free_registers.back();
      free_registers.pop_back();
      return reg;
    }
    const int reg = next_rotation;
    free_registers.erase(std::find(free_registers.begin(), free_registers.end(), reg));
    next_rotation = reg + 1 == register_num ? 0 : reg + 1;
    return reg;
  }
  bool all_free() const { return static_cast<int>(free_registers.size()) == register_num; }
};

// One producer's register stream as seen by a consumer: a FIFO of ready registers, in
// iteration order (CAF keeps per-sender order). Capacity never exceeds the producer's
// register_num, which is the backpressure. The first `taken` entries belong to acts that
// started and have not finished (asynchronous acts hold their inputs until completion); an act
// takes next() and the oldest act releases front().
struct InputSlots {
  explicit InputSlots(std::pmr::memory_resource* arena) : ring(arena) {}
  // Not owning: the runtime holds every actor (Runtime::Impl::actors_) until they all ended, so
  // no message is sent through these after. A handle per edge would cost two atomic updates
  // of the other task's (cold) control block per edge at instantiation and at shutdown.
  caf::abstract_actor* producer = nullptr;
  int producer_index = 0;
  int producer_output = 0;
  const OutputSlots* producer_slots = nullptr;  // layout is immutable after instantiation
  struct Ready {
    int register_index;
    int64_t iteration;
    bool failed;
    int64_t sent;  // trace clock: the producer's act end (for the trace's "worker busy" waits)
  };
  SetupVector<Ready> ring;  // fixed capacity = producer register_num
  int head = 0, size = 0, taken = 0;
  bool end_of_stream = false;

  bool ready() const { return size > taken; }
  const Ready& front() const { return ring[head]; }
  const Ready& next() const {
    int i = head + taken;  // no division on the hot path: both are below the capacity
    if (i >= static_cast<int>(ring.size())) i -= static_cast<int>(ring.size());
    return ring[i];
  }
  // The producer never has more registers in flight than it owns (its acks gate reuse).
  void push(const Ready& r) {
    AF_CHECK_LT(size, static_cast<int>(ring.size())) << "more ready registers than the producer owns";
    ring[(head + size) % ring.size()] = r;
    ++size;
  }
  void take() { ++taken; }
  void pop() {
    AF_CHECK_GT(taken, 0) << "release of an input register no act took";
    head = (head + 1) % static_cast<int>(ring.size());
    --size;
    --taken;
  }
};

// A data input of the kernel: which in-edge, which blob of its register. in_edge -1: a blob of a
// read-only variable (`constant`), read in place with no message per iteration.
// `desc`: how the kernel sees the blob (the producer's, or a view's shape over the same bytes);
// TaskState::FinishSetup moves it into the kernel's view (TaskState::input_desc from then on).
struct DataInput {
  int in_edge;
  int blob_index;
  const OutputSlots* constant = nullptr;
  TensorDesc desc;
  // An input read whole (InputDesc.whole): the in-edges of the registers sliced into its block.
  // Each act checks they deliver the same block (the group's rotation guarantees it).
  std::vector<int> slice_edges;
  // A view of part of the blob (InputDesc.part): the kernel's data starts this far into it.
  size_t byte_offset = 0;
};

// An actor kind is three policies, chosen once per task at instantiation (TaskPolicies::For)
// and switched on in the handlers; nothing on the hot path asks the task's kind again.
//  - input: where an act's iteration comes from: a ring of ready registers per in-edge
//    (kRegisterRing), the host's per-iteration tick (kTick: roots such as variables and
//    input-less kernels), or nothing (kNone: sources, which the host fills);
//  - output: who owns the free registers: the actor (kOwnPool), the host (kHostPool: sources,
//    whose registers Push takes), or the actor over external memory it did not allocate
//    (kExternal: variables);
//  - act: what acting does: nothing (kNone: variables and sources, whose register already
//    holds the data), run the kernel (kKernel), launch it and finish on its completion
//    message (kAsyncKernel), or hand the inputs to the caller or a sink handler (kDeliver).
enum class InputPolicy : uint8_t { kRegisterRing, kTick, kNone };
enum class OutputPolicy : uint8_t { kOwnPool, kHostPool, kExternal };
enum class ActPolicy : uint8_t { kNone, kKernel, kAsyncKernel, kDeliver };

struct TaskPolicies {
  InputPolicy input = InputPolicy::kNone;
  OutputPolicy output = OutputPolicy::kOwnPool;
  ActPolicy act = ActPolicy::kNone;
  // InvalidArgument for a combination the runtime has no actor for (an asynchronous sink).
  static StatusOr<TaskPolicies> For(const plan::Task& task, bool has_in_edges);
  std::string ToString() const;  // "input=ring output=own act=kernel"
};

// Kernels acting now (RuntimeOptions::lend_idle_threads), shared by a runtime's tasks.
struct ThreadLending {
  std::atomic<int> acting{0};
  int workers = 1, share = 1, budget = 1;
  // The threads an act starting now may use; Return() when it ends.
  int Borrow() {
    const int others = acting.fetch_add(1, std::memory_order_relaxed);
    const int idle = workers - 1 - others;
    return std::min(budget, share * (1 + std::max(0, idle)));
  }
  void Return() { acting.fetch_sub(1, std::memory_order_relaxed); }
};

namespace runtime_internal {
// One in-flight act of an asynchronous task, shared by the actor and the KernelCompletion
// handles of that act (kernel.h). Everything is under `mu`: handles run on any thread.
struct CompletionSlot {
  std::mutex mu;
  int64_t launch = -1;  // the act it serves (the actor's launch count)
  bool armed = false;   // the kernel took a handle and nobody completed it yet
  int holders = 0;      // live handles of `launch`
  Status status;        // what the completion said, read by the actor
  caf::actor actor;     // the owning actor; empty once the runtime shut down
  int index = 0;        // in the task's slots
  int64_t iteration = 0;
  std::string where;    // "op 'x' (type) at file:line", for error messages
  std::shared_ptr<const void> register_memory;  // keeps the registers alive while a handle exists
};
}  // namespace runtime_internal

class TaskState {
 public:
  // `name` and `source_location` (which must outlive the state): how errors name the task, the
  // plan's own or those of the job sharing the plan (PlanNames, actors/runtime.h). `arena`
  // (which must outlive the state) holds its setup arrays (SetupVector).
  TaskState(const plan::Task& task, int index, RuntimeCore* core, RuntimeObserver* observer, std::string_view name,
            std::string_view source_location, std::pmr::memory_resource* arena);

  const plan::Task& task() const { return task_; }
  std::string_view name() const { return name_; }
  int index() const { return index_; }
  bool is_root() const { return in_edges_.empty(); }
  const TaskPolicies& policies() const { return policies_; }
  // "op 'name' (type) at file:line": how errors name this task.
  // Made when asked (errors): a plan of thousands of tasks keeps no string per task for it.
  std::string where() const;

  // Instantiation (before any message flows).
  std::pmr::memory_resource* arena() const { return outputs_.get_allocator().resource(); }
  SetupVector<OutputSlots>& outputs() { return outputs_; }
  SetupVector<InputSlots>& in_edges() { return in_edges_; }
  SetupVector<DataInput>& data_inputs() { return data_inputs_; }
  // How the kernel sees data input `i` (its DataInput::desc), after FinishSetup.
  const TensorDesc& input_desc(size_t i) const { return input_views_[i].desc; }
  void set_kernel(KernelFn kernel) { kernel_ = std::move(kernel); }
  // Chooses the policies and sizes what acting reuses (views, the asynchronous launch ring).
  // `register_memory` is kept alive by outstanding completions.
  Status FinishSetup(std::shared_ptr<const void> register_memory);
  // The actor's handle, for completions (asynchronous tasks); Unbind at shutdown, after which
  // a late completion is refused instead of sent. Thread-safe.
  void BindActor(const caf::actor& actor);
  void UnbindActor();
  // "op 'x' iteration 3" for each launched act whose completion was not called. Thread-safe.
  std::vector<std::string> OutstandingCompletions() const;
  void set_trace_lane(TraceLane* lane) { lane_ = lane; }  // after the observer's OnPlan
  void set_thread_lending(ThreadLending* lending) { lending_ = lending; }  // null: none
  // A source that passes each iteration's tick on to the roots (variables, constants), so the
  // host sends one message per iteration instead of one per root.
  // Plain pointers like the edges': the runtime's handles keep the actors alive.
  void add_tick_target(caf::abstract_actor* actor, const TaskState* state) { tick_targets_.push_back({actor, state}); }
  // TSan channel of the ticks and the host's end of stream a root receives.
  const void* tick_channel() const { return &pending_ticks_; }

  // Message handlers (owning actor).
  // `sent`: the sender's trace clock when it sent the message (its last act's end; the host's
  // push), so the trace can tell waiting for a message from waiting for a worker to run on.
  void OnReady(caf::event_based_actor* self, int in_edge, int reg, int64_t iteration, bool failed, int64_t sent);
  void OnAck(caf::event_based_actor* self, int output, int reg, int64_t sent);
  void OnFill(caf::event_based_actor* self, int reg, int64_t iteration, int64_t sent);  // SOURCE, from the host
  void OnTick(caf::event_based_actor* self, int64_t iteration, int64_t sent);           // roots, from the host
  void OnEndOfStream(caf::event_based_actor* self, int in_edge);          // -1: from the host
  // An asynchronous act's completion (KernelCompletion::Complete) for launch slot `slot`.
  void OnComplete(caf::event_based_actor* self, int slot, int64_t launch);
  // A forced shutdown: end now, whatever is outstanding (its iterations were abandoned).
  void OnAbandon(caf::event_based_actor* self);
  // Whether a handler ended the task (end of stream, abandon): its actor quit. The handler
  // that did tells the runtime last thing (RuntimeCore::ActorFinished), after which the
  // runtime may free the state while CAF still ends the actor.
  bool finished() const { return finished_; }
  void ReportFinished() const;

 private:
  bool inputs_ready() const;
  bool outputs_free() const;
  int launch_capacity() const { return static_cast<int>(launches_.size()); }
  void TryAct(caf::event_based_actor* self);
  // The start of every act: the iteration, whether an input failed; inputs taken, a free
  // register of every output chosen into `registers`, the kernel's views pointed at them.
  int64_t TakeInputsAndOutputs(bool* failed, int* registers);
  void Act(caf::event_based_actor* self);
  void Launch(caf::event_based_actor* self);
  Status RunKernel(KernelContext& ctx);
  Status Deliver(int64_t iteration);
  // The end of every act: its error recorded, outputs announced, inputs acked (oldest first).
  // `sent`: the trace stamp the messages carry (the act's end; a completion's arrival).
  void FinishAct(caf::event_based_actor* self, int64_t iteration, bool failed, const Status& status,
                 const int* registers, int64_t sent);
  void RetireCompletedLaunches(caf::event_based_actor* self, int64_t sent);
  void ReturnRegister(OutputSlots& out, int reg);
  void Emit(caf::event_based_actor* self, const int* regs, int64_t iteration, bool failed, int64_t sent);
  void TryFinish(caf::event_based_actor* self);
  void NoteIdle(bool just_acted);
  void RecordAct(int64_t iteration, int64_t start, int64_t actionable);
  int64_t ActionableSince() const;
  bool tracing() const { return lane_ != nullptr && observer_->recording(); }

  const plan::Task& task_;
  std::string_view name_, source_location_;  // outlive the state (see the constructor)
  const int index_;
  RuntimeCore* const core_;
  RuntimeObserver* const observer_;
  TaskPolicies policies_;
  SetupVector<OutputSlots> outputs_;
  SetupVector<InputSlots> in_edges_;
  SetupVector<DataInput> data_inputs_;
  KernelFn kernel_;
  std::vector<TensorView> input_views_, output_views_;
  SetupVector<int> chosen_registers_;
  // Sinks: the views handed over (input_views_, or host staging for inputs the CPU cannot read,
  // copied into before delivery).
  std::vector<TensorView> delivered_views_;
  SetupVector<const MemoryPlace*> input_places_;  // where each data input's register lives
  std::vector<std::unique_ptr<char[]>> staging_;
  bool staged_ = false;
  int64_t pending_ticks_ = 0, next_tick_iteration_ = 0;
  int64_t next_iteration_ = 0;
  int end_of_stream_seen_ = 0;
  bool finished_ = false;
  struct TickTarget {
    caf::abstract_actor* actor;
    const TaskState* state;
  };
  std::vector<TickTarget> tick_targets_;
  // Asynchronous acts in flight, oldest first: a ring of launch_capacity() launches; the one
  // at ring position p uses slots_[p] and output registers launch_registers_[p * outputs + o].
  struct LaunchRecord {
    int64_t iteration = 0;
    bool failed = false;  // an input failed: the kernel did not run
    bool done = false;
    Status status;
  };
  std::vector<LaunchRecord> launches_;
  std::vector<std::shared_ptr<runtime_internal::CompletionSlot>> slots_;
  std::vector<int> launch_registers_;
  int launch_head_ = 0, launch_count_ = 0;
  int64_t launches_started_ = 0;
  // Trace (trace_clock ticks): the lane, and the wait in progress, if any.
  TraceLane* lane_ = nullptr;
  ThreadLending* lending_ = nullptr;
  bool waiting_ = false;
  WaitReason wait_reason_ = WaitReason::kInputNotReady;
  int64_t wait_start_ = 0;
  int64_t last_act_end_ = 0;
  // When the last condition for acting came true (the stamp of the message that made it so):
  // an output gained a free register; a root got its tick.
  int64_t outputs_freed_at_ = 0, tick_sent_at_ = 0;
};

// What TaskState needs from the runtime, implemented by Runtime::Impl. Thread-safe.
class RuntimeCore {
 public:
  virtual ~RuntimeCore() = default;
  virtual void ReleaseSourceRegister(int task_index, int reg) = 0;
  virtual void RecordError(int64_t iteration, const Status& status) = 0;
  virtual void SinkDelivered(int64_t iteration) = 0;
  // Main sink: the caller's buffers of an in-flight iteration.
  virtual const std::vector<TensorView>* CallerOutputs(int64_t iteration) = 0;
  virtual Status NamedSink(const std::string& name, int64_t iteration, const std::vector<TensorView>& blobs) = 0;
  // An actor's last handler is done with its state (TaskState::ReportFinished).
  virtual void ActorFinished() = 0;
};

// A task state is made in its runtime's arena, beside its setup arrays: deleting it only ends
// it (the arena frees the memory with everything else).
struct EndTaskState {
  void operator()(TaskState* state) const { state->~TaskState(); }
};

caf::behavior TaskActor(caf::event_based_actor* self, TaskState* state);

}  // namespace actorflow

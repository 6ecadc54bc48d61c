#include "actors/runtime.h"

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <map>
#include <memory_resource>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "actors/call_wait.h"
#include "actors/inline_run.h"
#include "actors/iteration_ring.h"
#include "actors/plan_dtype.h"
#include "actors/register_slices.h"
#include "actors/shared_memory_blocks.h"
#include "actors/task_ids.h"
#include "actors/task_state.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace {

constexpr size_t kAlignment = 64;

size_t AlignUp(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

MemoryCase MemoryCaseOf(const plan::RegisterDesc& reg) {
  return MemoryCase{static_cast<MemoryKind>(reg.memory_case().kind()), reg.memory_case().device_id()};
}

TensorDesc DescOf(const plan::BlobDesc& blob) {
  TensorDesc desc;
  desc.shape.assign(blob.shape().begin(), blob.shape().end());
  desc.dtype = FromProtoDType(blob.dtype());
  return desc;
}

std::atomic<int64_t> forced_shutdowns{0};

Status CalledFromActor(const char* call) {
  return FailedPrecondition(std::string("Runtime::") + call +
                            " called from a completion, sink handler or kernel (an actor thread): it could wait for "
                            "the very thread it blocks; call it from another thread");
}

// A variable no task of the plan writes: readers use its buffer in place (plan.proto read_only).
bool IsReadOnlyVariable(const plan::Task& task) { return task.kind() == plan::VARIABLE && task.read_only(); }

// Where a data input starts in its blob: a part view's offset (InputDesc.part), else 0.
size_t ByteOffset(const plan::InputDesc& input) {
  return input.part() ? static_cast<size_t>(input.byte_offset()) : 0;
}

}  // namespace

class Runtime::Impl : public RuntimeCore {
 public:
  Impl(std::shared_ptr<const plan::Plan> plan, RuntimeHooks hooks, RuntimeOptions options,
       std::shared_ptr<ActorEnvironment> environment)
      : shared_plan_(std::move(plan)),
        plan_(*shared_plan_),
        hooks_(std::move(hooks)),
        options_(options),
        environment_(std::move(environment)) {}

  ~Impl() override { Shutdown(); }

  Status Instantiate();
  StatusOr<int64_t> Push(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                         Completion done, bool may_run_inline);
  void Drain() {
    if (InActorHandler()) {
      ReportOnce(&drain_reported_, CalledFromActor("Drain").message() + "; it returned without waiting");
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    // Not while a completion runs: its record already left in_flight_, but the caller may read
    // what the completion writes as soon as Drain returns.
    drained_.wait(lock, [&] { return in_flight_.empty() && !delivering_; });
  }
  Status Shutdown();

  // RuntimeCore
  void ReleaseSourceRegister(int task_index, int reg) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      states_[task_index]->outputs()[0].free_registers.push_back(reg);
    }
    source_free_.notify_all();
  }
  void RecordError(int64_t iteration, const Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    Iteration* record = in_flight_.Find(iteration);
    if (record != nullptr && record->status.ok()) record->status = status;
  }
  const std::vector<TensorView>* CallerOutputs(int64_t iteration) override {
    std::lock_guard<std::mutex> lock(mu_);
    Iteration* record = in_flight_.Find(iteration);
    return record == nullptr ? nullptr : &record->outputs;  // address-stable until completion
  }
  Status NamedSink(const std::string& name, int64_t iteration, const std::vector<TensorView>& blobs) override {
    if (!hooks_.sink_handler) return FailedPrecondition("no sink handler for sink '" + name + "'");
    try {
      return hooks_.sink_handler(name, iteration, blobs);
    } catch (const std::exception& e) {
      return Internal("sink handler of '" + name + "' threw an exception: " + e.what());
    } catch (...) {
      return Internal("sink handler of '" + name + "' threw an exception of unknown type");
    }
  }
  void SinkDelivered(int64_t iteration) override;
  void ActorFinished() override {
    std::lock_guard<std::mutex> lock(mu_);
    // Shutdown waits for the last one only: waking it for each of thousands of actors would
    // cost a context switch and a round on mu_ against the workers per actor.
    if (++finished_actors_ == static_cast<int>(states_.size())) finished_cv_.notify_all();
  }

  std::vector<TensorDesc> input_descs, output_descs;
  std::string inline_refusal = "RuntimeOptions::run_inline is off";

  // How errors name the job and task `i` (RuntimeOptions::names, else the plan's own).
  const std::string& JobName() const { return options_.names ? options_.names->job_name : plan_.job_name(); }
  std::string_view TaskName(int i) const {
    return options_.names ? options_.names->task_names[i] : std::string_view(plan_.tasks(i).name());
  }
  std::string_view SourceLocation(int i) const {
    return options_.names ? options_.names->source_locations[i] : std::string_view(plan_.tasks(i).source_location());
  }

 private:
  // Runs iteration `iteration`, already in flight, on this thread (inline_); push_lock held.
  void RunInline(std::unique_lock<std::mutex>& push_lock, int64_t iteration, const std::vector<TensorView>& inputs,
                 const std::vector<TensorView>& outputs);

  // Prints `message` on stderr the first time `*reported` is false (per runtime).
  static void ReportOnce(std::atomic<bool>* reported, const std::string& message) {
    if (!reported->exchange(true)) std::cerr << "actorflow: " << message << std::endl;
  }

  struct Iteration {
    std::vector<TensorView> outputs;
    Completion done;
    int sinks_remaining = 0;
    bool finished = false;
    Status status;
  };

  const std::shared_ptr<const plan::Plan> shared_plan_;  // kept alive: the task states point into it
  const plan::Plan& plan_;
  RuntimeHooks hooks_;
  RuntimeOptions options_;
  std::shared_ptr<ActorEnvironment> environment_;  // null once shut down
  // The task states and their setup arrays (TaskStatePtr, SetupVector: actors/task_state.h);
  // outlives the states. Made at instantiation, sized for the plan.
  std::unique_ptr<std::pmr::monotonic_buffer_resource> arena_;
  TaskStates states_;
  std::vector<caf::actor> actors_;
  // Every register's memory; outstanding completions of asynchronous acts share it.
  std::shared_ptr<RegisterMemory> register_memory_ = std::make_shared<RegisterMemory>();
  ThreadLending lending_;  // RuntimeOptions::lend_idle_threads
  std::unique_ptr<InlineRun> inline_;  // RuntimeOptions::run_inline, for eligible plans
  std::vector<int> sources_;  // task index by feed_index
  std::vector<int> roots_;    // non-source tasks without inputs: ticked by the first source (or the host)
  int num_sinks_ = 0;

  std::mutex push_mu_;  // serializes Push so iterations enter the sources in order
  std::vector<int> push_registers_;  // Push's choice of source registers (under push_mu_)
  TraceLane* host_lane_ = nullptr;  // the observer's host lane (written under push_mu_)
  std::mutex mu_;       // guards everything below and the sources' free pools
  std::condition_variable source_free_, drained_, finished_cv_;
  IterationRing<Iteration> in_flight_;  // no allocation per iteration (slots and buffers reused)
  int64_t next_iteration_ = 0;
  bool delivering_ = false;
  std::atomic<bool> shut_down_{false};  // written under mu_; Push peeks at it before validating
  int finished_actors_ = 0;
  bool forced_shutdown_ = false;  // in-flight iterations were abandoned (under mu_)
  Status shutdown_status_;  // Shutdown's result, kept for repeated calls
  std::atomic<bool> drain_reported_{false}, completion_threw_reported_{false};
};

Status Runtime::Impl::Instantiate() {
  const int n = plan_.tasks_size();
  TaskIds task_ids;
  AF_RETURN_IF_ERROR(task_ids.Build(n, [&](int i) { return plan_.tasks(i).id(); }));
  states_.reserve(static_cast<size_t>(n));
  actors_.reserve(static_cast<size_t>(n));
  // A task's state and its arrays take ~1 KB in a typical plan (pages not written to cost no
  // memory); more comes in larger chunks.
  arena_ = std::make_unique<std::pmr::monotonic_buffer_resource>(std::max<size_t>(4096, (sizeof(TaskState) + 512) * n));
  // What the wiring reads of every producer, read once here into flat arrays: the producer's
  // plan task and TaskState are cold by then in a plan of thousands of tasks.
  std::vector<uint8_t> read_only(static_cast<size_t>(n), 0);  // IsReadOnlyVariable
  std::vector<OutputSlots*> outputs_of(static_cast<size_t>(n), nullptr);
  std::vector<int> output_count(static_cast<size_t>(n), 0);
  bool any_slices = false;  // a register reserving a block or sliced into one (or a bad reservation)
  int main_sinks = 0;
  const AllocatorRegistry& allocators =
      options_.allocators != nullptr ? *options_.allocators : AllocatorRegistry::Global();
  AF_ASSIGN_OR_RETURN(const std::vector<char*> shared_blocks,
                      AllocateSharedBlocks(plan_, allocators, *register_memory_, kAlignment));
  for (int i = 0; i < n; ++i) {
    const plan::Task& task = plan_.tasks(i);
    TaskStatePtr state(new (arena_->allocate(sizeof(TaskState), alignof(TaskState)))
                           TaskState(task, i, this, options_.observer, TaskName(i), SourceLocation(i), arena_.get()));
    state->outputs().reserve(static_cast<size_t>(task.registers_size()));
    for (const plan::RegisterDesc& reg : task.registers()) {
      OutputSlots out(arena_.get());
      out.blob_offsets.reserve(static_cast<size_t>(reg.blobs_size()));
      out.blob_descs.reserve(static_cast<size_t>(reg.blobs_size()));
      const MemoryCase memory_case = MemoryCaseOf(reg);
      auto allocator = allocators.Find(memory_case);
      if (!allocator.ok())
        return InvalidArgument("plan: task '" + task.name() + "' register '" + reg.name() + "' lives in " +
                               memory_case.ToString() + " memory, but " + allocator.status().message());
      out.place = MemoryPlace{memory_case, allocator.value().get()};
      out.register_num = task.kind() == plan::VARIABLE ? 1 : std::max(1, reg.register_num());
      size_t bytes = 0;
      for (const plan::BlobDesc& blob : reg.blobs()) {
        TensorDesc desc = DescOf(blob);
        if (!ValidateTensorDesc(desc, "").ok())  // the message names the blob only when it fails
          return ValidateTensorDesc(desc, "plan: task '" + task.name() + "' blob '" + blob.name() + "'");
        if (desc.byte_size() != static_cast<size_t>(blob.byte_size()) && blob.byte_size() != 0)
          return InvalidArgument("plan: task '" + task.name() + "' blob '" + blob.name() + "' declares " +
                                 std::to_string(blob.byte_size()) + " bytes but " + desc.ToString() + " needs " +
                                 std::to_string(desc.byte_size()));
        out.blob_offsets.push_back(bytes);
        bytes += AlignUp(desc.byte_size());
        out.blob_descs.push_back(std::move(desc));
      }
      // The bytes the blobs use (`bytes` also pads the last one to the alignment).
      const size_t used = out.blob_descs.empty() ? 0 : out.blob_offsets.back() + out.blob_descs.back().byte_size();
      if (reg.reserved_byte_size() > 0 && static_cast<size_t>(reg.reserved_byte_size()) < used)
        return InvalidArgument("plan: task '" + task.name() + "' register '" + reg.name() + "' reserves " +
                               std::to_string(reg.reserved_byte_size()) + " bytes, less than its own blobs' " +
                               std::to_string(used));
      // A block shared by several tasks' registers (slices; RegisterDesc.slice_of): its
      // registers rotate, so one iteration's slices meet in one block.
      out.rotating = reg.reserved_byte_size() > 0 || reg.has_slice_of();
      any_slices |= out.rotating || reg.reserved_byte_size() < 0;
      const size_t block_bytes = std::max(bytes, static_cast<size_t>(reg.reserved_byte_size()));
      out.register_memory.reserve(static_cast<size_t>(out.register_num));
      out.free_registers.reserve(static_cast<size_t>(out.register_num));  // never grows past it
      for (int r = 0; r < out.register_num; ++r) {
        char* memory = nullptr;
        if (reg.has_slice_of()) {
          // Placed into the owner's block below, once every task's registers exist.
        } else if (reg.has_shared_memory()) {
          AF_ASSIGN_OR_RETURN(memory, SharedRegisterMemory(plan_, task, reg, bytes, shared_blocks, kAlignment));
        } else if (task.kind() == plan::VARIABLE) {
          if (!hooks_.variable_buffer) return InvalidArgument("plan has variable '" + task.name() + "' but no variable_buffer hook");
          AF_ASSIGN_OR_RETURN(void* buffer, hooks_.variable_buffer(task));
          memory = static_cast<char*>(buffer);
        } else if (block_bytes > 0) {
          auto block = register_memory_->Allocate(allocator.value(), memory_case, block_bytes, kAlignment);
          if (!block.ok())
            return block.status().WithContext("allocating register " + std::to_string(r) + " of task '" + std::string(TaskName(i)) + "'");
          memory = static_cast<char*>(block.value());
        }
        out.register_memory.push_back(memory);
        out.free_registers.push_back(out.register_num - 1 - r);
      }
      out.pending_acks.assign(out.register_num, 0);
      state->outputs().push_back(std::move(out));
    }
    switch (task.kind()) {
      case plan::SOURCE:
        if (task.registers_size() != 1 || task.registers(0).blobs_size() != 1)
          return InvalidArgument("plan: source '" + task.name() + "' must produce one register with one blob");
        if (task.feed_index() >= static_cast<int>(sources_.size())) sources_.resize(task.feed_index() + 1, -1);
        sources_[task.feed_index()] = i;
        break;
      case plan::COMPUTE: {
        if (!hooks_.make_kernel) return InvalidArgument("plan has compute tasks but no make_kernel hook");
        auto kernel = hooks_.make_kernel(task);
        if (!kernel.ok())
          return kernel.status().WithContext("building kernel of op '" + std::string(TaskName(i)) + "' (" + task.op_type() + ")" +
                                             (SourceLocation(i).empty() ? "" : " at " + std::string(SourceLocation(i))));
        state->set_kernel(std::move(kernel).value());
        break;
      }
      case plan::SINK:
        ++num_sinks_;
        if (task.sink_name().empty()) ++main_sinks;
        break;
      case plan::VARIABLE:
        if (task.registers_size() != 1) return InvalidArgument("plan: variable '" + task.name() + "' must have one register");
        break;
      default:
        return InvalidArgument("plan: task '" + task.name() + "' has no kind");
    }
    read_only[i] = IsReadOnlyVariable(task) ? 1 : 0;
    outputs_of[i] = state->outputs().data();
    output_count[i] = static_cast<int>(state->outputs().size());
    states_.push_back(std::move(state));
  }
  if (main_sinks != 1)
    return InvalidArgument("plan must have exactly one main sink (sink_name \"\"), found " + std::to_string(main_sinks));
  for (size_t k = 0; k < sources_.size(); ++k)
    if (sources_[k] < 0) return InvalidArgument("plan: no source for feed " + std::to_string(k));
  SliceGroups slice_groups;  // checked and placed only where a plan has slices
  if (any_slices) {
    AF_ASSIGN_OR_RETURN(slice_groups, PlaceRegisterSlices(plan_, task_ids, states_));
  }

  // Wire inputs: one in-edge per (producer, register); data inputs refer to blobs of it. Each
  // task's setup follows its wiring while its state is in cache.
  for (int i = 0; i < n; ++i) {
    const plan::Task& task = plan_.tasks(i);
    TaskState& state = *states_[i];
    // The in-edge reading (producer, register): found by a scan where the task has a few inputs
    // (most read one to three registers), by a map kept as edges are added otherwise; decided
    // once per task (in-edges never outnumber inputs). Whole inputs need the map in any case.
    constexpr int kScan = 8;
    const bool by_map = task.inputs_size() > kScan;
    std::map<std::pair<int, int>, int> edge_of;
    auto find_edge = [&](const std::pair<int, int>& key) {
      if (by_map) {
        auto found = edge_of.find(key);
        return found == edge_of.end() ? -1 : found->second;
      }
      for (size_t e = 0; e < state.in_edges().size(); ++e)
        if (state.in_edges()[e].producer_index == key.first && state.in_edges()[e].producer_output == key.second)
          return static_cast<int>(e);
      return -1;
    };
    std::vector<std::pair<size_t, std::pair<int, int>>> whole_inputs;  // (data input, producer register)
    state.data_inputs().reserve(static_cast<size_t>(task.inputs_size()));
    state.in_edges().reserve(static_cast<size_t>(task.inputs_size()));  // at most one per input
    for (const plan::InputDesc& input : task.inputs()) {
      const int p = task_ids.Find(input.producer_task_id());
      if (p < 0)
        return InvalidArgument("plan: task '" + task.name() + "' reads unknown task " + std::to_string(input.producer_task_id()));
      const int producer_register = input.producer_register();
      if (producer_register < 0 || producer_register >= output_count[p])
        return InvalidArgument("plan: task '" + task.name() + "' reads register " + std::to_string(producer_register) +
                               " of '" + plan_.tasks(p).name() + "', which has " + std::to_string(output_count[p]));
      OutputSlots& producer_slots = outputs_of[p][producer_register];
      auto producer_name = [&] { return plan_.tasks(p).name(); };  // errors only
      // How the kernel sees a data input: the blob, or a view of it (same bytes, other shape).
      TensorDesc desc;
      if (!input.control()) {
        if (input.blob_index() < 0 || input.blob_index() >= static_cast<int>(producer_slots.blob_descs.size()))
          return InvalidArgument("plan: task '" + task.name() + "' reads blob " + std::to_string(input.blob_index()) +
                                 " of a register of '" + producer_name() + "'");
        desc = producer_slots.blob_descs[input.blob_index()];
        if (input.whole()) {
          const int64_t reserved = plan_.tasks(p).registers(producer_register).reserved_byte_size();
          if (reserved <= 0 || !input.has_view() || input.blob_index() != 0)
            return InvalidArgument("plan: task '" + task.name() + "' reads register " + std::to_string(producer_register) +
                                   " of '" + producer_name() +
                                   "' whole, which needs a register reserving a block and a view of blob 0");
          TensorDesc view{Shape(input.view_shape().begin(), input.view_shape().end()), desc.dtype};
          if (static_cast<int64_t>(view.byte_size()) != reserved)
            return InvalidArgument("plan: task '" + task.name() + "' views the block of '" + producer_name() +
                                   "' (" + std::to_string(reserved) + " bytes) as " + view.ToString());
          desc = view;
        } else if (input.part()) {
          TensorDesc view{Shape(input.view_shape().begin(), input.view_shape().end()), desc.dtype};
          const int64_t element = static_cast<int64_t>(DTypeSize(desc.dtype));
          if (!input.has_view() || input.byte_offset() < 0 || input.byte_offset() % element != 0 ||
              input.byte_offset() + static_cast<int64_t>(view.byte_size()) > static_cast<int64_t>(desc.byte_size()))
            return InvalidArgument("plan: task '" + task.name() + "' views part of " + desc.ToString() + " of '" +
                                   producer_name() + "' as " + view.ToString() + " at byte " +
                                   std::to_string(input.byte_offset()) +
                                   ", which needs a view inside the blob at a multiple of the element size");
          desc = view;
        } else if (input.has_view()) {
          TensorDesc view{Shape(input.view_shape().begin(), input.view_shape().end()), desc.dtype};
          if (view.byte_size() != desc.byte_size())
            return InvalidArgument("plan: task '" + task.name() + "' views " + desc.ToString() + " of '" +
                                   producer_name() + "' as " + view.ToString() + " (a different size)");
          desc = view;
        }
      }
      if (read_only[p]) {
        // Nothing writes it: read the buffer in place; no edge, no message per iteration.
        if (input.control()) continue;
        state.data_inputs().push_back(DataInput{-1, input.blob_index(), &producer_slots, std::move(desc), {}, ByteOffset(input)});
        continue;
      }
      auto key = std::make_pair(p, producer_register);
      int edge = find_edge(key);
      if (edge < 0) {
        edge = static_cast<int>(state.in_edges().size());
        if (by_map) edge_of.emplace(key, edge);
        InputSlots slots(arena_.get());
        slots.producer_index = p;
        slots.producer_output = producer_register;
        slots.producer_slots = &producer_slots;
        slots.ring.resize(producer_slots.register_num);
        state.in_edges().push_back(std::move(slots));
        producer_slots.consumers.push_back(OutputSlots::Consumer{i, edge, nullptr});
      }
      if (!input.control())
        state.data_inputs().push_back(DataInput{edge, input.blob_index(), nullptr, std::move(desc), {}, ByteOffset(input)});
      if (input.whole()) whole_inputs.emplace_back(state.data_inputs().size() - 1, key);
    }
    if (!whole_inputs.empty() && !by_map)
      for (size_t e = 0; e < state.in_edges().size(); ++e)
        edge_of.emplace(std::make_pair(state.in_edges()[e].producer_index, state.in_edges()[e].producer_output),
                        static_cast<int>(e));
    for (const auto& [data_input, owner] : whole_inputs) {
      AF_ASSIGN_OR_RETURN(state.data_inputs()[data_input].slice_edges,
                          WholeInputSliceEdges(plan_, slice_groups, i, owner.first, owner.second, edge_of));
    }
    if (task.kind() == plan::SINK && task.sink_name().empty()) {
      for (const DataInput& d : state.data_inputs()) output_descs.push_back(d.desc);
    }
    if (state.is_root() && task.kind() != plan::SOURCE && !read_only[i]) roots_.push_back(i);
    AF_RETURN_IF_ERROR(state.FinishSetup(register_memory_));
  }
  for (int s : sources_) input_descs.push_back(states_[s]->outputs()[0].blob_descs[0]);
  push_registers_.assign(sources_.size(), -1);
  if (options_.run_inline) {
    inline_refusal = options_.observer != nullptr ? "an observer records the actors"
                                                  : InlineRun::Ineligible(states_, options_.inline_register_bytes);
    if (inline_refusal.empty()) {
      AF_ASSIGN_OR_RETURN(inline_, InlineRun::Create(states_, hooks_, *register_memory_, allocators));
    }
  }
  if (options_.lend_idle_threads && options_.num_workers > 1 && options_.kernel_threads > 0 &&
      options_.num_threads > options_.kernel_threads) {
    lending_.workers = options_.num_workers;
    lending_.share = options_.kernel_threads;
    lending_.budget = options_.num_threads;
    for (auto& state : states_) state->set_thread_lending(&lending_);
  }

  if (!environment_) {
    EnvironmentOptions own;
    own.num_threads = options_.num_threads;
    own.num_workers = options_.num_workers;
    own.kernel_threads = options_.kernel_threads;
    own.on_worker_start = options_.on_worker_start;
    AF_ASSIGN_OR_RETURN(environment_, ActorEnvironment::Create(own));
  }
  // Before any actor exists, so observers need no lock to set up their buffers.
  if (options_.observer != nullptr) {
    options_.observer->OnPlan(plan_);
    options_.observer->OnWorkers(environment_->num_workers());
    for (auto& state : states_) state->set_trace_lane(options_.observer->LaneFor(state->task().id()));
    host_lane_ = options_.observer->LaneFor(RuntimeObserver::kHostLane);
  }
  // Lazily initialized: an actor builds its behaviour when its first message arrives, in the
  // same run of its worker, instead of being scheduled once at spawn just for that (one run and
  // one job-queue node less per task; a large plan spawns thousands).
  for (auto& state : states_) actors_.push_back(environment_->system().spawn<caf::lazy_init>(TaskActor, state.get()));
  // Handles are set before any message flows; the spawn/enqueue of the first message orders
  // these writes before the actors read them.
  for (size_t i = 0; i < states_.size(); ++i) {
    const TaskStatePtr& state = states_[i];
    state->BindActor(actors_[i]);  // for completions of asynchronous acts
    for (InputSlots& in : state->in_edges()) {
      in.producer = caf::actor_cast<caf::abstract_actor*>(actors_[in.producer_index]);
    }
    for (OutputSlots& out : state->outputs())
      for (OutputSlots::Consumer& c : out.consumers) c.actor = caf::actor_cast<caf::abstract_actor*>(actors_[c.task_index]);
    if (!sources_.empty() && state == states_[sources_[0]])
      for (int r : roots_) state->add_tick_target(caf::actor_cast<caf::abstract_actor*>(actors_[r]), states_[r].get());
    HappensBeforeSend(state.get());  // the wiring above, before the actor's first message
  }
  return Status::Ok();
}

StatusOr<int64_t> Runtime::Impl::Push(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                                      Completion done, bool may_run_inline) {
  if (InActorHandler()) return CalledFromActor("Push");
  if (shut_down_.load(std::memory_order_acquire)) return FailedPrecondition("runtime is shut down");
  if (inputs.size() != sources_.size())
    return InvalidArgument("expected " + std::to_string(sources_.size()) + " inputs, got " + std::to_string(inputs.size()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].desc != input_descs[k])
      return InvalidArgument("input " + std::to_string(k) + " ('" + std::string(states_[sources_[k]]->name()) + "'): expected " +
                             input_descs[k].ToString() + ", got " + inputs[k].desc.ToString());
    if (inputs[k].data == nullptr && input_descs[k].byte_size() > 0)
      return InvalidArgument("input " + std::to_string(k) + " has no data");
  }
  if (outputs.size() != output_descs.size())
    return InvalidArgument("expected " + std::to_string(output_descs.size()) + " output buffers, got " +
                           std::to_string(outputs.size()));
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k].desc != output_descs[k])
      return InvalidArgument("output " + std::to_string(k) + ": expected " + output_descs[k].ToString() + ", got " +
                             outputs[k].desc.ToString());
    if (outputs[k].data == nullptr && output_descs[k].byte_size() > 0)
      return InvalidArgument("output " + std::to_string(k) + ": the buffer is null (expected " +
                             std::to_string(output_descs[k].byte_size()) + " writable bytes)");
  }

  std::unique_lock<std::mutex> push_lock(push_mu_);
  if (may_run_inline && inline_ != nullptr) {
    // Idle: nothing in flight, so no actor reads what the iteration's completion releases and
    // completions stay in iteration order. Pushes wait behind push_mu_ while it runs.
    std::unique_lock<std::mutex> lock(mu_);
    if (in_flight_.empty() && !delivering_ && !shut_down_) {
      const int64_t iteration = next_iteration_++;
      Iteration& record = in_flight_.Append(iteration);  // Drain waits for it like any other
      record.outputs.clear();  // the inline run writes the caller's buffers itself
      record.done = std::move(done);
      record.sinks_remaining = 1;
      record.finished = false;
      record.status = Status::Ok();
      lock.unlock();
      RunInline(push_lock, iteration, inputs, outputs);
      return iteration;
    }
  }
  const bool trace = host_lane_ != nullptr && options_.observer->recording();
  const int64_t wait_start = trace ? trace_clock::Now() : 0;
  std::vector<int>& regs = push_registers_;  // sized at instantiation: no allocation per call
  int64_t iteration;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Backpressure reaches the caller: wait until every source has a free register.
    source_free_.wait(lock, [&] {
      if (shut_down_) return true;
      for (int s : sources_)
        if (states_[s]->outputs()[0].free_registers.empty()) return false;
      return !plan_.serial_iterations() || in_flight_.empty();
    });
    if (shut_down_) return FailedPrecondition("runtime is shut down");
    for (size_t k = 0; k < sources_.size(); ++k) {
      auto& pool = states_[sources_[k]]->outputs()[0].free_registers;
      regs[k] = pool.back();
      pool.pop_back();
    }
    iteration = next_iteration_++;
    Iteration& record = in_flight_.Append(iteration);
    record.outputs = outputs;  // into the slot's kept capacity
    record.done = std::move(done);
    record.sinks_remaining = num_sinks_;
    record.finished = false;
    record.status = Status::Ok();
  }
  const int64_t act_start = trace ? trace_clock::Now() : 0;
  for (size_t k = 0; k < sources_.size(); ++k) {
    const OutputSlots& out = states_[sources_[k]]->outputs()[0];
    // The caller's buffer is not the register: always a copy, into the register's memory case.
    Status copied = CopyBytes(out.blob(regs[k], 0), out.place, inputs[k].data, HostPlace(), inputs[k].byte_size());
    if (!copied.ok())  // fails this iteration only; the register still travels so it completes
      RecordError(iteration, copied.WithContext("copying input " + std::to_string(k) + " ('" +
                                                std::string(states_[sources_[k]]->name()) + "') into its register"));
    Send(nullptr, actors_[sources_[k]], out.channel(regs[k]), fill_atom::value, regs[k], iteration, act_start);
  }
  if (sources_.empty())  // otherwise the first source passes the tick on (Instantiate)
    for (int r : roots_) Send(nullptr, actors_[r], states_[r]->tick_channel(), tick_atom::value, iteration, act_start);
  if (trace) host_lane_->Act(iteration, true, wait_start, WaitReason::kOutputRegistersFull, act_start, trace_clock::Now());
  return iteration;
}

void Runtime::Impl::RunInline(std::unique_lock<std::mutex>& push_lock, int64_t iteration,
                              const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) {
  ScopedActorHandler handler;  // kernels and the completion run here as they would on an actor
  Status status = inline_->Run(iteration, inputs, outputs);
  if (!status.ok()) RecordError(iteration, status);
  push_lock.unlock();  // the completion may take long; later pushes go through the actors meanwhile
  SinkDelivered(iteration);
}

// Completions run in iteration order, outside the lock (a completion may Push again); one
// thread at a time delivers, others just mark their iteration finished.
void Runtime::Impl::SinkDelivered(int64_t iteration) {
  std::unique_lock<std::mutex> lock(mu_);
  Iteration* found = in_flight_.Find(iteration);
  if (found == nullptr && forced_shutdown_) return;  // abandoned by the forced shutdown
  AF_CHECK(found != nullptr) << "sink delivered iteration " << iteration << ", which is not in flight";
  Iteration& record = *found;
  AF_CHECK_GT(record.sinks_remaining, 0) << "iteration " << iteration << " delivered by more sinks than the plan has";
  if (--record.sinks_remaining > 0) return;
  record.finished = true;
  if (delivering_) return;
  delivering_ = true;
  while (!in_flight_.empty() && in_flight_.Front().finished) {
    // Out of the ring before the call (its slot may be reused meanwhile): moving a function and
    // an (ok) status allocates nothing.
    const int64_t delivered = in_flight_.front_iteration();
    Completion done = std::move(in_flight_.Front().done);
    in_flight_.Front().done = nullptr;
    Status status = std::move(in_flight_.Front().status);
    in_flight_.PopFront();
    lock.unlock();
    if (done) {
      // A throwing completion must not end the sink's actor (the runtime would wedge).
      try {
        done(delivered, status);
      } catch (const std::exception& e) {
        ReportOnce(&completion_threw_reported_, "a completion threw an exception (ignored; reported once): " +
                                                    std::string(e.what()));
      } catch (...) {
        ReportOnce(&completion_threw_reported_, "a completion threw an exception of unknown type (ignored; reported once)");
      }
    }
    lock.lock();
  }
  delivering_ = false;
  if (in_flight_.empty()) {
    drained_.notify_all();  // under mu_: Drain cannot miss it
    if (plan_.serial_iterations()) source_free_.notify_all();  // the next call may start
  }
}

Status Runtime::Impl::Shutdown() {
  if (actors_.empty()) {
    for (auto& state : states_) state->UnbindActor();  // a runtime whose Create failed after spawning none
    environment_.reset();
    register_memory_.reset();
    return shutdown_status_;
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_timeout;
  bool drained;
  {
    std::lock_guard<std::mutex> push_lock(push_mu_);
    std::unique_lock<std::mutex> lock(mu_);
    // As Drain, bounded: an iteration that never completes must not hang the caller silently.
    drained = drained_.wait_until(lock, deadline, [&] { return in_flight_.empty() && !delivering_; });
    shut_down_ = true;
  }
  source_free_.notify_all();
  // End of stream enters at the roots and flows downstream; each actor quits once its
  // registers are all back.
  if (drained)
    for (size_t i = 0; i < states_.size(); ++i)
      if (states_[i]->is_root()) Send(nullptr, actors_[i], states_[i]->tick_channel(), eos_atom::value, -1);
  std::vector<std::pair<int64_t, Completion>> abandoned;
  {
    std::unique_lock<std::mutex> lock(mu_);
    bool all = drained && finished_cv_.wait_until(lock, deadline, [&] {
      return finished_actors_ == static_cast<int>(states_.size());
    });
    if (!all) {
      std::string outstanding;
      for (auto& state : states_)
        for (const std::string& act : state->OutstandingCompletions())
          outstanding += (outstanding.empty() ? "; completions never called: " : ", ") + act;
      shutdown_status_ = Internal(
          "runtime of plan '" + JobName() + "' did not shut down within " +
          std::to_string(options_.shutdown_timeout.count()) + " ms (" +
          (drained ? std::to_string(states_.size() - finished_actors_) + " of " + std::to_string(states_.size()) +
                         " actors did not finish end of stream"
                   : std::to_string(in_flight_.size()) + " iterations still in flight") +
          ")" + outstanding + "; its iterations were abandoned and its actors stopped");
      forced_shutdowns.fetch_add(1);
      std::cerr << "actorflow: " << shutdown_status_.message() << std::endl;
      for (; !in_flight_.empty(); in_flight_.PopFront())  // a late sink now finds none of them
        abandoned.emplace_back(in_flight_.front_iteration(), std::move(in_flight_.Front().done));
      forced_shutdown_ = true;
    }
  }
  if (!shutdown_status_.ok()) {
    if (options_.on_forced_shutdown) options_.on_forced_shutdown(shutdown_status_);
    // The iterations are abandoned (their completions get the error below); end of stream
    // still ends actors whose kernels return. Those that stay stuck one more timeout are killed.
    if (!drained)
      for (size_t i = 0; i < states_.size(); ++i)
        if (states_[i]->is_root()) Send(nullptr, actors_[i], states_[i]->tick_channel(), eos_atom::value, -1);
    std::unique_lock<std::mutex> lock(mu_);
    bool all = finished_cv_.wait_for(lock, options_.shutdown_timeout, [&] {
      return finished_actors_ == static_cast<int>(states_.size());
    });
    lock.unlock();
    if (!all) {
      for (size_t i = 0; i < actors_.size(); ++i) {  // ahead of what is queued, as an exit would be
        HappensBeforeSend(states_[i].get());
        caf::anon_send<caf::message_priority::high>(actors_[i], abandon_atom::value);
      }
      // Every actor reports its end under mu_ (OnAbandon too): what they did, the references
      // their messages took included, is ordered before we drop the handles below. A kernel
      // still running delays this until it returns, as the wait for termination would.
      lock.lock();
      finished_cv_.wait(lock, [&] { return finished_actors_ == static_cast<int>(states_.size()); });
    }
  }
  // Every actor reported its end as its last handler's last touch of its state
  // (TaskState::ReportFinished): the states may go while CAF still ends the actors, without a
  // monitor and a message per actor to wait for that. An actor system this runtime made waits
  // for them as it goes; a shared one outlives them.
  // A completion called from now on is refused (it would message an actor that is gone); the
  // register memory stays alive for as long as such a handle exists.
  for (auto& state : states_) state->UnbindActor();
  actors_.clear();
  environment_.reset();  // joins its threads if this runtime made it
  for (auto& state : states_) HappensAfterReceive(state.get());  // each actor's last handler
  // Iterations the killed actors never finished: their callers still hear of them.
  for (auto& [iteration, done] : abandoned)
    if (done) done(iteration, shutdown_status_.WithContext("iteration " + std::to_string(iteration)));
  states_.clear();
  inline_.reset();  // its registers are in register_memory_
  arena_.reset();   // the states' memory
  register_memory_.reset();
  return shutdown_status_;
}

// ---- Runtime ----

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;

StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const plan::Plan& plan, RuntimeHooks hooks, RuntimeOptions options,
                                                   std::shared_ptr<ActorEnvironment> environment) {
  return Create(std::make_shared<const plan::Plan>(plan), std::move(hooks), options, std::move(environment));
}

StatusOr<std::unique_ptr<Runtime>> Runtime::Create(std::shared_ptr<const plan::Plan> plan, RuntimeHooks hooks,
                                                   RuntimeOptions options, std::shared_ptr<ActorEnvironment> environment) {
  if (plan == nullptr) return InvalidArgument("Runtime::Create: no plan");
  if (options.names != nullptr && (options.names->task_names.size() != static_cast<size_t>(plan->tasks_size()) ||
                                   options.names->source_locations.size() != static_cast<size_t>(plan->tasks_size())))
    return InvalidArgument("Runtime::Create: " + std::to_string(options.names->task_names.size()) + " task names and " +
                           std::to_string(options.names->source_locations.size()) + " source lines for a plan of " +
                           std::to_string(plan->tasks_size()) + " tasks");
  const std::string job_name = options.names != nullptr ? options.names->job_name : plan->job_name();
  auto impl = std::make_unique<Impl>(std::move(plan), std::move(hooks), options, std::move(environment));
  Status status = impl->Instantiate();
  if (!status.ok()) return status.WithContext("instantiating plan '" + job_name + "'");
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

StatusOr<int64_t> Runtime::Push(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                                Completion done, bool may_run_inline) {
  return impl_->Push(inputs, outputs, std::move(done), may_run_inline);
}

Status Runtime::Run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) {
  if (InActorHandler()) return CalledFromActor("Run");
  CallWait wait;
  auto pushed = impl_->Push(inputs, outputs, wait.completion(), /*may_run_inline=*/true);
  if (!pushed.ok()) return pushed.status();
  return wait.Wait();
}

Completion CallWait::completion() {
  return [this](int64_t, const Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      result_ = status;
      finished_ = true;
      cv_.notify_all();
    }
    finished_flag_.store(true, std::memory_order_release);  // the last touch of *this
  };
}

namespace {
std::atomic<const CallWaitAssist*> call_wait_assist{nullptr};
}  // namespace

void SetCallWaitAssist(const CallWaitAssist* assist) { call_wait_assist.store(assist, std::memory_order_release); }

bool PollForCompletion(const std::atomic<bool>& flag, std::chrono::microseconds poll) {
  if (flag.load(std::memory_order_acquire)) return true;
  const CallWaitAssist* assist = call_wait_assist.load(std::memory_order_acquire);
  if (assist != nullptr) assist->enter();
  auto poll_until = std::chrono::steady_clock::now() + poll;
  bool set = false;
  while (!(set = flag.load(std::memory_order_acquire))) {
    if (assist != nullptr && assist->poll()) {
      poll_until = std::chrono::steady_clock::now() + poll;  // work keeps coming: stay
      continue;
    }
    if (std::chrono::steady_clock::now() >= poll_until) break;
    std::this_thread::yield();
  }
  if (assist != nullptr) assist->leave();
  return set;
}

Status CallWait::Wait() {
  if (!PollForCompletion(finished_flag_)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return finished_; });
    lock.unlock();
    // The completion has left its lock; its flag store comes next.
    while (!finished_flag_.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  return result_;
}

void Runtime::Drain() { impl_->Drain(); }
Status Runtime::Shutdown() { return impl_->Shutdown(); }
int64_t Runtime::forced_shutdown_count() { return forced_shutdowns.load(); }
const std::vector<TensorDesc>& Runtime::input_descs() const { return impl_->input_descs; }
const std::vector<TensorDesc>& Runtime::output_descs() const { return impl_->output_descs; }
const std::string& Runtime::inline_refusal() const { return impl_->inline_refusal; }

}  // namespace actorflow

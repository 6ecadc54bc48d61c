#include "actors/inline_run.h"

#include <cstring>
#include <utility>

#include "actors/runtime.h"
#include "actors/task_state.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace {

constexpr size_t kAlignment = 64;

size_t AlignUp(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// Bytes of one register of `out` (its blobs at their offsets).
size_t RegisterBytes(const OutputSlots& out) {
  if (out.blob_descs.empty()) return 0;
  return AlignUp(out.blob_offsets.back() + out.blob_descs.back().byte_size());
}

// Kahn's order over the in-edges (data and control); the plan's own order breaks ties, so the
// order is deterministic. Empty if the edges have a cycle (a plan the actors would deadlock on).
std::vector<int> TopologicalOrder(const TaskStates& states) {
  const int n = static_cast<int>(states.size());
  std::vector<int> waiting(n, 0);
  std::vector<std::vector<int>> consumers(n);
  for (int i = 0; i < n; ++i)
    for (const InputSlots& in : states[i]->in_edges()) {
      ++waiting[i];
      consumers[in.producer_index].push_back(i);
    }
  std::vector<int> order;
  for (int i = 0; i < n; ++i)
    if (waiting[i] == 0) order.push_back(i);
  for (size_t k = 0; k < order.size(); ++k)
    for (int c : consumers[order[k]])
      if (--waiting[c] == 0) order.push_back(c);
  if (static_cast<int>(order.size()) != n) order.clear();
  return order;
}

}  // namespace

std::string InlineRun::Ineligible(const TaskStates& states, size_t max_register_bytes) {
  size_t bytes = 0;
  for (const auto& state : states) {
    const plan::Task& task = state->task();
    const std::string name = "task '" + std::string(state->name()) + "'";
    switch (task.kind()) {
      case plan::SOURCE:
        break;
      case plan::COMPUTE:
        if (task.asynchronous() || task.stream_ordered()) return name + " is asynchronous";
        break;
      case plan::SINK:
        if (!task.sink_name().empty()) return name + " is a watch sink (its handler runs on the job's dispatcher)";
        break;
      case plan::VARIABLE:
        if (!task.read_only()) return name + " is a variable the plan writes";
        continue;  // read in place
      default:
        return name + " has no kind";
    }
    for (int r = 0; r < task.registers_size(); ++r) {
      const plan::RegisterDesc& reg = task.registers(r);
      if (reg.memory_case().kind() != static_cast<int>(MemoryKind::kHost)) return name + " has a register off the host";
      if (reg.reserved_byte_size() > 0 || reg.has_slice_of())
        return name + " has a register that is a slice of a block another task reads whole";
      bytes += RegisterBytes(state->outputs()[r]);
    }
    for (const plan::InputDesc& input : task.inputs())
      if (input.whole()) return name + " reads a register whole";
  }
  if (bytes > max_register_bytes)
    return "its registers need " + std::to_string(bytes) + " bytes, more than the inline limit of " +
           std::to_string(max_register_bytes);
  if (TopologicalOrder(states).empty()) return "its edges have a cycle";
  return "";
}

StatusOr<std::unique_ptr<InlineRun>> InlineRun::Create(const TaskStates& states,
                                                       const RuntimeHooks& hooks, RegisterMemory& memory,
                                                       const AllocatorRegistry& allocators) {
  std::unique_ptr<InlineRun> run(new InlineRun());
  const MemoryCase host{MemoryKind::kHost, 0};
  AF_ASSIGN_OR_RETURN(std::shared_ptr<RegisterAllocator> allocator, allocators.Find(host));
  // One block per output of every task (variables: their buffer), laid out as the actors' are.
  std::vector<std::vector<char*>> blocks(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    TaskState& state = *states[i];
    for (const OutputSlots& out : state.outputs()) {
      char* block = nullptr;
      if (state.task().kind() == plan::VARIABLE) {
        block = out.register_memory[0];
      } else if (const size_t bytes = RegisterBytes(out); bytes > 0) {
        AF_ASSIGN_OR_RETURN(void* memory_block, memory.Allocate(allocator, host, bytes, kAlignment));
        block = static_cast<char*>(memory_block);
        run->register_bytes_ += bytes;
      }
      blocks[i].push_back(block);
    }
  }
  for (int i : TopologicalOrder(states)) {
    TaskState& state = *states[i];
    const plan::Task& task = state.task();
    if (task.kind() == plan::VARIABLE) continue;
    Step step;
    step.state = &state;
    for (size_t k = 0; k < state.data_inputs().size(); ++k) {
      const DataInput& d = state.data_inputs()[k];
      char* data;
      if (d.in_edge < 0) {
        data = static_cast<char*>(d.constant->blob(0, d.blob_index));
      } else {
        const InputSlots& in = state.in_edges()[d.in_edge];
        data = blocks[in.producer_index][in.producer_output] + in.producer_slots->blob_offsets[d.blob_index];
      }
      step.inputs.push_back(TensorView{data + d.byte_offset, state.input_desc(k)});
    }
    for (size_t o = 0; o < state.outputs().size(); ++o) {
      const OutputSlots& out = state.outputs()[o];
      for (size_t b = 0; b < out.blob_descs.size(); ++b)
        step.outputs.push_back(TensorView{blocks[i][o] + out.blob_offsets[b], out.blob_descs[b]});
    }
    switch (task.kind()) {
      case plan::SOURCE:
        step.kind = Kind::kFeed;
        step.feed = task.feed_index();
        break;
      case plan::COMPUTE: {
        step.kind = Kind::kKernel;
        auto kernel = hooks.make_kernel(task);
        if (!kernel.ok()) return kernel.status().WithContext("building the inline kernel of " + state.where());
        step.kernel = std::move(kernel).value();
        break;
      }
      default:  // the main sink (Ineligible refused the others)
        step.kind = Kind::kDeliver;
        break;
    }
    run->steps_.push_back(std::move(step));
  }
  return run;
}

Status InlineRun::Run(int64_t iteration, const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs) {
  for (Step& step : steps_) {
    switch (step.kind) {
      case Kind::kFeed:
        // The caller's buffer is not the register: a kernel may not write its inputs, but the
        // caller's array is not ours to expose to one that did.
        if (inputs[step.feed].byte_size() > 0)
          std::memcpy(step.outputs[0].data, inputs[step.feed].data, inputs[step.feed].byte_size());
        break;
      case Kind::kKernel: {
        KernelContext ctx;
        ctx.iteration = iteration;
        ctx.inputs = &step.inputs;
        ctx.outputs = &step.outputs;
        Status status = CallKernel(step.kernel, ctx);
        if (!status.ok()) return status.WithContext(step.state->where() + ", iteration " + std::to_string(iteration));
        break;
      }
      case Kind::kDeliver:
        for (size_t k = 0; k < step.inputs.size() && k < outputs.size(); ++k)
          if (step.inputs[k].byte_size() > 0) std::memcpy(outputs[k].data, step.inputs[k].data, step.inputs[k].byte_size());
        break;
    }
  }
  return Status::Ok();
}

}  // namespace actorflow

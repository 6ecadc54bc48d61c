// Plans and small helpers of cluster_bench (bench/cluster_bench.cc): the hand-made plans of its
// measures and the spread of per-round values.
#include "bench/cluster_bench_plans.h"

#include <algorithm>
#include <cstring>

#include "comm/data_plane.h"
#include "graph/passes.h"

namespace actorflow_bench {

void AddRegister(actorflow::plan::Task* task, const char* name, int64_t bytes) {
  auto* reg = task->add_registers();
  reg->set_name(name);
  reg->set_register_num(2);
  if (bytes < 0) return;
  auto* blob = reg->add_blobs();
  blob->set_name(std::string(task->name()) + "/" + name);
  blob->add_shape(bytes);
  blob->set_dtype(actorflow::plan::DT_UINT8);
  blob->set_byte_size(bytes);
}

actorflow::plan::Task* AddTask(actorflow::plan::Plan& plan, const std::string& name, actorflow::plan::TaskKind kind,
                               int machine) {
  auto* task = plan.add_tasks();
  task->set_id(plan.tasks_size() - 1);
  task->set_name(name);
  task->set_kind(kind);
  task->set_device_type("cpu");
  task->set_machine_id(machine);
  return task;
}

void AddInput(actorflow::plan::Task* task, int64_t producer, bool control) {
  auto* in = task->add_inputs();
  in->set_producer_task_id(producer);
  in->set_producer_register(0);
  in->set_control(control);
}

// Recomputes every register's consumer list from the tasks' inputs (what the compiler's passes
// leave in a plan; the hand-made plans below need it too).
void FillConsumers(actorflow::plan::Plan& plan) {
  for (auto& task : *plan.mutable_tasks())
    for (auto& reg : *task.mutable_registers()) reg.clear_consumer_task_ids();
  for (const auto& task : plan.tasks())
    for (const auto& in : task.inputs()) {
      auto* reg = plan.mutable_tasks(static_cast<int>(in.producer_task_id()))->mutable_registers(in.producer_register());
      if (std::find(reg->consumer_task_ids().begin(), reg->consumer_task_ids().end(), task.id()) ==
          reg->consumer_task_ids().end())
        reg->add_consumer_task_ids(task.id());
    }
}

// A data-plane task of a hand-made plan (what graph::InsertCrossMachineTransfers makes).
actorflow::plan::Task* AddTransfer(actorflow::plan::Plan& plan, const char* op, int machine, int peer, int channel,
                                   int64_t bytes) {
  auto* task = AddTask(plan, std::string(op) + std::to_string(channel), actorflow::plan::COMPUTE, machine);
  task->set_op_type(op);
  task->set_asynchronous(true);
  (*task->mutable_attrs())["channel"].set_i(channel);
  (*task->mutable_attrs())["peer"].set_i(peer);
  (*task->mutable_attrs())["bytes"].set_i(bytes);
  return task;
}

// The register transfer alone, register to register and back, as raw TCP moves a user buffer
// to a user buffer and back: machine 0's "origin" task (no inputs: ticked each iteration,
// writes nothing but an iteration stamp into the register's first and last 8 bytes) is sent to
// machine 1, whose RECV register is sent straight back (no task between them) into machine 0's
// RECV register, which a "check" task reads (the stamps each iteration, every byte on the last).
// No feed, no fetch, no relay copy: what a consumer task reading a received register pays
// nothing more for. Returns machine `rank`'s plan.
actorflow::StatusOr<actorflow::plan::Plan> RegisterRoundTripPlan(int64_t bytes, int rank) {
  actorflow::plan::Plan plan;
  plan.set_job_name("register_round_trip_" + std::to_string(bytes));
  auto* origin = AddTask(plan, "origin", actorflow::plan::COMPUTE, 0);
  origin->set_op_type("origin");
  AddRegister(origin, "out", bytes);
  auto* send_out = AddTransfer(plan, "send", 0, 1, 0, bytes);
  AddInput(send_out, origin->id(), false);
  AddRegister(send_out, "done", -1);
  auto* receive_there = AddTransfer(plan, "recv", 1, 0, 0, bytes);
  AddRegister(receive_there, "out", bytes);
  auto* send_back = AddTransfer(plan, "send", 1, 0, 1, bytes);
  AddInput(send_back, receive_there->id(), false);
  AddRegister(send_back, "done", -1);
  auto* receive_back = AddTransfer(plan, "recv", 0, 1, 1, bytes);
  AddRegister(receive_back, "out", bytes);
  auto* check = AddTask(plan, "check", actorflow::plan::COMPUTE, 0);
  check->set_op_type("check");
  AddInput(check, receive_back->id(), false);
  AddRegister(check, "done", -1);
  auto* sink0 = AddTask(plan, "output", actorflow::plan::SINK, 0);
  AddInput(sink0, check->id(), true);
  AddInput(sink0, send_out->id(), true);
  auto* sink1 = AddTask(plan, "output@machine1", actorflow::plan::SINK, 1);
  AddInput(sink1, send_back->id(), true);
  FillConsumers(plan);
  auto local = actorflow::graph::ExtractMachinePlan(plan, rank);
  if (!local.ok()) return local.status();
  return local->plan;
}

// The stamp the origin writes into both ends of its register at `iteration`, and checks.
void Stamp(char* data, int64_t bytes, int64_t iteration) {
  std::memcpy(data, &iteration, sizeof iteration);
  std::memcpy(data + bytes - static_cast<int64_t>(sizeof iteration), &iteration, sizeof iteration);
}
bool Stamped(const char* data, int64_t bytes, int64_t iteration) {
  int64_t head = -1, tail = -1;
  std::memcpy(&head, data, sizeof head);
  std::memcpy(&tail, data + bytes - static_cast<int64_t>(sizeof tail), sizeof tail);
  return head == iteration && tail == iteration;
}

Spread SpreadOf(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  if (values.empty()) return {};
  return {values[values.size() / 2], values.front(), values.back()};
}


actorflow::plan::Plan AllReducePlan(int world, int64_t bytes, AllReduceMode mode) {
  const bool ring = mode != AllReduceMode::kFunnelCall, registers = mode == AllReduceMode::kRingRegisters;
  actorflow::plan::Plan plan;
  plan.set_job_name(std::string(registers ? "ring_registers_" : ring ? "ring_" : "funnel_") + std::to_string(bytes));
  auto add_float_register = [](actorflow::plan::Task* task) {
    auto* reg = task->add_registers();
    reg->set_name("out");
    reg->set_register_num(2);
    auto* blob = reg->add_blobs();
    blob->set_name(task->name() + "/out");
    blob->set_dtype(actorflow::plan::DT_FLOAT32);
    blob->add_shape(0);
  };
  auto set_bytes = [](actorflow::plan::Task* task, int64_t n) {
    auto* blob = task->mutable_registers(0)->mutable_blobs(0);
    blob->set_shape(0, n / 4);
    blob->set_byte_size(n);
  };
  std::vector<int64_t> sources;
  for (int m = 0; m < world; ++m) {
    auto* source = AddTask(plan, "partial@" + std::to_string(m),
                           registers ? actorflow::plan::COMPUTE : actorflow::plan::SOURCE, m);
    if (registers) source->set_op_type("origin");
    else source->set_feed_index(0);
    add_float_register(source);
    set_bytes(source, bytes);
    sources.push_back(source->id());
  }
  std::vector<int64_t> totals;
  if (ring) {
    for (int m = 0; m < world; ++m) {
      auto* sum = AddTask(plan, "sum@" + std::to_string(m), actorflow::plan::COMPUTE, m);
      sum->set_op_type(actorflow::kAllReduceOp);
      sum->set_asynchronous(true);
      (*sum->mutable_attrs())["channel"].set_i(0);
      for (int r = 0; r < world; ++r) (*sum->mutable_attrs())["ring"].mutable_ints()->add_values(r);
      AddInput(sum, sources[m], false);
      add_float_register(sum);
      set_bytes(sum, bytes);
      totals.push_back(sum->id());
    }
  } else {
    auto* sum = AddTask(plan, "sum", actorflow::plan::COMPUTE, 0);
    sum->set_op_type("bench_sum");
    for (int64_t source : sources) AddInput(sum, source, false);
    add_float_register(sum);
    set_bytes(sum, bytes);
    totals.assign(world, sum->id());
  }
  for (int m = 0; m < world; ++m) {
    int64_t read = totals[m];
    if (registers) {
      auto* check = AddTask(plan, "check@" + std::to_string(m), actorflow::plan::COMPUTE, m);
      check->set_op_type("check");
      AddInput(check, totals[m], false);
      AddRegister(check, "done", -1);
      read = check->id();
    }
    auto* sink = AddTask(plan, m == 0 ? "output" : "output@machine" + std::to_string(m), actorflow::plan::SINK, m);
    AddInput(sink, read, registers);
  }
  if (registers) FillConsumers(plan);
  return plan;
}


}  // namespace actorflow_bench

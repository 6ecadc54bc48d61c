// Plans over several machines: send/recv pairs for the edges that cross machines, and each
// machine's part of a plan (graph/passes.h, docs/cluster.md).
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "graph/passes.h"

namespace actorflow {
namespace graph {

namespace {

// Recomputes every register's consumer list from the tasks' inputs (one entry per task).
void FillConsumers(plan::Plan& plan) {
  for (plan::Task& t : *plan.mutable_tasks())
    for (plan::RegisterDesc& r : *t.mutable_registers()) r.clear_consumer_task_ids();
  for (const plan::Task& t : plan.tasks()) {
    std::set<std::pair<int64_t, int>> seen;
    for (const plan::InputDesc& in : t.inputs())
      if (seen.insert({in.producer_task_id(), in.producer_register()}).second)
        plan.mutable_tasks(in.producer_task_id())->mutable_registers(in.producer_register())->add_consumer_task_ids(t.id());
  }
}

plan::AttrValue IntAttr(int64_t value) {
  plan::AttrValue attr;
  attr.set_i(value);
  return attr;
}

}  // namespace

StatusOr<plan::Plan> InsertCrossMachineTransfers(const plan::Plan& plan, int register_num) {
  register_num = std::max(1, register_num);
  bool crosses = false;
  for (const plan::Task& t : plan.tasks())
    for (const plan::InputDesc& in : t.inputs())
      crosses |= plan.tasks(static_cast<int>(in.producer_task_id())).machine_id() != t.machine_id();
  if (!crosses) return plan;
  plan::Plan out;
  out.set_job_name(plan.job_name());
  std::vector<int64_t> new_id(plan.tasks_size(), -1);
  // (producer, register, consumer machine) -> its RECV task (new id).
  std::map<std::tuple<int64_t, int, int>, int64_t> received;
  std::vector<std::pair<int, int64_t>> sends;  // (machine, SEND task id): their main sinks wait for them
  int64_t channel = 0;
  // The pairs a task needs go right before it; those of the sinks (all at the end) before the
  // first sink, since sinks wait for sends of their own machine.
  bool sinks_reached = false;
  for (int index = 0; index < plan.tasks_size(); ++index) {
    const plan::Task& task = plan.tasks(index);
    std::vector<std::pair<const plan::Task*, const plan::InputDesc*>> crossing;
    const bool first_sink = task.kind() == plan::SINK && !sinks_reached;
    sinks_reached |= first_sink;
    for (int reader = index; reader < (first_sink ? plan.tasks_size() : index + 1); ++reader)
      for (const plan::InputDesc& in : plan.tasks(reader).inputs()) crossing.emplace_back(&plan.tasks(reader), &in);
    for (const auto& [consumer, input] : crossing) {
      const plan::Task& task = *consumer;
      const plan::InputDesc& in = *input;
      const plan::Task& producer = plan.tasks(static_cast<int>(in.producer_task_id()));
      if (producer.machine_id() == task.machine_id()) continue;
      const auto key = std::make_tuple(producer.id(), in.producer_register(), task.machine_id());
      if (received.count(key)) continue;
      const plan::RegisterDesc& reg = producer.registers(in.producer_register());
      if (reg.blobs_size() > 1)
        return Internal("plan '" + plan.job_name() + "': register '" + reg.name() + "' of '" + producer.name() +
                        "' holds " + std::to_string(reg.blobs_size()) + " blobs; a send carries one");
      int64_t bytes = 0;
      for (const plan::BlobDesc& blob : reg.blobs()) bytes += blob.byte_size();
      const std::string what = producer.name() + "/" + reg.name() + "@machine" + std::to_string(producer.machine_id()) +
                               "->machine" + std::to_string(task.machine_id());
      plan::Task* send = out.add_tasks();
      send->set_id(out.tasks_size() - 1);
      send->set_name("send " + what);
      send->set_kind(plan::COMPUTE);
      send->set_op_type("send");
      send->set_asynchronous(true);
      send->set_device_type(producer.device_type());
      send->set_device_id(producer.device_id());
      send->set_machine_id(producer.machine_id());
      send->set_source_location(producer.source_location());
      (*send->mutable_attrs())["channel"] = IntAttr(channel);
      (*send->mutable_attrs())["peer"] = IntAttr(task.machine_id());
      (*send->mutable_attrs())["bytes"] = IntAttr(bytes);
      plan::InputDesc* from = send->add_inputs();
      from->set_producer_task_id(new_id.at(producer.id()));
      from->set_producer_register(in.producer_register());
      from->set_blob_index(0);
      from->set_control(reg.blobs_size() == 0);
      plan::RegisterDesc* done = send->add_registers();
      done->set_name("done");
      done->set_register_num(register_num);
      sends.emplace_back(producer.machine_id(), send->id());

      plan::Task* recv = out.add_tasks();
      recv->set_id(out.tasks_size() - 1);
      recv->set_name("recv " + what);
      recv->set_kind(plan::COMPUTE);
      recv->set_op_type("recv");
      recv->set_asynchronous(true);
      recv->set_device_type(task.device_type());
      recv->set_device_id(task.device_id());
      recv->set_machine_id(task.machine_id());
      recv->set_source_location(producer.source_location());
      (*recv->mutable_attrs())["channel"] = IntAttr(channel);
      (*recv->mutable_attrs())["peer"] = IntAttr(producer.machine_id());
      (*recv->mutable_attrs())["bytes"] = IntAttr(bytes);
      plan::RegisterDesc* copy = recv->add_registers();
      *copy = reg;
      copy->clear_consumer_task_ids();
      copy->clear_memory_case();  // received into host memory
      copy->set_register_num(register_num);
      received.emplace(key, recv->id());
      ++channel;
    }
    plan::Task* copy = out.add_tasks();
    *copy = task;
    copy->set_id(out.tasks_size() - 1);
    new_id[index] = copy->id();
    for (plan::InputDesc& in : *copy->mutable_inputs()) {
      const plan::Task& producer = plan.tasks(static_cast<int>(in.producer_task_id()));
      if (producer.machine_id() == task.machine_id()) {
        in.set_producer_task_id(new_id.at(producer.id()));
        continue;
      }
      in.set_producer_task_id(received.at(std::make_tuple(producer.id(), in.producer_register(), task.machine_id())));
      in.set_producer_register(0);
    }
  }
  // A call on a machine completes once its sends were received: its main sink waits for them.
  std::map<int, int64_t> main_sink;
  for (const plan::Task& t : out.tasks())
    if (t.kind() == plan::SINK && t.sink_name().empty()) main_sink.emplace(t.machine_id(), t.id());
  for (const auto& [machine, send] : sends) {
    auto sink = main_sink.find(machine);
    if (sink == main_sink.end())
      return Internal("plan '" + plan.job_name() + "': machine " + std::to_string(machine) + " has no main sink");
    plan::InputDesc* in = out.mutable_tasks(static_cast<int>(sink->second))->add_inputs();
    in->set_producer_task_id(send);
    in->set_producer_register(0);
    in->set_control(true);
  }
  FillConsumers(out);
  return out;
}

StatusOr<MachinePlan> ExtractMachinePlan(const plan::Plan& plan, int machine) {
  MachinePlan local;
  local.plan.set_job_name(plan.job_name());
  std::vector<std::pair<int, plan::Task*>> sources;  // (global feed index, task)
  for (const plan::Task& t : plan.tasks()) {
    if (t.machine_id() != machine) continue;
    plan::Task* copy = local.plan.add_tasks();
    *copy = t;
    for (const plan::InputDesc& in : t.inputs())
      if (plan.tasks(static_cast<int>(in.producer_task_id())).machine_id() != machine)
        return Internal("plan '" + plan.job_name() + "': task '" + t.name() + "' on machine " + std::to_string(machine) +
                        " reads '" + plan.tasks(static_cast<int>(in.producer_task_id())).name() +
                        "' of another machine without a send/recv pair");
    if (t.kind() == plan::SOURCE) sources.emplace_back(t.feed_index(), copy);
  }
  if (local.plan.tasks_size() == 0)
    return InvalidArgument("plan '" + plan.job_name() + "' has no task on machine " + std::to_string(machine));
  std::sort(sources.begin(), sources.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t k = 0; k < sources.size(); ++k) {
    local.feeds.push_back(sources[k].first);
    sources[k].second->set_feed_index(static_cast<int>(k));
  }
  return local;
}

}  // namespace graph
}  // namespace actorflow

// Plans over several machines: send/recv pairs for the edges that cross machines, and each
// machine's part of a plan (graph/passes.h, docs/cluster.md).
#include <algorithm>
#include <map>
#include <string>
#include <set>
#include <tuple>
#include <vector>

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

std::string StringAttr(const plan::Task& task, const char* name) {
  auto it = task.attrs().find(name);
  return it == task.attrs().end() || it->second.value_case() != plan::AttrValue::kS ? "" : it->second.s();
}

std::vector<plan::InputDesc> DataInputs(const plan::Task& task) {
  std::vector<plan::InputDesc> data;
  for (const plan::InputDesc& in : task.inputs())
    if (!in.control()) data.push_back(in);
  return data;
}

// The partial values a boxing sums into one whole tensor, when they live on several machines:
// the gradient of a data-parallel variable, summed where the variable is updated. Either one
// boxing P -> B, or (blobs of kParallelSumBytes and more, graph/parallel.cc) a gather S(k) -> B
// of reduce-scatters P -> S(k) that all read the same partial values; then `scatters` gets the
// reduce-scatters. Empty when the task is no such sum.
std::vector<plan::InputDesc> CrossMachineSumInputs(const plan::Plan& plan, const plan::Task& task,
                                                   std::vector<int64_t>* scatters) {
  const std::string in_sbp = StringAttr(task, "in_sbp");
  if (task.op_type() != "boxing" || StringAttr(task, "out_sbp") != "B" || task.registers_size() != 1 ||
      task.registers(0).blobs_size() != 1)
    return {};
  const plan::DataType dtype = task.registers(0).blobs(0).dtype();
  if (dtype != plan::DT_FLOAT32 && dtype != plan::DT_FLOAT64) return {};
  std::vector<plan::InputDesc> partial;
  if (in_sbp == "P") {
    partial = DataInputs(task);
  } else if (in_sbp.rfind("S(", 0) == 0) {
    std::vector<int64_t> found;
    for (const plan::InputDesc& in : DataInputs(task)) {
      const plan::Task& scatter = plan.tasks(static_cast<int>(in.producer_task_id()));
      if (scatter.op_type() != "boxing" || StringAttr(scatter, "in_sbp") != "P" || StringAttr(scatter, "out_sbp") != in_sbp)
        return {};
      std::vector<plan::InputDesc> read = DataInputs(scatter);
      if (found.empty()) partial = read;
      if (read.size() != partial.size()) return {};
      for (size_t k = 0; k < read.size(); ++k)
        if (read[k].producer_task_id() != partial[k].producer_task_id() ||
            read[k].producer_register() != partial[k].producer_register() || read[k].has_view() || partial[k].has_view())
          return {};
      found.push_back(scatter.id());
    }
    if (scatters != nullptr) *scatters = found;
  } else {
    return {};
  }
  std::set<int> machines;
  for (const plan::InputDesc& in : partial) machines.insert(plan.tasks(static_cast<int>(in.producer_task_id())).machine_id());
  return machines.size() > 1 ? partial : std::vector<plan::InputDesc>{};
}

// A VARIABLE task holding one shard of a variable stored per device (ShardedVariable): it
// lives on its device's machine only and is never copied to another.
bool IsShard(const plan::Task& task) { return task.kind() == plan::VARIABLE && task.attrs().count("shard_parts") > 0; }

// Whether the task's data comes from several machines (a gather; control inputs do not count).
bool ReadsSeveralMachines(const plan::Plan& plan, const plan::Task& task) {
  std::set<int> machines;
  for (const plan::InputDesc& in : task.inputs())
    if (!in.control()) machines.insert(plan.tasks(static_cast<int>(in.producer_task_id())).machine_id());
  return machines.size() > 1;
}

}  // namespace

StatusOr<plan::Plan> ReplicateVariablesAcrossMachines(const plan::Plan& plan) {
  // The machines that read a variable of machine 0 (directly: data-parallel readers), and
  // machine 0. A machine that reads none (a job placed on machine 0 only) gets no copies.
  std::set<int> machines = {0};
  for (const plan::Task& t : plan.tasks())
    for (const plan::InputDesc& in : t.inputs()) {
      const plan::Task& producer = plan.tasks(static_cast<int>(in.producer_task_id()));
      if (producer.kind() == plan::VARIABLE && !IsShard(producer) && producer.machine_id() == 0 &&
          t.kind() != plan::SINK)
        machines.insert(t.machine_id());
    }
  // Replicated (by original id): the variables of machine 0, the tasks writing them, and what
  // those compute from on machine 0, back to the feeds and to the tasks reading several machines.
  std::vector<bool> replicated(plan.tasks_size(), false), summed(plan.tasks_size(), false);
  std::vector<int64_t> pending;
  for (const plan::Task& t : plan.tasks()) {
    if (t.machine_id() != 0) continue;
    bool writes_variable = false;  // a whole one: shards and their updates stay where they are
    for (int m : t.mutable_inputs()) {
      const plan::Task& written = plan.tasks(static_cast<int>(t.inputs(m).producer_task_id()));
      writes_variable |= written.kind() == plan::VARIABLE && !IsShard(written);
    }
    if ((t.kind() == plan::VARIABLE && !IsShard(t)) || writes_variable) pending.push_back(t.id());
  }
  if (machines.size() < 2 || pending.empty()) return plan;
  std::map<int64_t, std::vector<plan::InputDesc>> sum_inputs;  // summed task -> the partial values
  std::map<int64_t, std::set<int64_t>> scattered_into;         // reduce-scatter -> the summed gathers reading it
  while (!pending.empty()) {
    const int64_t id = pending.back();
    pending.pop_back();
    if (replicated[id] || summed[id]) continue;
    const plan::Task& t = plan.tasks(static_cast<int>(id));
    std::vector<int64_t> scatters;
    std::vector<plan::InputDesc> partial = CrossMachineSumInputs(plan, t, &scatters);
    bool in_ring = true;  // the ring runs over the machines with copies
    for (const plan::InputDesc& in : partial)
      in_ring &= machines.count(plan.tasks(static_cast<int>(in.producer_task_id())).machine_id()) > 0;
    if (!in_ring) partial.clear();
    if (!partial.empty()) {  // becomes an all-reduce: every machine gets the sum
      summed[id] = true;
      sum_inputs[id] = std::move(partial);
      for (int64_t scatter : scatters) scattered_into[scatter].insert(id);
      continue;
    }
    replicated[id] = true;
    if (ReadsSeveralMachines(plan, t)) continue;  // each copy reads those machines' tasks
    for (const plan::InputDesc& in : t.inputs()) {
      const plan::Task& producer = plan.tasks(static_cast<int>(in.producer_task_id()));
      if (!in.control() && producer.machine_id() == 0 && producer.kind() != plan::SOURCE) pending.push_back(producer.id());
    }
  }
  // Reduce-scatters read only by gathers that became all-reduces are left out.
  std::vector<bool> dropped(plan.tasks_size(), false);
  for (const auto& [scatter, gathers] : scattered_into) {
    bool only_gathers = true;
    for (const plan::Task& t : plan.tasks())
      for (const plan::InputDesc& in : t.inputs())
        only_gathers &= in.producer_task_id() != scatter || gathers.count(t.id()) > 0;
    dropped[scatter] = only_gathers;
  }
  std::vector<int> machine_list(machines.begin(), machines.end());
  plan::Plan out;
  out.set_job_name(plan.job_name());
  // copy[id][k]: the new id of task id's copy on machine_list[k] (replicated or summed tasks),
  // or its one new id (others).
  std::vector<std::vector<int64_t>> copy(plan.tasks_size());
  auto on = [&](int64_t id, int machine) -> int64_t {
    const std::vector<int64_t>& copies = copy.at(id);
    if (copies.size() == 1) return copies[0];
    const auto at = std::find(machine_list.begin(), machine_list.end(), machine);
    if (at == machine_list.end()) return copies[0];  // a machine without copies reads machine 0's
    return copies.at(static_cast<size_t>(at - machine_list.begin()));
  };
  int64_t channel = 0;
  for (const plan::Task& task : plan.tasks()) {
    const int64_t id = task.id();
    if (dropped[id]) continue;
    if (summed[id]) {
      // One ALL_REDUCE per machine over that machine's partial sums (comm/data_plane.h).
      plan::AttrValue ring;
      for (int m : machine_list) ring.mutable_ints()->add_values(m);
      for (int m : machine_list) {
        plan::Task* sum = out.add_tasks();
        sum->set_id(out.tasks_size() - 1);
        sum->set_name(m == 0 ? task.name() : task.name() + "@machine" + std::to_string(m));
        sum->set_kind(plan::COMPUTE);
        sum->set_op_type("all_reduce");
        sum->set_asynchronous(true);
        sum->set_device_type("cpu");
        sum->set_machine_id(m);
        sum->set_source_location(task.source_location());
        (*sum->mutable_attrs())["channel"].set_i(channel);
        (*sum->mutable_attrs())["ring"] = ring;
        bool device_set = false;
        for (const plan::InputDesc& in : sum_inputs.at(id)) {
          const plan::Task& producer = plan.tasks(static_cast<int>(in.producer_task_id()));
          if (producer.machine_id() != m) continue;
          if (!device_set) sum->set_device_id(producer.device_id());
          device_set = true;
          plan::InputDesc* local = sum->add_inputs();
          *local = in;
          local->set_producer_task_id(on(producer.id(), m));
        }
        if (!device_set)
          return Internal("plan '" + plan.job_name() + "': '" + task.name() + "' sums nothing of machine " + std::to_string(m));
        *sum->add_registers() = task.registers(0);
        sum->mutable_registers(0)->clear_consumer_task_ids();
        copy[id].push_back(sum->id());
      }
      ++channel;
      continue;
    }
    const std::vector<int> targets = replicated[id] ? machine_list : std::vector<int>{task.machine_id()};
    for (int m : targets) {
      plan::Task* made = out.add_tasks();
      *made = task;
      made->set_id(out.tasks_size() - 1);
      if (m != task.machine_id()) {
        made->set_name(task.name() + "@machine" + std::to_string(m));
        made->set_machine_id(m);
      }
      made->clear_inputs();
      for (const plan::InputDesc& in : task.inputs()) {
        const plan::Task& producer = plan.tasks(static_cast<int>(in.producer_task_id()));
        const bool shared = replicated[producer.id()] || summed[producer.id()];
        // A copy orders its writes after the readers of its own machine only: the others read
        // their own copy of the variable.
        if (replicated[id] && in.control() && !shared && producer.machine_id() != m) continue;
        plan::InputDesc* kept = made->add_inputs();
        *kept = in;
        kept->set_producer_task_id(shared ? on(producer.id(), m) : copy[producer.id()].at(0));
      }
      copy[id].push_back(made->id());
    }
  }
  // Every machine's main sink waits for its copies as machine 0's waits for the originals (the
  // updates: a call completes on a machine once its variables are updated).
  std::map<int, plan::Task*> main_sink;
  for (plan::Task& t : *out.mutable_tasks())
    if (t.kind() == plan::SINK && t.sink_name().empty()) main_sink.emplace(t.machine_id(), &t);
  if (auto zero = main_sink.find(0); zero != main_sink.end()) {
    std::map<int64_t, size_t> original_of;  // new id on machine 0 -> original id (replicated tasks)
    for (size_t original = 0; original < copy.size(); ++original)
      if (replicated[original]) original_of.emplace(copy[original].at(0), original);
    std::vector<plan::InputDesc> waited;
    for (const plan::InputDesc& in : zero->second->inputs())
      if (in.control() && original_of.count(in.producer_task_id())) waited.push_back(in);
    for (const plan::InputDesc& in : waited)
      for (size_t k = 1; k < machine_list.size(); ++k) {
        auto sink = main_sink.find(machine_list[k]);
        if (sink == main_sink.end()) continue;
        plan::InputDesc* wait = sink->second->add_inputs();
        *wait = in;
        wait->set_producer_task_id(copy[original_of.at(in.producer_task_id())][k]);
      }
  }
  FillConsumers(out);
  return out;
}

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

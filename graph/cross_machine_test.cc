// Plans over several machines: machine ranges, transfers and all-reduces between machines,
// per-machine inputs and results, and variables stored as shards across machines
// (graph::ShardedVariable, docs/cluster.md "Variables across machines"): each machine's plan
// holds only its devices' parts.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "graph/passes.h"
#include "graph/test_util.h"

namespace actorflow {
namespace graph {
namespace {

using testing::FindTask;
using testing::ValueOrDie;

Graph MlpOnTwoMachines(int devices, const std::string& variable, const Sbp& hint) {
  testing::Mlp m = testing::BuildMlp("train", 8, 6, 4, 2);
  Graph g = m.builder.graph();
  g.set_machine_num(2);
  g.set_device_num(devices);
  for (Node& n : g.mutable_nodes())
    if (n.name == variable) n.output_sbp_hints = {hint};
  return g;
}

int64_t Attr(const plan::Task& task, const char* name) {
  auto it = task.attrs().find(name);
  return it == task.attrs().end() ? -1 : it->second.i();
}

// A weight split on axis 1 (strided shards) over 2 machines x `devices`: one VARIABLE task per
// device holding that device's columns only, none copied to the other machine, each updated in
// place on its own device by a task reading its own shard; the whole weights of the other layer
// are copied to both machines as before (data parallelism).
TEST(ShardedVariableTest, ASplitWeightIsOneShardPerDeviceOnItsMachineUpdatedThere) {
  for (int devices : {1, 2}) {
    Graph g = MlpOnTwoMachines(devices, "hidden-weight", Sbp::Split(1));
    const plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
    const int parts = 2 * devices;
    std::map<int64_t, const plan::Task*> shards;
    int output_copies = 0;
    for (const plan::Task& t : plan.tasks()) {
      if (t.kind() != plan::VARIABLE) continue;
      if (t.variable_name() == "output-weight") ++output_copies;
      if (t.variable_name() != "hidden-weight") continue;
      ASSERT_EQ(Attr(t, "shard_parts"), parts) << t.name();
      EXPECT_EQ(Attr(t, "shard_axis"), 1) << t.name();
      const int64_t index = Attr(t, "shard_index");
      EXPECT_EQ(shards.count(index), 0u) << t.name();
      shards[index] = &t;
      EXPECT_EQ(t.machine_id(), index / devices) << t.name();
      EXPECT_EQ(t.device_id(), index % devices) << t.name();
      const plan::BlobDesc& blob = t.registers(0).blobs(0);
      EXPECT_EQ(std::vector<int64_t>(blob.shape().begin(), blob.shape().end()), (std::vector<int64_t>{6, 4 / parts}))
          << t.name();
      EXPECT_EQ(t.name().find("@machine"), std::string::npos) << t.name() << " is a copy";
    }
    EXPECT_EQ(static_cast<int>(shards.size()), parts);
    EXPECT_EQ(output_copies, 2) << "the whole weight is copied to both machines";
    // Each shard is written by exactly one task, on the shard's machine and device, which reads
    // the shard's register whole (no part view of another buffer).
    std::map<int64_t, int> writers;
    for (const plan::Task& t : plan.tasks())
      for (int m : t.mutable_inputs()) {
        const plan::InputDesc& in = t.inputs(m);
        const plan::Task& written = plan.tasks(static_cast<int>(in.producer_task_id()));
        if (written.variable_name() != "hidden-weight") continue;
        ++writers[written.id()];
        EXPECT_EQ(t.machine_id(), written.machine_id()) << t.name();
        EXPECT_EQ(t.device_id(), written.device_id()) << t.name();
        EXPECT_FALSE(in.part()) << t.name();
      }
    for (const auto& [index, shard] : shards) EXPECT_EQ(writers[shard->id()], 1) << shard->name();
    // Every task reading a shard runs on the shard's machine (no weight crosses the network).
    for (const plan::Task& t : plan.tasks())
      for (const plan::InputDesc& in : t.inputs()) {
        const plan::Task& producer = plan.tasks(static_cast<int>(in.producer_task_id()));
        if (producer.variable_name() == "hidden-weight" && producer.kind() == plan::VARIABLE) {
          EXPECT_EQ(t.machine_id(), producer.machine_id()) << t.name() << " reads " << producer.name();
        }
      }
    // Each machine's part has its own shards only.
    for (int machine : {0, 1}) {
      const MachinePlan local = ValueOrDie(ExtractMachinePlan(plan, machine));
      int held = 0;
      for (const plan::Task& t : local.plan.tasks())
        if (t.kind() == plan::VARIABLE && t.variable_name() == "hidden-weight") {
          ++held;
          EXPECT_EQ(Attr(t, "shard_index") / devices, machine) << t.name();
        }
      EXPECT_EQ(held, devices) << "machine " << machine;
    }
  }
}

// One process keeps its one buffer for the same hint (shards are parts of it or it is whole).
TEST(ShardedVariableTest, OneMachineKeepsOneBufferPerVariable) {
  testing::Mlp m = testing::BuildMlp("train", 8, 6, 4, 2);
  Graph g = m.builder.graph();
  g.set_device_num(2);
  for (Node& n : g.mutable_nodes())
    if (n.name == "hidden-weight") n.output_sbp_hints = {Sbp::Split(1)};
  const plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  int tasks = 0;
  for (const plan::Task& t : plan.tasks())
    if (t.kind() == plan::VARIABLE && t.variable_name() == "hidden-weight") {
      ++tasks;
      EXPECT_EQ(t.attrs().count("shard_parts"), 0u);
    }
  EXPECT_EQ(tasks, 1);
}

TEST(CrossMachineTest, MachineRangesResolveToGlobalDevices) {
  EXPECT_EQ(ValueOrDie(ResolvePlacement(Placement{"cpu", {"0-1:0"}}, 1, 0, 2)), (std::vector<int>{0, 1}));
  EXPECT_EQ(ValueOrDie(ResolvePlacement(Placement{"cpu", {"1:0-1"}}, 2, 0, 2)), (std::vector<int>{2, 3}));
  EXPECT_EQ(ValueOrDie(ResolvePlacement(Placement{"cpu", {}}, 2, 0, 2)), (std::vector<int>{0, 1, 2, 3}));
  auto missing = ResolvePlacement(Placement{"cpu", {"0-2:0"}}, 1, 0, 2);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("machine 2 does not exist: machine_num is 2"), std::string::npos)
      << missing.status().message();
  auto twice = ResolvePlacement(Placement{"cpu", {"0-1:0", "1:0"}}, 1, 0, 2);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("device 1:0 is listed twice"), std::string::npos) << twice.status().message();
}

// The seed MLP trained data-parallel on 2 machines x 1 device computes exactly what it computes
// on 1 machine x 2 devices (same tasks on the same global devices, same attributes), except that
// the gradients summed across machines are all-reduces and that machine 1 holds a copy of every
// variable and updates it itself (ReplicateVariablesAcrossMachines), plus one send/recv pair per
// edge that still crosses machines; each machine's part reads only its own tasks.
TEST(CrossMachineTest, TwoMachinesRunTheTwoDevicePlanWithVariablesOnEachAndAllReduces) {
  // 40000 rows: the activations outweigh the gradients, so one process sums partial gradients
  // too (a small reduction of few rows is computed whole on one device there instead).
  testing::Mlp one = testing::BuildMlp("train", 40000, 3, 5, 2);
  Graph g1 = one.builder.graph();
  g1.set_device_num(2);
  const plan::Plan two_devices = ValueOrDie(CompileGraph(g1, CompileOptions{}));
  testing::Mlp two = testing::BuildMlp("train", 40000, 3, 5, 2);
  Graph g2 = two.builder.graph();
  g2.set_machine_num(2);
  const plan::Plan two_machines = ValueOrDie(CompileGraph(g2, CompileOptions{}));

  auto attrs_text = [](const plan::Task& t) {
    std::map<std::string, std::string> sorted;
    for (const auto& [key, value] : t.attrs()) sorted[key] = value.SerializeAsString();
    std::string text;
    for (const auto& [key, value] : sorted) text += key + "=" + value + ";";
    return text;
  };
  int computed = 0, all_reduced = 0, variables = 0, updates = 0;
  for (const plan::Task& t : two_devices.tasks()) {
    if (t.kind() == plan::SINK) continue;
    const plan::Task* same = FindTask(two_machines, t.name());
    ASSERT_NE(same, nullptr) << t.name();
    const plan::Task* copy = FindTask(two_machines, t.name() + "@machine1");
    if (same->op_type() == "all_reduce") {
      // A partial gradient summed over both machines: one all-reduce per machine, over that
      // machine's part, with the same channel and ring.
      ++all_reduced;
      EXPECT_EQ(t.op_type(), "boxing") << t.name();
      EXPECT_EQ(t.attrs().at("in_sbp").s(), "P") << t.name();
      ASSERT_NE(copy, nullptr) << t.name();
      EXPECT_EQ(copy->op_type(), "all_reduce");
      for (const plan::Task* sum : {same, copy}) {
        EXPECT_TRUE(sum->asynchronous());
        EXPECT_EQ(sum->attrs().at("ring").ints().values_size(), 2) << t.name();
        EXPECT_EQ(sum->attrs().at("channel").i(), same->attrs().at("channel").i());
        ASSERT_EQ(sum->inputs_size(), 1) << t.name();
        EXPECT_EQ(two_machines.tasks(static_cast<int>(sum->inputs(0).producer_task_id())).machine_id(), sum->machine_id());
        EXPECT_EQ(sum->registers(0).blobs(0).SerializeAsString(), t.registers(0).blobs(0).SerializeAsString());
      }
      EXPECT_EQ(same->machine_id(), 0);
      EXPECT_EQ(copy->machine_id(), 1);
      continue;
    }
    EXPECT_EQ(same->op_type(), t.op_type()) << t.name();
    EXPECT_EQ(attrs_text(*same), attrs_text(t)) << t.name();
    EXPECT_EQ(same->machine_id() * 1 + same->device_id(), t.device_id()) << t.name();
    EXPECT_EQ(same->device_id(), 0) << t.name();
    computed += t.kind() == plan::COMPUTE;
    if (t.kind() == plan::VARIABLE || t.mutable_inputs_size() > 0) {
      // Every variable and every update has its copy on machine 1.
      variables += t.kind() == plan::VARIABLE;
      updates += t.mutable_inputs_size() > 0;
      ASSERT_NE(copy, nullptr) << t.name();
      EXPECT_EQ(copy->machine_id(), 1);
      EXPECT_EQ(copy->kind(), t.kind());
      EXPECT_EQ(copy->variable_name(), t.variable_name());
      EXPECT_EQ(attrs_text(*copy), attrs_text(t)) << t.name();
    }
  }
  EXPECT_GT(computed, 10);
  EXPECT_EQ(variables, 3);
  EXPECT_EQ(updates, 3);
  EXPECT_GE(all_reduced, 1);
  std::map<int64_t, const plan::Task*> sends, recvs;  // by channel
  for (const plan::Task& t : two_machines.tasks()) {
    for (const plan::InputDesc& in : t.inputs()) {
      const plan::Task& producer = two_machines.tasks(static_cast<int>(in.producer_task_id()));
      EXPECT_LT(in.producer_task_id(), t.id()) << t.name() << " reads " << producer.name();
      EXPECT_EQ(producer.machine_id(), t.machine_id()) << t.name() << " reads " << producer.name();
      // An update's in-place order: only with readers of its own machine's copy, no control
      // edge through the network.
      if (in.control() && t.mutable_inputs_size() > 0) {
        EXPECT_NE(producer.op_type(), "recv") << t.name();
      }
    }
    if (t.op_type() == "send") sends[t.attrs().at("channel").i()] = &t;
    else if (t.op_type() == "recv") recvs[t.attrs().at("channel").i()] = &t;
    else if (t.kind() != plan::SINK) {
      EXPECT_TRUE(FindTask(two_devices, t.name()) != nullptr ||
                  (t.name().size() > 9 && t.name().substr(t.name().size() - 9) == "@machine1") ||
                  t.op_type() == "boxing")  // gathered in place in one process, a task across machines
          << t.name();
    }
  }
  ASSERT_FALSE(sends.empty());
  ASSERT_EQ(sends.size(), recvs.size());
  for (const auto& [channel, send] : sends) {
    const plan::Task& recv = *recvs.at(channel);
    EXPECT_TRUE(send->asynchronous() && recv.asynchronous());
    EXPECT_EQ(send->attrs().at("peer").i(), recv.machine_id());
    EXPECT_EQ(recv.attrs().at("peer").i(), send->machine_id());
    EXPECT_NE(send->machine_id(), recv.machine_id());
    EXPECT_EQ(send->attrs().at("bytes").i(), recv.attrs().at("bytes").i());
    const plan::Task& producer = two_machines.tasks(static_cast<int>(send->inputs(0).producer_task_id()));
    const plan::RegisterDesc& sent = producer.registers(send->inputs(0).producer_register());
    ASSERT_EQ(recv.registers_size(), 1);
    ASSERT_EQ(recv.registers(0).blobs_size(), sent.blobs_size());
    if (sent.blobs_size() == 1) {
      EXPECT_EQ(recv.registers(0).blobs(0).SerializeAsString(), sent.blobs(0).SerializeAsString());
      EXPECT_EQ(send->attrs().at("bytes").i(), sent.blobs(0).byte_size());
    }
    EXPECT_EQ(recv.registers(0).register_num(), 2);
    EXPECT_NE(producer.kind(), plan::VARIABLE) << "each machine reads its own copy of " << producer.name();
    EXPECT_NE(producer.op_type(), "all_reduce") << producer.name();
    EXPECT_EQ(producer.mutable_inputs_size(), 0) << producer.name();
  }
  // Each machine's main sink waits for its own updates.
  for (const plan::Task& t : two_machines.tasks()) {
    if (t.kind() != plan::SINK || !t.sink_name().empty()) continue;
    int waited_updates = 0;
    for (const plan::InputDesc& in : t.inputs())
      waited_updates += in.control() && two_machines.tasks(static_cast<int>(in.producer_task_id())).mutable_inputs_size() > 0;
    EXPECT_EQ(waited_updates, 3) << t.name();
  }

  // Each machine's part: its own tasks, one main sink returning the loss, feeds only where the
  // sources are (machine 0 holds the whole batch and sends machine 1 its half).
  const MachinePlan zero = ValueOrDie(ExtractMachinePlan(two_machines, 0));
  const MachinePlan first = ValueOrDie(ExtractMachinePlan(two_machines, 1));
  EXPECT_EQ(zero.plan.tasks_size() + first.plan.tasks_size(), two_machines.tasks_size());
  std::vector<int> all_feeds;
  for (const plan::Task& t : two_machines.tasks())
    if (t.kind() == plan::SOURCE) all_feeds.push_back(static_cast<int>(all_feeds.size()));
  EXPECT_GE(all_feeds.size(), 2u);
  EXPECT_EQ(zero.feeds, all_feeds);
  EXPECT_TRUE(first.feeds.empty());
  for (const MachinePlan* part : {&zero, &first}) {
    int main_sinks = 0;
    for (const plan::Task& t : part->plan.tasks()) {
      if (t.kind() != plan::SINK || !t.sink_name().empty()) continue;
      ++main_sinks;
      int data_inputs = 0;
      for (const plan::InputDesc& in : t.inputs()) data_inputs += !in.control();
      EXPECT_EQ(data_inputs, 1) << t.name() << ": the loss";
    }
    EXPECT_EQ(main_sinks, 1);
  }
  EXPECT_FALSE(ExtractMachinePlan(two_machines, 2).ok());
}

// A gradient of 64 KB a device and more is summed in one process by a reduce-scatter on every
// device and a gather (graph/parallel.cc, kParallelSumBytes); across machines the pair becomes one all-reduce
// per machine and the reduce-scatters, which would pull every machine's whole partial gradient
// through the network, are left out.
TEST(CrossMachineTest, ALargeGradientsReduceScatterAndGatherBecomeOneAllReducePerMachine) {
  testing::Mlp one = testing::BuildMlp("train", 64, 3, 10000, 4);  // output-weight: 10000 x 4 floats, 160 KB
  Graph g1 = one.builder.graph();
  g1.set_device_num(2);
  const plan::Plan two_devices = ValueOrDie(CompileGraph(g1, CompileOptions{}));
  std::vector<std::string> scatters;
  for (const plan::Task& t : two_devices.tasks())
    if (t.op_type() == "boxing" && t.attrs().at("in_sbp").s() == "P" && t.attrs().at("out_sbp").s() == "S(0)")
      scatters.push_back(t.name());
  ASSERT_FALSE(scatters.empty()) << "the one-process plan sums the large gradient by reduce-scatter";
  testing::Mlp two = testing::BuildMlp("train", 64, 3, 10000, 4);
  Graph g2 = two.builder.graph();
  g2.set_machine_num(2);
  const plan::Plan two_machines = ValueOrDie(CompileGraph(g2, CompileOptions{}));
  for (const std::string& name : scatters) EXPECT_EQ(FindTask(two_machines, name), nullptr) << name;
  int all_reduces = 0;
  for (const plan::Task& t : two_machines.tasks()) {
    if (t.op_type() == "all_reduce") {
      ++all_reduces;
      ASSERT_EQ(t.inputs_size(), 1) << t.name();
      const plan::Task& partial = two_machines.tasks(static_cast<int>(t.inputs(0).producer_task_id()));
      EXPECT_EQ(partial.machine_id(), t.machine_id());
      EXPECT_NE(partial.op_type(), "recv") << t.name() << " sums its own machine's partial gradient";
    }
    EXPECT_FALSE(t.op_type() == "boxing" && t.attrs().at("in_sbp").s() == "P") << t.name();
  }
  EXPECT_GE(all_reduces, 2);
  EXPECT_EQ(all_reduces % 2, 0);
}

// A job whose tasks all run on machine 0 of two gives machine 1 no copies of its variables (only
// its main sink, which receives the results), and no all-reduce.
TEST(CrossMachineTest, MachinesThatReadNoVariableGetNoCopies) {
  testing::Mlp m = testing::BuildMlp("train", 4, 3, 5, 2);
  Graph g = m.builder.graph();
  g.set_machine_num(2);
  for (Node& n : g.mutable_nodes()) n.placement = Placement{"cpu", {"0:0"}};
  const plan::Plan p = ValueOrDie(CompileGraph(g, CompileOptions{}));
  for (const plan::Task& t : p.tasks()) {
    if (t.machine_id() == 1) {
      EXPECT_TRUE(t.kind() == plan::SINK || t.op_type() == "recv") << t.name();
    }
    EXPECT_NE(t.op_type(), "all_reduce") << t.name();
  }
}

// The mirrored view's list placeholder fed per machine and its list result fetched per machine
// (FedPerMachine, OutputPerMachine), 2 machines x 2 devices: one source per machine holding its
// rows, each device reading its rows of its own machine's source, each machine's sink reading a
// gather of its own devices' rows: no byte crosses machines.
TEST(CrossMachineTest, PlaceholdersAndResultsPerMachineCrossNoMachine) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("mirrored", "predict"));
  ASSERT_TRUE(b.SetDeviceNum(2, 0).ok());
  ASSERT_TRUE(b.SetMachineNum(2).ok());
  const std::string x = ValueOrDie(b.AddInput("x", {8, 3}, DType::kFloat32, "m.py:1"));
  ASSERT_TRUE(b.SetOutputSbpHint(x, Sbp::Split(0)).ok());
  ASSERT_TRUE(b.SetFedPerMachine(x).ok());
  const std::string y = ValueOrDie(b.AddOp("relu", "relu", {x}, {}, "m.py:2"))->output_ref(0);
  Attrs per_machine;
  per_machine.Set(kOutputPerMachineAttr, true);
  const std::string own = ValueOrDie(b.AddOp("identity", "relu-own", {y}, per_machine, "m.py:2"))->output_ref(0);
  ASSERT_TRUE(b.SetOutputSbpHint(own, Sbp::Split(0)).ok());
  ASSERT_TRUE(b.SetOutputs({own}).ok());
  EXPECT_FALSE(b.SetFedPerMachine(y).ok());  // only a placeholder
  Graph g = b.graph();
  const plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  std::map<int, int64_t> source_of_machine;
  for (const plan::Task& t : plan.tasks()) {
    EXPECT_NE(t.op_type(), "send") << t.name();
    EXPECT_NE(t.op_type(), "recv") << t.name();
    if (t.kind() != plan::SOURCE) continue;
    EXPECT_EQ(t.feed_index(), 0) << t.name();
    EXPECT_EQ(t.device_id(), 0) << t.name();
    EXPECT_EQ(t.registers(0).blobs(0).byte_size(), 4 * 3 * 4) << t.name();  // the machine's 4 rows
    EXPECT_TRUE(source_of_machine.emplace(t.machine_id(), t.id()).second) << t.name();
  }
  ASSERT_EQ(source_of_machine.size(), 2u);
  int relus = 0;
  for (const plan::Task& t : plan.tasks()) {
    if (t.op_type() != "relu") continue;
    ++relus;
    ASSERT_EQ(t.inputs_size(), 1) << t.name();
    EXPECT_EQ(t.inputs(0).producer_task_id(), source_of_machine.at(t.machine_id())) << t.name();
    EXPECT_TRUE(t.inputs(0).part()) << t.name();
    EXPECT_EQ(t.inputs(0).byte_offset(), t.device_id() * 2 * 3 * 4) << t.name();  // its 2 rows of its machine's 4
  }
  EXPECT_EQ(relus, 4);
  int sinks = 0;
  for (const plan::Task& t : plan.tasks()) {
    if (t.kind() != plan::SINK) continue;
    ++sinks;
    ASSERT_EQ(t.inputs_size(), 1) << t.name();
    const plan::Task& gather = plan.tasks(static_cast<int>(t.inputs(0).producer_task_id()));
    EXPECT_EQ(gather.op_type(), "boxing") << gather.name();
    EXPECT_EQ(gather.machine_id(), t.machine_id()) << gather.name();
    EXPECT_EQ(gather.registers(0).blobs(0).byte_size(), 4 * 3 * 4) << gather.name();
    EXPECT_EQ(gather.inputs_size(), 2) << gather.name();
  }
  EXPECT_EQ(sinks, 2);
  const MachinePlan second = ValueOrDie(ExtractMachinePlan(plan, 1));
  EXPECT_EQ(second.feeds, std::vector<int>{0});
}

// A plan on one machine is left alone: no transfer, the same task ids.
TEST(CrossMachineTest, OneMachinePlanHasNoTransfers) {
  testing::Mlp m = testing::BuildMlp("train", 4, 3, 5, 2);
  Graph g = m.builder.graph();
  g.set_device_num(2);
  const plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  const plan::Plan same = ValueOrDie(InsertCrossMachineTransfers(plan, 2));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(same, plan));
  for (const plan::Task& t : plan.tasks()) EXPECT_EQ(t.machine_id(), 0);
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

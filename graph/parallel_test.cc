// Placement, SBP and boxing passes and the physical lowering: what the plan looks like.
// (Running the plans against one device: session/parallel_test.cc.)
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "graph/passes.h"
#include "graph/test_util.h"

namespace actorflow {
namespace graph {
namespace {

using testing::FindTask;
using testing::ValueOrDie;

// Whether `task` waits for `producer` in the same iteration (data or control, transitively).
bool RunsAfter(const plan::Plan& plan, const plan::Task& task, const std::string& producer) {
  const plan::Task* p = FindTask(plan, producer);
  if (p == nullptr) return false;
  std::vector<int64_t> stack = {task.id()};
  std::vector<bool> seen(plan.tasks_size(), false);
  while (!stack.empty()) {
    const plan::Task& t = plan.tasks(static_cast<int>(stack.back()));
    stack.pop_back();
    for (const plan::InputDesc& in : t.inputs()) {
      if (in.producer_task_id() == p->id()) return true;
      if (!seen[in.producer_task_id()]) {
        seen[in.producer_task_id()] = true;
        stack.push_back(in.producer_task_id());
      }
    }
  }
  return false;
}

int DataInputCount(const plan::Task& task) {
  int count = 0;
  for (const plan::InputDesc& in : task.inputs()) count += in.control() ? 0 : 1;
  return count;
}

bool HasControlFrom(const plan::Plan& plan, const plan::Task& task, const std::string& producer) {
  const plan::Task* p = FindTask(plan, producer);
  if (p == nullptr) return false;
  for (const plan::InputDesc& in : task.inputs())
    if (in.control() && in.producer_task_id() == p->id()) return true;
  return false;
}

TEST(ParallelPassesTest, OneDeviceHasNoBoxingAndOneTaskPerOp) {
  testing::Mlp m = testing::BuildMlp("train", 4, 3, 5, 2);
  Graph g = m.builder.graph();
  plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  for (const Node& n : g.nodes()) {
    EXPECT_NE(n.type, "boxing") << n.name;
    EXPECT_EQ(n.devices, std::vector<int>{0}) << n.name;
  }
  for (const plan::Task& t : plan.tasks()) {
    EXPECT_EQ(t.device_id(), 0);
    EXPECT_EQ(t.name().find('@'), std::string::npos) << t.name();
  }
}

TEST(ParallelPassesTest, DataParallelMlpOnThreeDevices) {
  testing::Mlp m = testing::BuildMlp("train", 10, 3, 5, 2);
  Graph g = m.builder.graph();
  g.set_device_num(3);
  plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  const std::string summary = SbpSummary(g);
  // Feeds split on the batch axis (10 rows: 4/3/3) and read in place, each device its rows of
  // the feed's register (no slicing task), the forward matmul data-parallel, the weight
  // gradients (small: 3x5 and 5x2 floats from 10 rows) computed whole on device 0 from the
  // gathered activations, inside their updates, rather than from partial sums that a task
  // would have to sum.
  EXPECT_NE(summary.find("x (input) on cpu 0:0,0:1,0:2: ->S(0)"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("x-boxing"), std::string::npos) << summary;
  EXPECT_NE(summary.find("hidden-weight-update (matmul_sgd_update) on cpu 0:0: B,B,B,B->"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("output-weight-update (matmul_sgd_update) on cpu 0:0: B,B,B,B->"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("hidden-bias_add-grad (bias_add_grad) on cpu 0:0: B->B"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("P->B"), std::string::npos) << summary;
  // The loss's gradient seed is made split where its reader reads it split: no boxing.
  EXPECT_NE(summary.find("loss-grad-seed (constant) on cpu 0:0,0:1,0:2: ->S(0)"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("loss-grad-seed-boxing"), std::string::npos) << summary;
  const int64_t first_row[] = {0, 4, 7}, rows[] = {4, 3, 3};
  for (int d = 0; d < 3; ++d) {
    const plan::Task* matmul = FindTask(plan, "hidden-matmul@" + std::to_string(d));
    ASSERT_NE(matmul, nullptr) << d;
    EXPECT_EQ(matmul->device_id(), d);
    const plan::InputDesc& x = matmul->inputs(0);
    EXPECT_EQ(plan.tasks(static_cast<int>(x.producer_task_id())).name(), "x") << PlanToDot(plan);
    EXPECT_TRUE(x.part()) << d;
    EXPECT_EQ(x.byte_offset(), first_row[d] * 3 * 4) << d;  // rows of 3 float32
    ASSERT_EQ(x.view_shape_size(), 2);
    EXPECT_EQ(x.view_shape(0), rows[d]);
  }
  // The update runs once, and after the readers of its variable on every device.
  const plan::Task* update = FindTask(plan, "hidden-weight-update");
  ASSERT_NE(update, nullptr);
  for (int d = 0; d < 3; ++d) EXPECT_TRUE(RunsAfter(plan, *update, "hidden-matmul@" + std::to_string(d))) << d;
  // DOT shows devices and layouts, boxing nodes stand out.
  const std::string dot = g.ToDot();
  EXPECT_NE(dot.find("fillcolor=orange"), std::string::npos);
  EXPECT_NE(dot.find("on cpu 0:0,0:1,0:2: S(0),B,B->S(0)"), std::string::npos) << dot;
}

// P->B (a weight gradient's all-reduce) is a reduce-scatter whose per-device sums are slices of
// one block: no gather task; the update reads the block whole and waits for every slice.
TEST(ParallelPassesTest, AllReduceWritesEachDevicesSumIntoOneBlock) {
  testing::Mlp m = testing::BuildMlp("train", 300, 128, 512, 2);
  Graph g = m.builder.graph();
  g.set_device_num(3);
  plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  const plan::Task* update = FindTask(plan, "hidden-weight-update");
  ASSERT_NE(update, nullptr) << PlanToDot(plan);
  // The weight's gradient (128 x 512 floats, 256 KiB: three chunks of at least 64 KiB) is
  // summed where it is made, each device its rows, and read whole by the update on device 0:
  // a view of the logical shape.
  const plan::InputDesc* whole = nullptr;
  for (const plan::InputDesc& in : update->inputs())
    if (in.whole()) whole = &in;
  ASSERT_NE(whole, nullptr) << PlanToDot(plan);
  EXPECT_EQ(std::vector<int64_t>(whole->view_shape().begin(), whole->view_shape().end()), (std::vector<int64_t>{128, 512}));
  const plan::Task& owner = plan.tasks(static_cast<int>(whole->producer_task_id()));
  EXPECT_EQ(owner.op_type(), "boxing");
  EXPECT_EQ(owner.device_id(), 0);
  const plan::RegisterDesc& block = owner.registers(whole->producer_register());
  EXPECT_EQ(block.reserved_byte_size(), 128 * 512 * 4);
  EXPECT_EQ(block.blobs(0).shape(0), 43);  // rows 0..42 of 128 (43/43/42)
  // Devices 1 and 2 sum rows 43..85 and 86..127 into the block at their offsets; the update
  // waits for them (control inputs on their registers).
  int64_t offset = 43 * 512 * 4;
  for (int d = 1; d < 3; ++d) {
    const std::string name = owner.name().substr(0, owner.name().size() - 1) + std::to_string(d);
    const plan::Task* slice = FindTask(plan, name);
    ASSERT_NE(slice, nullptr) << name;
    EXPECT_EQ(slice->device_id(), d);
    const plan::RegisterDesc& r = slice->registers(whole->producer_register());
    ASSERT_TRUE(r.has_slice_of()) << name;
    EXPECT_EQ(r.slice_of().task_id(), owner.id());
    EXPECT_EQ(r.slice_of().byte_offset(), offset);
    offset += r.blobs(0).byte_size();
    EXPECT_TRUE(HasControlFrom(plan, *update, name)) << name;
  }
  EXPECT_EQ(offset, 128 * 512 * 4);
  // The plan's DOT shows the block, the slices and the whole read.
  const std::string dot = PlanToDot(plan);
  EXPECT_NE(dot.find("in a block of 262144 B"), std::string::npos) << dot;
  EXPECT_NE(dot.find("at +88064 B of #" + std::to_string(owner.id())), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=whole"), std::string::npos) << dot;
  // No task gathers it; the small gradients (under 64 KiB) are summed by one task on device 0.
  EXPECT_EQ(FindTask(plan, "hidden-matmul-grad-boxing-boxing"), nullptr) << PlanToDot(plan);
  const plan::Task* small = FindTask(plan, "output-matmul-grad_1-boxing");
  ASSERT_NE(small, nullptr) << PlanToDot(plan);
  EXPECT_EQ(small->device_id(), 0);
}

// Each task of an all-reduce sums at least 64 KiB: a task and its message hop cost more than
// summing less. A sum read on its own devices (P->B there) under 64 KiB is one task; one of a
// few chunks is reduced by as many tasks, on the first devices, and read whole by all.
TEST(ParallelPassesTest, AllReduceTasksSumAtLeastAChunkEach) {
  // A matmul over a contraction axis split on both operands computes partial sums, read whole
  // on the same devices (an identity hinted B, parallel_cast's op): rows x 16 floats.
  auto compile = [](int64_t rows, int devices) {
    JobBuilder b = ValueOrDie(JobBuilder::Create("partial", "predict"));
    if (!b.SetDeviceNum(devices).ok()) throw std::runtime_error("SetDeviceNum");
    std::string x = ValueOrDie(b.AddInput("x", {rows, 8}, DType::kFloat32, "p.py:1"));
    std::string w = ValueOrDie(b.AddVariable("weight", {8, 16}, DType::kFloat32, "p.py:2"));
    if (!b.SetOutputSbpHint(x, Sbp::Split(1)).ok() || !b.SetOutputSbpHint(w, Sbp::Split(0)).ok())
      throw std::runtime_error("hints");
    std::string t = ValueOrDie(b.AddOp("matmul", "partial", {x, w}, {}, "p.py:3"))->output_ref(0);
    std::string whole = ValueOrDie(b.AddOp("identity", "whole", {t}, {}, "p.py:4"))->output_ref(0);
    if (!b.SetOutputSbpHint(whole, Sbp::Broadcast()).ok()) throw std::runtime_error("hint");
    std::string y = ValueOrDie(b.AddOp("sigmoid", "after", {whole}, {}, "p.py:5"))->output_ref(0);
    if (!b.SetOutputs({y}).ok()) throw std::runtime_error("SetOutputs");
    Graph g = b.graph();
    plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
    return std::make_pair(SbpSummary(g), plan);
  };
  auto boxing_tasks = [](const plan::Plan& plan) {
    std::vector<const plan::Task*> tasks;
    for (const plan::Task& t : plan.tasks())  // the sums (not x's slicing)
      if (t.op_type() == "boxing" && t.attrs().at("in_sbp").s() == "P") tasks.push_back(&t);
    return tasks;
  };
  {  // 100 x 16 floats (6.4 KB) over 4 devices: one task on device 0 sums the four partials.
    auto [summary, plan] = compile(100, 4);
    EXPECT_NE(summary.find("partial (matmul) on cpu 0:0,0:1,0:2,0:3: S(1),S(0)->P"), std::string::npos) << summary;
    const auto tasks = boxing_tasks(plan);
    ASSERT_EQ(tasks.size(), 1u) << PlanToDot(plan);
    EXPECT_EQ(tasks[0]->device_id(), 0);
    EXPECT_EQ(DataInputCount(*tasks[0]), 4);
  }
  {  // 2048 x 16 floats (128 KiB) over 4 devices: two tasks, on devices 0 and 1, 64 KiB each,
     // their registers slices of one block read whole.
    auto [summary, plan] = compile(2048, 4);
    EXPECT_NE(summary.find("partial-boxing (boxing) on cpu 0:0,0:1: P->S(0)"), std::string::npos) << summary;
    const auto tasks = boxing_tasks(plan);
    ASSERT_EQ(tasks.size(), 2u) << PlanToDot(plan);
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(tasks[d]->device_id(), d);
      EXPECT_EQ(DataInputCount(*tasks[d]), 4);
      EXPECT_EQ(tasks[d]->registers(0).blobs(0).byte_size(), 64 << 10);
    }
    EXPECT_TRUE(tasks[1]->registers(0).has_slice_of());
  }
}

// x(10, 8, 16) -> reshape (10, 128) -> matmul w1 (128, 64) -> relu -> reshape (10, 8, 8) ->
// reshape (10, 64) -> matmul w2 (64, 10) -> loss, trained with SGD. The weights outweigh the
// activations, so the SBP pass computes both weight gradients whole on device 0 from the
// gathered activations.
Graph ReshapedMlp(int devices) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("reshaped", "train"));
  if (!b.SetDeviceNum(devices).ok()) throw std::runtime_error("SetDeviceNum");
  std::string x = ValueOrDie(b.AddInput("x", {10, 8, 16}, DType::kFloat32, "r.py:1"));
  std::string labels = ValueOrDie(b.AddInput("labels", {10}, DType::kInt32, "r.py:2"));
  std::string w1 = ValueOrDie(b.AddVariable("w1", {128, 64}, DType::kFloat32, "r.py:3"));
  std::string w2 = ValueOrDie(b.AddVariable("w2", {64, 10}, DType::kFloat32, "r.py:4"));
  auto op = [&](const std::string& type, const std::string& name, std::vector<std::string> in, Attrs attrs = {}) {
    return ValueOrDie(b.AddOp(type, name, in, attrs, "r.py:5"))->output_ref(0);
  };
  std::string t = op("reshape", "flat_x", {x}, Attrs{{"shape", std::vector<int64_t>{10, 128}}});
  t = op("matmul", "first", {t, w1});
  t = op("relu", "relu", {t});
  t = op("reshape", "square", {t}, Attrs{{"shape", std::vector<int64_t>{10, 8, 8}}});
  t = op("reshape", "flat_h", {t}, Attrs{{"shape", std::vector<int64_t>{10, 64}}});
  t = op("matmul", "second", {t, w2});
  std::string loss = op("sparse_softmax_cross_entropy", "loss", {labels, t});
  if (!b.AddLoss(loss).ok()) throw std::runtime_error("AddLoss");
  OptimizerSpec spec;
  spec.type = "sgd";
  if (!b.SetOptimizer(spec).ok() || !b.SetOutputs({loss}).ok()) throw std::runtime_error("SetOptimizer");
  return b.graph();
}

// A reshape that keeps the split batch axis is a view on several devices too: each device's
// reader reads its rows of the feed (a part of its register) or its producer's register with
// its physical shape; a reader of the whole (a weight gradient on one device) reads the feed
// whole, or the producer's slices of one block, with the logical shape. No task copies.
TEST(ParallelPassesTest, ReshapesKeepingTheSplitAxisAreViewsOnEveryDevice) {
  Graph g = ReshapedMlp(3);
  plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  const std::string dot = PlanToDot(plan);
  for (const plan::Task& t : plan.tasks()) {
    EXPECT_NE(t.op_type(), "reshape") << t.name() << "\n" << dot;  // the gradients' reshapes too
    EXPECT_EQ(t.op_type() == "boxing" && t.name().find("flat_x") != std::string::npos, false) << t.name();
  }
  const int64_t first_row[] = {0, 4, 7}, rows[] = {4, 3, 3};
  for (int d = 0; d < 3; ++d) {
    SCOPED_TRACE(d);
    const plan::Task* first = FindTask(plan, "first@" + std::to_string(d));
    ASSERT_NE(first, nullptr) << dot;
    const plan::InputDesc& x = first->inputs(0);
    EXPECT_EQ(plan.tasks(static_cast<int>(x.producer_task_id())).name(), "x");
    EXPECT_TRUE(x.part());
    EXPECT_EQ(x.byte_offset(), first_row[d] * 128 * 4);
    EXPECT_EQ(std::vector<int64_t>(x.view_shape().begin(), x.view_shape().end()), (std::vector<int64_t>{rows[d], 128}));
    const plan::Task* second = FindTask(plan, "second@" + std::to_string(d));
    ASSERT_NE(second, nullptr) << dot;
    const plan::InputDesc& h = second->inputs(0);
    EXPECT_EQ(plan.tasks(static_cast<int>(h.producer_task_id())).name(), "relu@" + std::to_string(d));
    EXPECT_FALSE(h.part());
    EXPECT_EQ(std::vector<int64_t>(h.view_shape().begin(), h.view_shape().end()), (std::vector<int64_t>{rows[d], 64}));
  }
  // dW1 = flat_x^T dy on device 0 (whole, fused into the update): the feed read whole as (10, 128).
  const plan::Task* update = FindTask(plan, "w1-update");
  ASSERT_NE(update, nullptr) << dot;
  bool read_x_whole = false;
  for (const plan::InputDesc& in : update->inputs())
    read_x_whole |= plan.tasks(static_cast<int>(in.producer_task_id())).name() == "x" && !in.part() &&
                    std::vector<int64_t>(in.view_shape().begin(), in.view_shape().end()) == std::vector<int64_t>{10, 128};
  EXPECT_TRUE(read_x_whole) << dot;
  // dW2 = flat_h^T dy on device 0 reads relu's three registers as one block of (10, 64).
  const plan::Task* update2 = FindTask(plan, "w2-update");
  ASSERT_NE(update2, nullptr) << dot;
  bool read_h_whole = false;
  for (const plan::InputDesc& in : update2->inputs())
    read_h_whole |= in.whole() && plan.tasks(static_cast<int>(in.producer_task_id())).name() == "relu@0" &&
                    std::vector<int64_t>(in.view_shape().begin(), in.view_shape().end()) == std::vector<int64_t>{10, 64};
  EXPECT_TRUE(read_h_whole) << dot;
}

// The in-place order compares byte ranges: a writer of one part of a register need not follow
// a reader of another part (the shards of a variable stored split), but must follow one whose
// part overlaps its own, and the check says which.
TEST(ParallelPassesTest, InPlaceOrderComparesTheBytesOfParts) {
  plan::Plan plan;
  plan.set_job_name("parts");
  auto add_task = [&](const std::string& name, plan::TaskKind kind) {
    plan::Task* t = plan.add_tasks();
    t->set_id(plan.tasks_size() - 1);
    t->set_name(name);
    t->set_kind(kind);
    return t;
  };
  plan::BlobDesc* blob = add_task("w", plan::VARIABLE)->add_registers()->add_blobs();
  blob->add_shape(8);
  blob->set_dtype(plan::DT_FLOAT32);
  blob->set_byte_size(32);
  auto part = [](plan::Task* t, int64_t first, int64_t count) {
    plan::InputDesc* in = t->add_inputs();
    in->set_producer_task_id(0);
    in->set_has_view(true);
    in->add_view_shape(count);
    in->set_part(true);
    in->set_byte_offset(first * 4);
  };
  part(add_task("reader@0", plan::COMPUTE), 0, 4);  // rows 0-3
  plan::Task* writer = add_task("update@1", plan::COMPUTE);
  part(writer, 4, 4);  // rows 4-7, unordered with reader@0
  writer->add_mutable_inputs(0);
  AF_ASSERT_OK(VerifyInPlaceOrder(plan));
  writer->mutable_inputs(0)->set_byte_offset(3 * 4);  // rows 3-6: row 3 is read by reader@0
  Status overlapping = VerifyInPlaceOrder(plan);
  ASSERT_FALSE(overlapping.ok());
  EXPECT_NE(overlapping.message().find("task 'reader@0' reads register 0 of task 'w' unordered with its in-place writer "
                                       "'update@1'"),
            std::string::npos)
      << overlapping.message();
}

// A reader of a variable that is a data ancestor of the variable's writer on the logical graph
// (so the ordering pass adds no control edge) but not physically: the copy on device 1 of a
// broadcast identity feeds nothing the writer on device 0 reads. Lowering must order it.
TEST(ParallelPassesTest, InPlaceWriterFollowsReadersOnOtherDevices) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("writer", "predict"));
  AF_ASSERT_OK(b.SetDeviceNum(2));
  std::string v = ValueOrDie(b.AddVariable("v", {4}, DType::kFloat32, "w.py:1"));
  std::string g = ValueOrDie(b.AddInput("g", {4}, DType::kFloat32, "w.py:2"));
  std::string lr = ValueOrDie(b.AddInput("lr", {1}, DType::kFloat32, "w.py:3"));
  std::string copy = ValueOrDie(b.AddOp("identity", "copy", {v}, {}, "w.py:4"))->output_ref(0);
  AF_ASSERT_OK(b.SetOutputSbpHint(copy, Sbp::Broadcast()));
  std::string step = ValueOrDie(b.AddOp("add", "step", {copy, g}, {}, "w.py:5"))->output_ref(0);
  AF_ASSERT_OK(b.SetOutputSbpHint(step, Sbp::Broadcast()));
  ValueOrDie(b.AddOp("sgd_update", "update", {v, step, lr}, {}, "w.py:6"));
  AF_ASSERT_OK(b.SetOutputs({}));
  Graph graph = b.graph();
  plan::Plan plan = ValueOrDie(CompileGraph(graph, CompileOptions{}));  // VerifyInPlaceOrder passed
  const plan::Task* update = FindTask(plan, "update");
  ASSERT_NE(update, nullptr) << PlanToDot(plan);
  EXPECT_EQ(graph.FindNode("update")->control_inputs.size(), 0u);  // nothing logical to order
  EXPECT_TRUE(HasControlFrom(plan, *update, "copy@1")) << PlanToDot(plan);
}

TEST(ParallelPassesTest, PlacementErrorsNameOpPlacementAndLine) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("placed", "predict"));
  AF_ASSERT_OK(b.SetDeviceNum(2));
  for (const char* bad : {"0:2", "1:0", "0:1-0", "0:x", "00", "0:0,0:0"}) {
    Placement p{"cpu", {bad}};
    if (std::string(bad) == "0:0,0:0") p.machine_device_ids = {"0:0", "0:0"};
    Status s = b.SetPlacement(p);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("placement '"), std::string::npos) << s.message();
  }
  EXPECT_NE(b.SetPlacement(Placement{"cpu", {"1:0"}}).message().find("machine 1 does not exist"), std::string::npos);
  EXPECT_NE(b.SetPlacement(Placement{"gpu", {"0:0"}}).message().find("cpu_device_num(n)"), std::string::npos);
  AF_ASSERT_OK(b.SetPlacement(Placement{"cpu", {"0:1"}}));
  EXPECT_EQ(ValueOrDie(ResolvePlacement(Placement{"cpu", {"0:1", "0:0"}}, 2)), (std::vector<int>{1, 0}));
  EXPECT_EQ(ValueOrDie(ResolvePlacement(Placement{"cpu", {}}, 3)), (std::vector<int>{0, 1, 2}));
}

TEST(ParallelPassesTest, ImpossibleHintOnAnOpIsAnError) {
  // relu cannot turn a split input into a partial sum: the hint is refused with op and line.
  JobBuilder b = ValueOrDie(JobBuilder::Create("hinted", "predict"));
  AF_ASSERT_OK(b.SetDeviceNum(2));
  std::string x = ValueOrDie(b.AddInput("x", {4, 3}, DType::kFloat32, "h.py:1"));
  std::string y = ValueOrDie(b.AddOp("relu", "act", {x}, {}, "h.py:2"))->output_ref(0);
  AF_ASSERT_OK(b.SetOutputSbpHint(y, Sbp::PartialSum()));
  AF_ASSERT_OK(b.SetOutputs({y}));
  Graph g = b.graph();
  auto plan = CompileGraph(g, CompileOptions{});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("op 'act' (relu) at h.py:2: layout hint act/out P is impossible"),
            std::string::npos)
      << plan.status().message();
}

TEST(ParallelPassesTest, AnOpDeclaringNoSignaturesRunsWholeOnOneDeviceAndTheSummarySaysSo) {
  RegisterAllOps();
  if (!OpRegistry::Global().Find("test_no_sbp").ok()) {
    OpDef def;
    def.type = "test_no_sbp";
    def.input_names = {"in"};
    def.output_names = {"out"};
    def.infer = [](InferContext& ctx) -> Status {
      ctx.outputs = {ctx.inputs[0]};
      return Status::Ok();
    };
    def.doc = "identity with no SBP function (this test)";
    OpRegistry::Global().Register(std::move(def));
  }
  JobBuilder b = ValueOrDie(JobBuilder::Create("undeclared", "predict"));
  AF_ASSERT_OK(b.SetDeviceNum(2));
  std::string x = ValueOrDie(b.AddInput("x", {4, 3}, DType::kFloat32, "u.py:1"));
  std::string a = ValueOrDie(b.AddOp("relu", "before", {x}, {}, "u.py:2"))->output_ref(0);
  std::string u = ValueOrDie(b.AddOp("test_no_sbp", "plain", {a}, {}, "u.py:3"))->output_ref(0);
  std::string y = ValueOrDie(b.AddOp("relu", "after", {u}, {}, "u.py:4"))->output_ref(0);
  AF_ASSERT_OK(b.SetOutputs({y}));
  Graph g = b.graph();
  ValueOrDie(CompileGraph(g, CompileOptions{}));
  EXPECT_EQ(g.FindNode("plain")->devices, std::vector<int>{0});
  EXPECT_EQ(g.FindNode("before")->devices, (std::vector<int>{0, 1}));
  const std::string summary = SbpSummary(g);
  EXPECT_NE(summary.find("plain (test_no_sbp) on cpu 0:0: B->B  @ u.py:3  (no SBP declaration: whole on one device)"),
            std::string::npos)
      << summary;
  const size_t before = summary.find("before (relu) on cpu 0:0,0:1: ");
  ASSERT_NE(before, std::string::npos) << summary;
  const std::string line = summary.substr(before, summary.find('\n', before) - before);
  EXPECT_EQ(line.find("no SBP"), std::string::npos) << line;
}

TEST(ParallelPassesTest, JobRoundTripKeepsDevicesAndHints) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("trip", "predict"));
  AF_ASSERT_OK(b.SetDeviceNum(3));
  std::string x = ValueOrDie(b.AddInput("x", {6, 3}, DType::kFloat32, "t.py:1"));
  AF_ASSERT_OK(b.SetOutputSbpHint(x, Sbp::Split(1)));
  AF_ASSERT_OK(b.SetOutputs({x}));
  JobBuilder again = ValueOrDie(JobBuilder::FromJob(b.ToJob()));
  EXPECT_EQ(again.graph().device_num(), 3);
  const Node* node = again.graph().FindNode("x");
  ASSERT_EQ(node->output_sbp_hints.size(), 1u);
  ASSERT_TRUE(node->output_sbp_hints[0].has_value());
  EXPECT_EQ(*node->output_sbp_hints[0], Sbp::Split(1));
}

// A dense layer (matmul, bias_add with fused relu) whose weight, stored (units, in), is hinted
// split on the contraction axis: on 2 devices the matmul computes partial sums from the S(1)
// weight with the bias fused, and the relu stays a separate op after the reduction; on 1 device
// (and without the hint) the fusion pass fuses all three as before.
Graph DenseWithHintedWeight(int devices, bool hinted, const std::vector<std::string>& placement = {}) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("dense", "predict"));
  if (!b.SetDeviceNum(devices).ok()) throw std::runtime_error("SetDeviceNum");
  if (!placement.empty() && !b.SetPlacement(Placement{"cpu", placement}).ok()) throw std::runtime_error("SetPlacement");
  std::string x = ValueOrDie(b.AddInput("x", {4, 6}, DType::kFloat32, "d.py:1"));
  std::string w = ValueOrDie(b.AddVariable("weight", {5, 6}, DType::kFloat32, "d.py:2"));
  std::string bias = ValueOrDie(b.AddVariable("bias", {5}, DType::kFloat32, "d.py:2"));
  if (hinted && !b.SetOutputSbpHint(w, Sbp::Split(1)).ok()) throw std::runtime_error("SetOutputSbpHint");
  std::string t = ValueOrDie(b.AddOp("matmul", "dense_matmul", {x, w}, Attrs{{"transpose_b", true}}, "d.py:2"))->output_ref(0);
  t = ValueOrDie(b.AddOp("bias_add", "dense_bias_add", {t, bias}, Attrs{{"fuse_relu", true}}, "d.py:2"))->output_ref(0);
  std::string y = ValueOrDie(b.AddOp("sigmoid", "after", {t}, {}, "d.py:3"))->output_ref(0);
  if (!b.SetOutputs({y}).ok()) throw std::runtime_error("SetOutputs");
  return b.graph();
}

TEST(ParallelPassesTest, ContractionSplitHintKeepsReluOutOfTheFusedMatmul) {
  Graph g = DenseWithHintedWeight(2, true);
  AF_ASSERT_OK(CompileGraph(g, CompileOptions{}).status());
  const Node* matmul = g.FindNode("dense_matmul");
  ASSERT_NE(matmul, nullptr);
  EXPECT_TRUE(matmul->attrs.GetBoolOr("fuse_bias", false));
  EXPECT_FALSE(matmul->attrs.GetBoolOr("fuse_relu", false));
  const std::string summary = SbpSummary(g);
  EXPECT_NE(summary.find("dense_matmul (matmul) on cpu 0:0,0:1: S(1),S(1),P->P"), std::string::npos) << summary;
  const Node* relu = g.FindNode("dense_bias_add");
  ASSERT_NE(relu, nullptr) << summary;
  EXPECT_EQ(relu->type, "relu");
  ASSERT_EQ(relu->input_sbp.size(), 1u);
  EXPECT_NE(relu->input_sbp[0].kind, SbpKind::kPartialSum) << summary;

  // One device, no hint, or the layer placed on one device of two: nothing is partial.
  for (auto [devices, hinted, placement] : {std::tuple{1, true, std::vector<std::string>{}},
                                            std::tuple{2, false, std::vector<std::string>{}},
                                            std::tuple{2, true, std::vector<std::string>{"0:1"}}}) {
    Graph fused = DenseWithHintedWeight(devices, hinted, placement);
    AF_ASSERT_OK(CompileGraph(fused, CompileOptions{}).status());
    EXPECT_TRUE(fused.FindNode("dense_matmul")->attrs.GetBoolOr("fuse_relu", false)) << devices << " " << hinted;
    EXPECT_EQ(fused.FindNode("dense_bias_add"), nullptr);
  }
}

// A conv layer (conv2d -> bias_add -> relu) trained data-parallel: x (4, 2, 6, 6) -> 3
// filters 3x3 SAME -> reshape (4, 108) -> matmul (108, 5) -> loss. `hint`: the conv's output
// hinted S(1) (split on its channels).
Graph ConvLayer(int devices, bool channel_split) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("conv_layer", "train"));
  if (!b.SetDeviceNum(devices).ok()) throw std::runtime_error("SetDeviceNum");
  std::string x = ValueOrDie(b.AddInput("x", {4, 2, 6, 6}, DType::kFloat32, "c.py:1"));
  std::string labels = ValueOrDie(b.AddInput("labels", {4}, DType::kInt32, "c.py:1"));
  std::string w = ValueOrDie(b.AddVariable("w", {3, 2, 3, 3}, DType::kFloat32, "c.py:2"));
  std::string bias = ValueOrDie(b.AddVariable("bias", {3}, DType::kFloat32, "c.py:2"));
  std::string dense = ValueOrDie(b.AddVariable("dense", {108, 5}, DType::kFloat32, "c.py:3"));
  auto op = [&](const std::string& type, const std::string& name, std::vector<std::string> in, Attrs attrs = {}) {
    return ValueOrDie(b.AddOp(type, name, in, attrs, "c.py:2"))->output_ref(0);
  };
  std::string t = op("conv2d", "conv", {x, w}, Attrs{{"padding", std::string("SAME")}});
  if (channel_split && !b.SetOutputSbpHint(t, Sbp::Split(1)).ok()) throw std::runtime_error("SetOutputSbpHint");
  t = op("bias_add", "conv_bias", {t, bias}, Attrs{{"axis", int64_t{1}}});
  t = op("relu", "conv_relu", {t});
  t = op("reshape", "flat", {t}, Attrs{{"shape", std::vector<int64_t>{4, 108}}});
  t = op("matmul", "logits", {t, dense});
  std::string loss = op("sparse_softmax_cross_entropy", "loss", {labels, t});
  OptimizerSpec spec;
  spec.type = "sgd";
  if (!b.AddLoss(loss).ok() || !b.SetOptimizer(spec).ok() || !b.SetOutputs({loss}).ok())
    throw std::runtime_error("AddLoss");
  return b.graph();
}

std::map<std::string, int> OpTypes(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes())
    if (n.kind == NodeKind::kOp) ++counts[n.type];
  return counts;
}

// Data-parallel (S(0) activations), the conv layer's bias and relu run in the convolution and
// its bias gradient in the filter gradient on every device, as on one device (the numbers:
// tests/python/test_parallel_training_lenet.py's LeNet against one device); split on the channels
// (S(1)), where the fused kernel would add the whole bias to each device's slice, nothing fuses.
TEST(ParallelPassesTest, ConvEpiloguesFuseOnSeveralDevicesWhereTheLayoutsAllow) {
  for (int devices : {1, 2, 3}) {
    Graph g = ConvLayer(devices, false);
    AF_ASSERT_OK(CompileGraph(g, CompileOptions{}).status());
    auto types = OpTypes(g);
    EXPECT_EQ(types.count("bias_add"), 0u) << devices << " devices\n" << SbpSummary(g);
    EXPECT_EQ(types.count("relu"), 0u) << devices << " devices\n" << SbpSummary(g);
    EXPECT_EQ(types.count("bias_add_grad"), 0u) << devices << " devices\n" << SbpSummary(g);
    const Node* conv = nullptr;
    const Node* filter_gradient = nullptr;
    for (const Node& n : g.nodes()) {
      if (n.type == "conv2d") conv = &n;
      if (n.type == "conv2d_grad_filter") filter_gradient = &n;
    }
    ASSERT_NE(conv, nullptr);
    ASSERT_NE(filter_gradient, nullptr);
    EXPECT_TRUE(conv->attrs.GetBoolOr("fuse_bias", false));
    EXPECT_EQ(conv->attrs.GetStringOr("activation", ""), "relu");
    EXPECT_TRUE(filter_gradient->attrs.GetBoolOr("fuse_bias_grad", false));
    if (devices == 1) continue;
    ASSERT_EQ(conv->input_sbp.size(), 3u);
    EXPECT_EQ(conv->input_sbp[0], Sbp::Split(0));
    EXPECT_EQ(conv->input_sbp[2], Sbp::Broadcast());
    EXPECT_EQ(conv->output_sbp, std::vector<Sbp>{Sbp::Split(0)});
    // Partial sums of each device's rows, or (this small layer) whole from the gathered dy.
    ASSERT_EQ(filter_gradient->output_sbp.size(), 2u);
    EXPECT_EQ(filter_gradient->output_sbp[0], filter_gradient->output_sbp[1]);
    EXPECT_EQ(filter_gradient->output_sbp[0].kind,
              filter_gradient->input_sbp[0] == Sbp::Split(0) ? SbpKind::kPartialSum : SbpKind::kBroadcast);
  }
  Graph split = ConvLayer(2, true);
  AF_ASSERT_OK(CompileGraph(split, CompileOptions{}).status());
  auto types = OpTypes(split);
  EXPECT_EQ(types["bias_add"], 1) << SbpSummary(split);
  EXPECT_EQ(types["relu"], 1) << SbpSummary(split);
  for (const Node& n : split.nodes())
    if (n.type == "conv2d") {
      EXPECT_FALSE(n.attrs.GetBoolOr("fuse_bias", false)) << SbpSummary(split);
    }
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

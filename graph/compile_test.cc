// Passes and lowering: autodiff, optimizer, ordering, pruning, and a golden plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "graph/passes.h"
#include "graph/test_util.h"

namespace actorflow {
namespace graph {
namespace {

using testing::ValueOrDie;

std::multiset<std::string> TypesAddedAfter(const Graph& g, size_t first) {
  std::multiset<std::string> types;
  for (size_t i = first; i < g.nodes().size(); ++i) types.insert(g.nodes()[i].type);
  return types;
}

TEST(AutodiffTest, MlpGetsTheExpectedBackwardOps) {
  testing::Mlp m = testing::BuildMlp("train", 4, 3, 5, 2);
  Graph g = m.builder.graph();
  size_t forward = g.nodes().size();
  AF_ASSERT_OK(MakeAutodiffPass()->Run(g));
  std::multiset<std::string> added = TypesAddedAfter(g, forward);
  // Seed, cross-entropy grad, dW2 and dh (matmul), relu grad, bias grad, dW1 (matmul).
  // No gradient for x (a placeholder): no third backward matmul through hidden-matmul's a.
  EXPECT_EQ(added.count("constant"), 1u);
  EXPECT_EQ(added.count("sparse_softmax_cross_entropy_grad"), 1u);
  EXPECT_EQ(added.count("relu_grad"), 1u);
  EXPECT_EQ(added.count("matmul"), 3u);
  EXPECT_EQ(added.count("add_n"), 0u);
  for (const std::string& var : {m.w1, m.b1, m.w2}) {
    ASSERT_TRUE(g.gradients().count(var)) << var;
    EXPECT_EQ(ValueOrDie(g.Desc(g.gradients().at(var))), ValueOrDie(g.Desc(var))) << var;
  }
  // The seed is ones (OneFlow); the updates divide by the number of loss elements instead.
  const Node* seed = g.FindNode("loss-grad-seed");
  ASSERT_NE(seed, nullptr);
  EXPECT_DOUBLE_EQ(ValueOrDie(seed->attrs.GetFloat("value")), 1.0);
  EXPECT_EQ(seed->location, "mlp.py:5");
}

TEST(AutodiffTest, SeveralConsumersAreSummed) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("twice", "train"));
  std::string w = ValueOrDie(b.AddVariable("w", {3}, DType::kFloat32, "t.py:1"));
  std::string sq = ValueOrDie(b.AddOp("mul", "sq", {w, w}, {}, "t.py:2"))->output_ref(0);
  std::string sum = ValueOrDie(b.AddOp("add", "sum", {sq, w}, {}, "t.py:3"))->output_ref(0);
  AF_ASSERT_OK(b.AddLoss(sum));
  Graph g = b.graph();
  AF_ASSERT_OK(MakeAutodiffPass()->Run(g));
  const std::string& grad = g.gradients().at(w);
  const Node* producer = g.FindNode(SplitRef(grad)->first);
  ASSERT_NE(producer, nullptr);
  EXPECT_EQ(producer->type, "add_n");
  EXPECT_EQ(producer->inputs.size(), 3u);  // two through mul, one through add
}

TEST(AutodiffTest, NonDifferentiablePathAndMissingLossAreErrors) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("noloss", "train"));
  std::string w = ValueOrDie(b.AddVariable("w", {3}, DType::kFloat32, "t.py:1"));
  OptimizerSpec spec;
  spec.type = "sgd";
  AF_ASSERT_OK(b.SetOptimizer(spec));
  Graph g = b.graph();
  Status s = MakeAutodiffPass()->Run(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no loss"), std::string::npos) << s.message();
}

TEST(OptimizerTest, MomentumAddsStateUpdatesAndTheLearningRateFeed) {
  testing::Mlp m = testing::BuildMlp("train", 4, 3, 5, 2, "momentum");
  Graph g = m.builder.graph();
  AF_ASSERT_OK(MakeAutodiffPass()->Run(g));
  AF_ASSERT_OK(MakeOptimizerPass()->Run(g));
  ASSERT_EQ(g.feeds().size(), 3u);
  EXPECT_EQ(g.feeds().back(), "learning_rate");
  EXPECT_EQ(ValueOrDie(g.Desc("learning_rate/out")), (TensorDesc{{1}, DType::kFloat32}));
  for (const char* var : {"hidden-weight", "hidden-bias", "output-weight"}) {
    const Node* update = g.FindNode(std::string(var) + "-update");
    ASSERT_NE(update, nullptr) << var;
    EXPECT_EQ(update->type, "momentum_update");
    EXPECT_DOUBLE_EQ(ValueOrDie(update->attrs.GetFloat("grad_scale")), 0.25) << "updates divide by the 4 loss elements";
    EXPECT_EQ(update->inputs[0], std::string(var) + "/out");
    EXPECT_EQ(update->inputs.back(), "learning_rate/out");
    const Node* state = g.FindNode(std::string(var) + "-momentum");
    ASSERT_NE(state, nullptr);
    EXPECT_EQ(state->kind, NodeKind::kVariable);
    EXPECT_TRUE(state->zeros_if_missing);
    EXPECT_FALSE(state->trainable);
    EXPECT_EQ(update->inputs[2], state->output_ref(0));
  }
}

TEST(OptimizerTest, ClippingScalesEveryGradientByOneFactor) {
  testing::Mlp m = testing::BuildMlp("train", 4, 3, 5, 2);
  Graph g = m.builder.graph();
  g.optimizer()->clip_norm = 1.0;
  AF_ASSERT_OK(MakeAutodiffPass()->Run(g));
  AF_ASSERT_OK(MakeOptimizerPass()->Run(g));
  std::set<std::string> scales;
  for (const char* var : {"hidden-weight", "hidden-bias", "output-weight"}) {
    const Node* update = g.FindNode(std::string(var) + "-update");
    ASSERT_NE(update, nullptr);
    const Node* clipped = g.FindNode(SplitRef(update->inputs[1])->first);
    ASSERT_EQ(clipped->type, "mul");
    scales.insert(clipped->inputs[1]);
  }
  EXPECT_EQ(scales.size(), 1u);  // one global norm
}

TEST(OrderingTest, UpdatesRunAfterEveryReaderOfTheirVariable) {
  testing::Mlp m = testing::BuildMlp("train", 4, 3, 5, 2);
  Graph g = m.builder.graph();
  ValueOrDie(CompileGraph(g, CompileOptions{}));
  const Node* update = g.FindNode("output-weight-update");
  ASSERT_NE(update, nullptr);
  // dh = dlogits . W2^T reads W2 but does not lead to the update: it needs a control edge.
  bool ordered = false;
  for (const std::string& c : update->control_inputs) {
    const Node* reader = g.FindNode(c);
    ASSERT_NE(reader, nullptr);
    for (const auto& in : reader->inputs) ordered |= in == m.w2;
  }
  EXPECT_TRUE(ordered);
}

// `return w` and `flow.watch(w)` of a variable an optimizer updates read one snapshot copy
// that the update is ordered after, so both see the value the forward pass read.
TEST(OrderingTest, OutputsAndWatchesOfAnUpdatedVariableReadASnapshotBeforeTheUpdate) {
  testing::Mlp m = testing::BuildMlp("train", 4, 3, 5, 2);
  AF_ASSERT_OK(m.builder.SetOutputs({m.loss, m.w2}));
  AF_ASSERT_OK(m.builder.AddWatch(m.w2, "w2_watch", false, "mlp.py:6"));
  Graph g = m.builder.graph();
  plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  ASSERT_EQ(g.outputs().size(), 2u);
  const std::string snapshot = g.outputs()[1];
  EXPECT_NE(snapshot, m.w2);
  EXPECT_EQ(g.watches().at(0).ref, snapshot) << "the watch and the return share one copy";
  const Node* copy = g.FindNode(SplitRef(snapshot)->first);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->type, "identity");
  EXPECT_EQ(copy->inputs, std::vector<std::string>{m.w2});
  const Node* update = g.FindNode("output-weight-update");
  ASSERT_NE(update, nullptr);
  const auto& control = update->control_inputs;
  EXPECT_NE(std::find(control.begin(), control.end(), copy->name), control.end());
  // The plan: both sinks read the copy's task, never the variable's register.
  int sinks_reading_copy = 0;
  for (const auto& t : plan.tasks()) {
    if (t.kind() != plan::SINK) continue;
    for (const auto& in : t.inputs()) {
      if (in.control()) continue;
      EXPECT_NE(plan.tasks(in.producer_task_id()).kind(), plan::VARIABLE) << t.name();
      sinks_reading_copy += plan.tasks(in.producer_task_id()).name() == copy->name;
    }
  }
  EXPECT_EQ(sinks_reading_copy, 2);
}

// Batch normalization writes its moving statistics in place (a predict job with training
// on, no optimizer): watching and returning moving_mean also read a snapshot before the write.
TEST(OrderingTest, MovingStatisticsWatchedAndReturnedReadASnapshot) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("bn", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {4, 2}, DType::kFloat32, "bn.py:1"));
  std::vector<std::string> in = {x};
  for (const char* name : {"gamma", "beta", "moving_mean", "moving_variance"})
    in.push_back(ValueOrDie(b.AddVariable(name, {2}, DType::kFloat32, "bn.py:2", false)));
  const Node* bn = ValueOrDie(b.AddOp("batch_normalization", "bn", in, Attrs{{"axis", int64_t{1}}, {"training", true}}, "bn.py:3"));
  const std::string out = bn->output_ref(0), moving_mean = in[3];
  AF_ASSERT_OK(b.SetOutputs({out, moving_mean}));
  AF_ASSERT_OK(b.AddWatch(moving_mean, "mean_watch", false, "bn.py:4"));
  Graph g = b.graph();
  ValueOrDie(CompileGraph(g, CompileOptions{}));  // includes VerifyInPlaceOrder
  const Node* copy = g.FindNode(SplitRef(g.outputs()[1])->first);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->type, "identity");
  EXPECT_EQ(g.watches()[0].ref, g.outputs()[1]);
  const Node* writer = g.FindNode("bn");
  ASSERT_NE(writer, nullptr);
  EXPECT_NE(std::find(writer->control_inputs.begin(), writer->control_inputs.end(), copy->name), writer->control_inputs.end());
}

// The check CompileGraph runs on every plan: lowering a train graph without the ordering pass
// leaves the readers of W2 (the backward matmul, the sinks) unordered with its update.
TEST(VerifyInPlaceOrderTest, AnUnorderedReaderIsAnInternalError) {
  testing::Mlp m = testing::BuildMlp("train", 4, 3, 5, 2);
  AF_ASSERT_OK(m.builder.SetOutputs({m.loss, m.w2}));
  Graph g = m.builder.graph();
  AF_ASSERT_OK(MakeAutodiffPass()->Run(g));
  AF_ASSERT_OK(MakeOptimizerPass()->Run(g));
  plan::Plan unordered = ValueOrDie(LowerToPlan(g, CompileOptions{}));
  Status s = VerifyInPlaceOrder(unordered);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.message();
  EXPECT_NE(s.message().find("in-place writer"), std::string::npos) << s.message();
  // Only the sink unordered: ordering ran, then a sink reads the variable directly.
  Graph ordered = m.builder.graph();
  plan::Plan good = ValueOrDie(CompileGraph(ordered, CompileOptions{}));
  AF_ASSERT_OK(VerifyInPlaceOrder(good));
  plan::Task* sink = nullptr;
  int variable = -1;
  for (auto& t : *good.mutable_tasks()) {
    if (t.kind() == plan::SINK && t.sink_name().empty()) sink = &t;
    if (t.kind() == plan::VARIABLE && t.name() == SplitRef(m.w2)->first) variable = static_cast<int>(t.id());
  }
  ASSERT_NE(sink, nullptr);
  ASSERT_GE(variable, 0);
  plan::InputDesc* direct = sink->add_inputs();
  direct->set_producer_task_id(variable);
  direct->set_producer_register(0);
  s = VerifyInPlaceOrder(good);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'output' reads register 0 of task '" + SplitRef(m.w2)->first + "'"), std::string::npos)
      << s.message();
}

// A plan out of topological order: the first input whose producer is not before its reader is
// named with the id as the plan holds it, also one past what an int holds.
TEST(VerifyInPlaceOrderTest, AReadOfATaskNotBeforeItIsAnInternalError) {
  testing::Mlp m = testing::BuildMlp("train", 4, 3, 5, 2);
  Graph g = m.builder.graph();
  plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  AF_ASSERT_OK(VerifyInPlaceOrder(plan));
  ASSERT_GE(plan.tasks_size(), 3);
  for (const int64_t producer : {int64_t{2}, int64_t{1} << 32, int64_t{-3}}) {
    plan::Plan broken = plan;
    plan::InputDesc* in = broken.mutable_tasks(1)->add_inputs();
    in->set_producer_task_id(producer);
    in->set_control(true);
    Status s = VerifyInPlaceOrder(broken);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_NE(s.message().find("task '" + broken.tasks(1).name() + "' reads task #" + std::to_string(producer) +
                               ", which is not before it"),
              std::string::npos)
        << s.message();
  }
}

// A variable the job never writes is lowered read-only (read in place at run time); one an
// optimizer updates is not.
TEST(LoweringTest, VariablesNoOpWritesAreReadOnly) {
  for (const char* type : {"predict", "train"}) {
    testing::Mlp m = testing::BuildMlp(type, 4, 3, 5, 2);
    Graph g = m.builder.graph();
    plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
    int variables = 0;
    for (const auto& t : plan.tasks()) {
      if (t.kind() != plan::VARIABLE) continue;
      ++variables;
      EXPECT_EQ(t.read_only(), std::string(type) == "predict") << type << " job, variable " << t.name();
    }
    EXPECT_GE(variables, 2) << type;
  }
}

// Reshape and flatten lower to views: no task copies; readers (a kernel, the main sink) read
// the producer's register with the view's shape, through chains of views too. A reshape of a
// variable stays a task (its readers are ordered against updates).
TEST(LoweringTest, ReshapeAndFlattenAreViews) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("views", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {2, 3, 4}, DType::kFloat32, "v.py:1"));
  std::string r = ValueOrDie(b.AddOp("reshape", "r", {x}, Attrs{{"shape", std::vector<int64_t>{6, 4}}}, "v.py:2"))->output_ref(0);
  std::string y = ValueOrDie(b.AddOp("relu", "y", {r}, {}, "v.py:3"))->output_ref(0);
  std::string f = ValueOrDie(b.AddOp("flatten", "f", {r}, {}, "v.py:4"))->output_ref(0);  // a view of a view
  std::string w = ValueOrDie(b.AddVariable("w", {2, 2}, DType::kFloat32, "v.py:5"));
  std::string wr = ValueOrDie(b.AddOp("reshape", "wr", {w}, Attrs{{"shape", std::vector<int64_t>{4}}}, "v.py:6"))->output_ref(0);
  AF_ASSERT_OK(b.SetOutputs({y, f, wr}));
  Graph g = b.graph();
  plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  std::set<std::string> ops;
  for (const auto& t : plan.tasks()) ops.insert(t.op_type());
  EXPECT_EQ(ops, (std::set<std::string>{"", "relu", "reshape"})) << "only the variable's reshape is a task";
  auto shape_of = [](const plan::InputDesc& in) { return std::vector<int64_t>(in.view_shape().begin(), in.view_shape().end()); };
  for (const auto& t : plan.tasks()) {
    if (t.op_type() == "relu") {
      ASSERT_EQ(t.inputs_size(), 1);
      EXPECT_TRUE(t.inputs(0).has_view());
      EXPECT_EQ(shape_of(t.inputs(0)), (std::vector<int64_t>{6, 4}));
      EXPECT_EQ(plan.tasks(t.inputs(0).producer_task_id()).kind(), plan::SOURCE);
    }
    if (t.kind() == plan::SINK) {
      ASSERT_GE(t.inputs_size(), 3);
      EXPECT_FALSE(t.inputs(0).has_view());
      EXPECT_TRUE(t.inputs(1).has_view());
      EXPECT_EQ(shape_of(t.inputs(1)), (std::vector<int64_t>{24}));
      EXPECT_EQ(plan.tasks(t.inputs(1).producer_task_id()).kind(), plan::SOURCE);
      EXPECT_FALSE(t.inputs(2).has_view());
      EXPECT_EQ(plan.tasks(t.inputs(2).producer_task_id()).op_type(), "reshape");
    }
  }
}

TEST(PruneTest, UnneededOpsGoUnusedFeedsStay) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("prune", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {2}, DType::kFloat32, "p.py:1"));
  ValueOrDie(b.AddInput("unused", {3}, DType::kFloat32, "p.py:2"));
  std::string r = ValueOrDie(b.AddOp("relu", "kept", {x}, {}, "p.py:3"))->output_ref(0);
  ValueOrDie(b.AddOp("sigmoid", "dropped", {x}, {}, "p.py:4"));
  AF_ASSERT_OK(b.SetOutputs({r}));
  Graph g = b.graph();
  plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  EXPECT_EQ(g.FindNode("dropped"), nullptr);
  ASSERT_NE(g.FindNode("kept"), nullptr);
  int sources = 0;
  for (const auto& t : plan.tasks()) sources += t.kind() == plan::SOURCE;
  EXPECT_EQ(sources, 2);
}

// Guards refactors of the whole pipeline: the plan of a tiny train job, as protobuf text.
// Regenerate with ACTORFLOW_UPDATE_GOLDEN=1 after an intended change, and review the diff.
TEST(GoldenPlanTest, TinyTrainJob) {
  testing::Mlp m = testing::BuildMlp("train", 2, 3, 4, 2, "sgd", "tiny");
  ASSERT_TRUE(m.builder.AddWatch(m.logits, "logits_diff", true, "mlp.py:6").ok());
  Graph g = m.builder.graph();
  plan::Plan plan = ValueOrDie(CompileGraph(g, CompileOptions{}));
  std::string text = plan.DebugString();
  std::string path = std::string(ACTORFLOW_GRAPH_TESTDATA) + "/tiny_train_plan.txt";
  if (std::getenv("ACTORFLOW_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path) << text;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing golden file " << path;
  std::stringstream golden;
  golden << in.rdbuf();
  EXPECT_EQ(text, golden.str()) << "plan changed; if intended, rerun with ACTORFLOW_UPDATE_GOLDEN=1";
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

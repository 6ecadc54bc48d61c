// JobBuilder and inference: error messages, naming, placement, variables, job round trip.
#include <gtest/gtest.h>

#include "graph/job_builder.h"
#include "graph/test_util.h"

namespace actorflow {
namespace graph {
namespace {

using testing::ValueOrDie;

TEST(JobBuilderTest, InferenceErrorNamesOpTypeAndLocation) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("job", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {4, 3}, DType::kFloat32, "model.py:10"));
  std::string w = ValueOrDie(b.AddVariable("w", {4, 2}, DType::kFloat32, "model.py:11"));
  auto bad = b.AddOp("matmul", "dense", {x, w}, {}, "model.py:12");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("op 'dense' (matmul) at model.py:12: ", 0), 0u) << bad.status().message();
  // The kernel's own explanation follows (shapes).
  EXPECT_NE(bad.status().message().find("(4, 3)"), std::string::npos) << bad.status().message();
  // The failed op was not added: the name is still free.
  EXPECT_EQ(b.graph().FindNode("dense"), nullptr);
}

TEST(JobBuilderTest, UnknownOpTypeAndBadInputsNameTheOp) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("job", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {2}, DType::kFloat32, "a.py:1"));
  auto unknown = b.AddOp("no_such_op", "mystery", {x}, {}, "a.py:2");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message().rfind("op 'mystery' (no_such_op) at a.py:2: ", 0), 0u) << unknown.status().message();
  auto missing = b.AddOp("relu", "r", {"nothing/out"}, {}, "a.py:3");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("op 'r' (relu) at a.py:3"), std::string::npos);
  EXPECT_NE(missing.status().message().find("nothing"), std::string::npos);
  auto arity = b.AddOp("relu", "r", {x, x}, {}, "a.py:4");
  ASSERT_FALSE(arity.ok());
  EXPECT_NE(arity.status().message().find("expected 1 inputs"), std::string::npos) << arity.status().message();
}

TEST(JobBuilderTest, RepeatedNamesGetSuffixes) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("job", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {2, 2}, DType::kFloat32, "a.py:1"));
  EXPECT_EQ(ValueOrDie(b.AddOp("relu", "act", {x}, {}, "a.py:2"))->name, "act");
  EXPECT_EQ(ValueOrDie(b.AddOp("relu", "act", {x}, {}, "a.py:3"))->name, "act_1");
  const Node* third = ValueOrDie(b.AddOp("relu", "act", {x}, {}, "a.py:4"));
  EXPECT_EQ(third->name, "act_2");
  EXPECT_EQ(third->output_ref(0), "act_2/out");
  EXPECT_EQ(ValueOrDie(b.TensorDescOf("act_2/out")), (TensorDesc{{2, 2}, DType::kFloat32}));
}

TEST(JobBuilderTest, VariablesAreSharedByNameAndChecked) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("job", "train"));
  std::string w = ValueOrDie(b.AddVariable("w", {3}, DType::kFloat32, "a.py:1"));
  EXPECT_EQ(ValueOrDie(b.AddVariable("w", {3}, DType::kFloat32, "a.py:2")), w);
  auto clash = b.AddVariable("w", {4}, DType::kFloat32, "a.py:3");
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("a.py:1"), std::string::npos) << clash.status().message();
}

TEST(JobBuilderTest, UnsupportedPlacementIsAClearError) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("job", "predict"));
  Status gpu = b.SetPlacement(Placement{"gpu", {"0:0"}});
  ASSERT_FALSE(gpu.ok());
  EXPECT_NE(gpu.message().find("'gpu 0:0'"), std::string::npos) << gpu.message();
  Status multi = b.SetPlacement(Placement{"cpu", {"0:0-3"}});
  ASSERT_FALSE(multi.ok());
  EXPECT_NE(multi.message().find("0:0-3"), std::string::npos);
  EXPECT_FALSE(b.SetPlacement(Placement{"cpu", {"1:0"}}).ok());
  EXPECT_TRUE(b.SetPlacement(Placement{"cpu", {"0:0"}}).ok());
}

TEST(JobBuilderTest, HintsPlacementsAndViewRoundTrip) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("job", "predict"));
  ASSERT_TRUE(b.SetDeviceNum(2, 0).ok());
  ASSERT_TRUE(b.SetLogicalView("mirrored").ok());
  Status sideways = b.SetLogicalView("sideways");
  ASSERT_FALSE(sideways.ok());
  EXPECT_NE(sideways.message().find("'sideways'"), std::string::npos) << sideways.message();
  std::string x = ValueOrDie(b.AddInput("x", {4, 3}, DType::kFloat32, "a.py:1"));
  ASSERT_TRUE(b.SetOutputSbpHint(x, Sbp::Split(0)).ok());
  ASSERT_TRUE(b.SetPlacement(Placement{"cpu", {"0:1"}}).ok());
  std::string w = ValueOrDie(b.AddVariable("w", {3, 5}, DType::kFloat32, "a.py:2"));
  ASSERT_TRUE(b.SetOutputSbpHint(w, Sbp::Broadcast()).ok());
  job::Job job = b.ToJob();
  EXPECT_EQ(job.config().cpu_device_num(), 2);
  EXPECT_EQ(job.config().default_logical_view(), "mirrored");
  ASSERT_EQ(job.ops(0).output_sbp_size(), 1);
  EXPECT_EQ(job.ops(0).output_sbp(0).kind(), job::Sbp::SPLIT);
  EXPECT_EQ(job.ops(0).placement().machine_device_ids_size(), 0);  // outside any scope: all devices
  EXPECT_EQ(job.ops(1).output_sbp(0).kind(), job::Sbp::BROADCAST);
  EXPECT_EQ(job.ops(1).placement().machine_device_ids(0), "0:1");
  JobBuilder again = ValueOrDie(JobBuilder::FromJob(job));
  EXPECT_EQ(again.ToJob().DebugString(), job.DebugString());
}

TEST(JobBuilderTest, BadJobTypeLossAndWatchAreRejected) {
  EXPECT_FALSE(JobBuilder::Create("job", "inference").ok());
  JobBuilder b = ValueOrDie(JobBuilder::Create("job", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {2}, DType::kFloat32, "a.py:1"));
  EXPECT_FALSE(b.AddLoss(x).ok());
  EXPECT_FALSE(b.AddWatch(x, "h", /*diff=*/true, "a.py:2").ok());
  EXPECT_TRUE(b.AddWatch(x, "h", false, "a.py:2").ok());
  EXPECT_FALSE(b.AddWatch(x, "h", false, "a.py:3").ok());  // handler names are unique
  EXPECT_FALSE(b.SetOutputs({"x/missing"}).ok());
}

TEST(JobBuilderTest, JobProtoRoundTrip) {
  testing::Mlp m = testing::BuildMlp("train", 4, 3, 5, 2, "adam");
  job::Job job = m.builder.ToJob();
  EXPECT_EQ(job.ops_size(), static_cast<int>(m.builder.graph().nodes().size()));
  JobBuilder again = ValueOrDie(JobBuilder::FromJob(job));
  EXPECT_EQ(again.ToJob().DebugString(), job.DebugString());
  EXPECT_EQ(again.graph().ToDot(), m.builder.graph().ToDot());
}

// Retain corrects the name index in place (graph.cc): whatever the passes did to the node
// vector before calling it, every kept node is found at its new position, dropped names are
// gone, control inputs to them are dropped, and variables are found by name.
TEST(GraphTest, RetainIndexesEveryKeptNodeWhateverThePassesMoved) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("job", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {2, 2}, DType::kFloat32, "a.py:1"));
  std::string w = ValueOrDie(b.AddVariable("w", {2, 2}, DType::kFloat32, "a.py:2"));
  std::string v = ValueOrDie(b.AddVariable("v", {2, 2}, DType::kFloat32, "a.py:3"));
  std::string mm = ValueOrDie(b.AddOp("matmul", "mm", {x, w}, {}, "a.py:4"))->output_ref(0);
  std::string r = ValueOrDie(b.AddOp("relu", "r", {mm}, {}, "a.py:5"))->output_ref(0);
  ValueOrDie(b.AddOp("relu", "s", {r}, {}, "a.py:6"));
  Graph graph = b.graph();
  // As a fusion pass does: the node at "r"'s position becomes "mm" (fused), "mm"'s own
  // position is dropped, "s" gets a control input on the dropped "r", and variable "v" goes.
  std::vector<Node>& nodes = graph.mutable_nodes();
  ASSERT_EQ(nodes.size(), 6u);  // x, w, v, mm, r, s
  Node fused = nodes[3];
  fused.attrs.Set("fused", true);
  nodes[4] = std::move(fused);
  nodes[5].control_inputs = {"r", "x"};
  graph.Retain({true, true, false, false, true, true});
  ASSERT_EQ(graph.nodes().size(), 4u);
  for (size_t i = 0; i < graph.nodes().size(); ++i) EXPECT_EQ(graph.FindNode(graph.nodes()[i].name), &graph.nodes()[i]);
  EXPECT_EQ(graph.FindNode("r"), nullptr);
  EXPECT_EQ(graph.FindNode("v"), nullptr);
  EXPECT_TRUE(graph.FindNode("mm")->attrs.GetBoolOr("fused", false));
  EXPECT_EQ(graph.nodes()[3].control_inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(graph.FindVariable("v"), nullptr);
  ASSERT_NE(graph.FindVariable("w"), nullptr);
  EXPECT_EQ(graph.FindVariable("w")->name, "w");
  // As the channels-last pass does: nodes put in without Append, then Retain of everything.
  Node inserted = graph.nodes()[3];
  inserted.name = "s-copy";
  inserted.control_inputs.clear();
  graph.mutable_nodes().insert(graph.mutable_nodes().begin() + 1, std::move(inserted));
  graph.Retain(std::vector<bool>(graph.nodes().size(), true));
  ASSERT_EQ(graph.nodes().size(), 5u);
  for (size_t i = 0; i < graph.nodes().size(); ++i) EXPECT_EQ(graph.FindNode(graph.nodes()[i].name), &graph.nodes()[i]);
  EXPECT_EQ(graph.UniqueName("s-copy"), "s-copy_1");
  // Resolve's errors are SplitRef's and the lookup's, as before.
  EXPECT_EQ(graph.Resolve("no-slash").status().message(),
            "tensor reference 'no-slash' is not of the form 'op_name/output_name'");
  EXPECT_EQ(graph.Resolve("r/out").status().message(), "tensor 'r/out': no op named 'r' in job 'job'");
  EXPECT_EQ(graph.Resolve("mm/nope").status().message(),
            "tensor 'mm/nope': op 'mm' (matmul) has no output 'nope' (outputs: out)");
  EXPECT_EQ(ValueOrDie(graph.Resolve("s/out")).first, graph.FindNode("s"));
}

// Two kept nodes of one name (a pass put a node under a name another node keeps): the last one
// holds the entry, whether the entry stood at the first or at neither.
TEST(GraphTest, RetainIndexesTheLastOfTwoNodesOfOneName) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("job", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {2, 2}, DType::kFloat32, "a.py:1"));
  std::string r = ValueOrDie(b.AddOp("relu", "r", {x}, {}, "a.py:2"))->output_ref(0);
  std::string s = ValueOrDie(b.AddOp("relu", "s", {r}, {}, "a.py:3"))->output_ref(0);
  ValueOrDie(b.AddOp("relu", "t", {s}, {}, "a.py:4"));
  ValueOrDie(b.AddOp("relu", "u", {s}, {}, "a.py:5"));
  Graph graph = b.graph();
  std::vector<Node>& nodes = graph.mutable_nodes();  // x, r, s, t, u
  // The entry of "r" stands at r; "t" becomes a second "r" after it; "u" is dropped.
  nodes[3].name = "r";
  nodes[3].attrs.Set("second", true);
  graph.Retain({true, true, true, true, false});
  ASSERT_EQ(graph.nodes().size(), 4u);
  EXPECT_EQ(graph.FindNode("r"), &graph.nodes()[3]);
  EXPECT_EQ(graph.FindNode("t"), nullptr);
  // Again: now the entry stands at the later "r" and the earlier one has none.
  graph.Retain({true, true, true, true});
  EXPECT_EQ(graph.FindNode("r"), &graph.nodes()[3]);
  // Neither "s" node stands at its entry's position: the first is renamed away, then two nodes
  // take the name, the later one wins.
  std::vector<Node>& again = graph.mutable_nodes();  // x, r, s, r(second)
  again[2].name = "s-old";
  again[1].name = "s";
  again[3].name = "s";
  graph.Retain({true, true, true, true});
  EXPECT_EQ(graph.FindNode("s"), &graph.nodes()[3]);
  EXPECT_EQ(graph.FindNode("s-old"), &graph.nodes()[2]);
  EXPECT_TRUE(graph.FindNode("s")->attrs.GetBoolOr("second", false));
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

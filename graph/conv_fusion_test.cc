// The inference convolution passes' graph rewrites: which chains fuse into a conv2d epilogue,
// which stay apart (the numbers are compared in kernels/conv_test.cc and
// tests/python/test_conv_fusion.py), and where the channels-last pass converts layouts.
#include <gtest/gtest.h>

#include <map>

#include "graph/passes.h"
#include "graph/test_util.h"

namespace actorflow {
namespace graph {
namespace {

using testing::ValueOrDie;

std::map<std::string, int> CountTypes(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Node& n : g.nodes())
    if (n.kind == NodeKind::kOp) ++counts[n.type];
  return counts;
}

struct ConvChain {
  JobBuilder builder;
  std::string x, conv, bn, act;
};

// x (2,4,8,8) -> conv2d 3x3 (6 filters) -> batch_normalization (inference) -> clamp [0, 6].
ConvChain BuildConvChain(const std::string& job_type, bool bn_training = false) {
  ConvChain c{ValueOrDie(JobBuilder::Create("chain_" + job_type, job_type)), "", "", "", ""};
  JobBuilder& b = c.builder;
  c.x = ValueOrDie(b.AddInput("x", {2, 4, 8, 8}, DType::kFloat32, "net.py:1"));
  std::string w = ValueOrDie(b.AddVariable("w", {6, 4, 3, 3}, DType::kFloat32, "net.py:2"));
  std::vector<std::string> stats;
  for (const char* name : {"gamma", "beta", "mean", "var"}) stats.push_back(ValueOrDie(b.AddVariable(name, {6}, DType::kFloat32, "net.py:3")));
  c.conv = ValueOrDie(b.AddOp("conv2d", "conv", {c.x, w}, Attrs{{"padding", std::string("SAME")}}, "net.py:2"))->output_ref(0);
  c.bn = ValueOrDie(b.AddOp("batch_normalization", "bn", {c.conv, stats[0], stats[1], stats[2], stats[3]},
                            Attrs{{"training", bn_training}}, "net.py:3"))
             ->output_ref(0);
  c.act = ValueOrDie(b.AddOp("clamp", "relu6", {c.bn}, Attrs{{"min", 0.0}, {"max", 6.0}}, "net.py:4"))->output_ref(0);
  return c;
}

TEST(ConvFusionTest, BatchNormAndClampBecomeTheConvEpilogue) {
  ConvChain c = BuildConvChain("predict");
  AF_ASSERT_OK(c.builder.SetOutputs({c.act}));
  Graph g = c.builder.graph();
  AF_ASSERT_OK(MakeConvFusionPass(true, true)->Run(g));
  auto types = CountTypes(g);
  EXPECT_EQ(types["conv2d"], 1);
  EXPECT_EQ(types.count("batch_normalization"), 0u);
  EXPECT_EQ(types.count("clamp"), 0u);
  const Node* conv = g.FindNode("conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->inputs.size(), 6u);
  EXPECT_TRUE(conv->attrs.GetBoolOr("fuse_batch_norm", false));
  EXPECT_EQ(conv->attrs.GetStringOr("activation", ""), "clip");
  EXPECT_DOUBLE_EQ(conv->attrs.GetFloatOr("activation_max", 0), 6.0);
  EXPECT_EQ(g.outputs(), std::vector<std::string>{conv->output_ref(0)});
}

TEST(ConvFusionTest, EachSwitchFusesOnlyItsOps) {
  ConvChain c = BuildConvChain("predict");
  AF_ASSERT_OK(c.builder.SetOutputs({c.act}));
  Graph only_bn = c.builder.graph(), only_activation = c.builder.graph();
  AF_ASSERT_OK(MakeConvFusionPass(true, false)->Run(only_bn));
  EXPECT_EQ(CountTypes(only_bn).count("batch_normalization"), 0u);
  EXPECT_EQ(CountTypes(only_bn)["clamp"], 1);
  // The clamp reads the batch norm, not the conv: without the batch-norm fusion nothing fuses.
  AF_ASSERT_OK(MakeConvFusionPass(false, true)->Run(only_activation));
  EXPECT_EQ(CountTypes(only_activation)["batch_normalization"], 1);
  EXPECT_EQ(CountTypes(only_activation)["clamp"], 1);
}

TEST(ConvFusionTest, WhatAJobReturnsOrTrainsStaysUnfused) {
  // The conv's output is returned too: fusing would change what the job returns.
  ConvChain returned = BuildConvChain("predict");
  AF_ASSERT_OK(returned.builder.SetOutputs({returned.act, returned.conv}));
  Graph g = returned.builder.graph();
  AF_ASSERT_OK(MakeConvFusionPass(true, true)->Run(g));
  EXPECT_EQ(CountTypes(g)["batch_normalization"], 1);
  // A training-mode batch norm normalizes with the batch's statistics: not an affine map.
  ConvChain training = BuildConvChain("predict", true);
  AF_ASSERT_OK(training.builder.SetOutputs({training.act}));
  Graph t = training.builder.graph();
  AF_ASSERT_OK(MakeConvFusionPass(true, true)->Run(t));
  EXPECT_EQ(CountTypes(t)["batch_normalization"], 1);
  // Several devices: the fused op has no SBP signatures of its own.
  ConvChain parallel = BuildConvChain("predict");
  AF_ASSERT_OK(parallel.builder.SetOutputs({parallel.act}));
  Graph p = parallel.builder.graph();
  p.set_device_num(2);
  AF_ASSERT_OK(MakeConvFusionPass(true, true)->Run(p));
  EXPECT_EQ(CountTypes(p)["batch_normalization"], 1);
}

TEST(ChannelsLastTest, AConvRegionConvertsOnceAtEachEnd) {
  // x -> conv a -> relu -> conv b -> add(b, a) -> reduce_mean over H, W (keepdims) -> output.
  JobBuilder b = ValueOrDie(JobBuilder::Create("region", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {2, 4, 8, 8}, DType::kFloat32, "net.py:1"));
  std::string wa = ValueOrDie(b.AddVariable("wa", {6, 4, 1, 1}, DType::kFloat32, "net.py:2"));
  std::string wb = ValueOrDie(b.AddVariable("wb", {6, 1, 3, 3}, DType::kFloat32, "net.py:3"));
  std::string a = ValueOrDie(b.AddOp("conv2d", "a", {x, wa}, {}, "net.py:2"))->output_ref(0);
  std::string r = ValueOrDie(b.AddOp("relu", "r", {a}, {}, "net.py:2"))->output_ref(0);
  std::string c = ValueOrDie(b.AddOp("conv2d", "b", {r, wb}, Attrs{{"padding", std::string("SAME")}, {"groups", int64_t{6}}}, "net.py:3"))
                      ->output_ref(0);
  std::string sum = ValueOrDie(b.AddOp("add", "sum", {c, a}, {}, "net.py:4"))->output_ref(0);
  std::string mean = ValueOrDie(b.AddOp("reduce_mean", "pool", {sum}, Attrs{{"axis", std::vector<int64_t>{2, 3}}, {"keepdims", true}},
                                        "net.py:5"))
                         ->output_ref(0);
  AF_ASSERT_OK(b.SetOutputs({mean}));
  Graph g = b.graph();
  AF_ASSERT_OK(MakeChannelsLastPass()->Run(g));
  auto types = CountTypes(g);
  EXPECT_EQ(types["transpose"], 1);  // x into NHWC
  EXPECT_EQ(types["reshape"], 1);    // (2,1,1,6) -> (2,6,1,1) moves only axes of size 1: a view
  for (const char* conv : {"a", "b"}) EXPECT_EQ(g.FindNode(conv)->attrs.GetStringOr("data_format", ""), "NHWC") << conv;
  EXPECT_EQ(g.FindNode("sum")->output_descs[0].shape, (Shape{2, 8, 8, 6}));
  EXPECT_EQ(ValueOrDie(g.FindNode("pool")->attrs.GetInts("axis")), (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(ValueOrDie(g.Desc(g.outputs()[0])).shape, (Shape{2, 6, 1, 1}));
  // Nodes stay in topological order: every input is produced earlier.
  std::set<std::string> seen;
  for (const Node& n : g.nodes()) {
    for (const std::string& in : n.inputs) EXPECT_TRUE(seen.count(ValueOrDie(SplitRef(in)).first)) << n.name << " reads " << in;
    seen.insert(n.name);
  }
}

TEST(ChannelsLastTest, ALoneConvBetweenPoolsStaysChannelsFirst) {
  // max_pool2d is not channels-last aware: converting the conv would cost two transposes for
  // one conv, which its own reorders already cost.
  JobBuilder b = ValueOrDie(JobBuilder::Create("lone", "predict"));
  std::string x = ValueOrDie(b.AddInput("x", {2, 4, 8, 8}, DType::kFloat32, "net.py:1"));
  std::string w = ValueOrDie(b.AddVariable("w", {6, 4, 3, 3}, DType::kFloat32, "net.py:2"));
  std::string y = ValueOrDie(b.AddOp("conv2d", "conv", {x, w}, {}, "net.py:2"))->output_ref(0);
  y = ValueOrDie(b.AddOp("max_pool2d", "pool", {y}, Attrs{{"ksize", int64_t{2}}, {"strides", int64_t{2}}}, "net.py:3"))->output_ref(0);
  AF_ASSERT_OK(b.SetOutputs({y}));
  Graph g = b.graph();
  AF_ASSERT_OK(MakeChannelsLastPass()->Run(g));
  EXPECT_EQ(CountTypes(g).count("transpose"), 0u);
  EXPECT_EQ(g.FindNode("conv")->attrs.GetStringOr("data_format", "NCHW"), "NCHW");
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

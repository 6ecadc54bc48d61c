// The blocked_layout pass's choice of tensors (the numbers are compared in
// kernels/blocked_layout_test.cc and tests/python/test_blocked_layout.py): a tensor is blocked
// only where its writer and every reader take it, implications followed to a fixed point.
#include <gtest/gtest.h>

#include "graph/passes.h"
#include "graph/test_util.h"

namespace actorflow {
namespace graph {
namespace {

using testing::ValueOrDie;
using Ints = std::vector<int64_t>;

// x (2,C,8,8) -> conv a -> relu -> max_pool p -> conv b -> add(b, bias (1,C,1,1)) = out, and
// (extra_reader) reduce_sum(p) returned too.
Graph BuildNet(int64_t channels, bool extra_reader, int devices = 1) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("net", "predict"));
  AF_CHECK_OK(b.SetDeviceNum(devices));
  const Attrs same{{"padding", std::string("SAME")}};
  const std::string x = ValueOrDie(b.AddInput("x", {2, channels, 8, 8}, DType::kFloat32, "net.py:1"));
  const std::string wa = ValueOrDie(b.AddVariable("wa", {channels, channels, 3, 3}, DType::kFloat32, "net.py:2"));
  const std::string wb = ValueOrDie(b.AddVariable("wb", {channels, channels, 3, 3}, DType::kFloat32, "net.py:3"));
  const std::string bias = ValueOrDie(b.AddVariable("bias", {1, channels, 1, 1}, DType::kFloat32, "net.py:4"));
  const std::string a = ValueOrDie(b.AddOp("conv2d", "a", {x, wa}, same, "net.py:2"))->output_ref(0);
  const std::string r = ValueOrDie(b.AddOp("relu", "r", {a}, {}, "net.py:2"))->output_ref(0);
  const std::string p = ValueOrDie(b.AddOp("max_pool2d", "p", {r}, Attrs{{"ksize", int64_t{2}}}, "net.py:3"))->output_ref(0);
  const std::string c = ValueOrDie(b.AddOp("conv2d", "b", {p, wb}, same, "net.py:3"))->output_ref(0);
  const std::string out = ValueOrDie(b.AddOp("add", "add", {c, bias}, {}, "net.py:4"))->output_ref(0);
  std::vector<std::string> outputs = {out};
  if (extra_reader)
    outputs.push_back(ValueOrDie(b.AddOp("reduce_sum", "sum", {p}, Attrs{{"axis", Ints{1}}}, "net.py:5"))->output_ref(0));
  AF_CHECK_OK(b.SetOutputs(outputs));
  return b.graph();
}

Ints Slots(const Graph& g, const std::string& node, const char* attr) {
  const Node* n = g.FindNode(node);
  if (n == nullptr || !n->attrs.Has(attr)) return {};
  return ValueOrDie(n->attrs.GetInts(attr));
}

TEST(BlockedLayoutTest, ChainIsBlockedUpToAReaderThatNeedsPlain) {
  Graph g = BuildNet(16, false);
  AF_ASSERT_OK(MakeBlockedLayoutPass(16)->Run(g));
  // a's output goes blocked through the (layout-free) relu into the pool; the pool writes
  // blocked for conv b; b's output feeds a broadcasting add: plain.
  EXPECT_EQ(Slots(g, "a", "blocked_outputs"), Ints{0});
  EXPECT_EQ(Slots(g, "a", "blocked_inputs"), Ints{});  // x is a feed
  EXPECT_EQ(Slots(g, "p", "blocked_inputs"), Ints{0});
  EXPECT_EQ(Slots(g, "p", "blocked_outputs"), Ints{0});
  EXPECT_EQ(Slots(g, "b", "blocked_inputs"), Ints{0});
  EXPECT_EQ(Slots(g, "b", "blocked_outputs"), Ints{});
  EXPECT_EQ(g.FindNode("b")->attrs.GetIntOr("channel_block", 0), 16);
  EXPECT_FALSE(g.FindNode("r")->attrs.Has("channel_block"));  // elementwise: layout-free
  EXPECT_FALSE(g.FindNode("add")->attrs.Has("channel_block"));
}

TEST(BlockedLayoutTest, AnyPlainReaderKeepsATensorPlainAndThatPropagates) {
  Graph g = BuildNet(16, true);  // reduce_sum reads p
  AF_ASSERT_OK(MakeBlockedLayoutPass(16)->Run(g));
  EXPECT_EQ(Slots(g, "p", "blocked_outputs"), Ints{});
  EXPECT_EQ(Slots(g, "p", "blocked_inputs"), Ints{0});  // its input is still blocked
  EXPECT_FALSE(g.FindNode("b")->attrs.Has("channel_block"));
  EXPECT_EQ(Slots(g, "a", "blocked_outputs"), Ints{0});
}

TEST(BlockedLayoutTest, NothingChangesOffTheBlockOrWithoutOne) {
  for (const auto& [channels, block] : std::vector<std::pair<int64_t, int64_t>>{{12, 16}, {12, 8}, {16, 0}}) {
    Graph g = BuildNet(channels, false);
    AF_ASSERT_OK(MakeBlockedLayoutPass(block)->Run(g));
    for (const Node& n : g.nodes()) EXPECT_FALSE(n.attrs.Has("channel_block")) << n.name << " channels " << channels;
  }
  Graph g = BuildNet(24, false);  // a multiple of 8, not of 16
  AF_ASSERT_OK(MakeBlockedLayoutPass(8)->Run(g));
  EXPECT_EQ(Slots(g, "p", "blocked_outputs"), Ints{0});
}

// The net on 2 devices after the placement and SBP passes (data-parallel: S(0) activations).
Graph PlacedNet() {
  Graph g = BuildNet(16, false, 2);
  AF_CHECK_OK(MakePlacementPass()->Run(g));
  AF_CHECK_OK(MakeSbpPass()->Run(g));
  return g;
}

TEST(BlockedLayoutTest, PlacedPassBlocksEachDevicesChainOfSamplesKeptWhole) {
  Graph unplaced = PlacedNet();
  AF_ASSERT_OK(MakeBlockedLayoutPass(16)->Run(unplaced));  // the one-device pass leaves it alone
  for (const Node& n : unplaced.nodes()) EXPECT_FALSE(n.attrs.Has("channel_block")) << n.name;
  Graph g = PlacedNet();
  ASSERT_EQ(g.FindNode("a")->output_sbp.at(0), Sbp::Split(0));
  AF_ASSERT_OK(MakeBlockedLayoutPass(16, /*placed=*/true)->Run(g));
  EXPECT_EQ(Slots(g, "a", "blocked_outputs"), Ints{0});
  EXPECT_EQ(Slots(g, "p", "blocked_inputs"), Ints{0});
  EXPECT_EQ(Slots(g, "p", "blocked_outputs"), Ints{0});
  EXPECT_EQ(Slots(g, "b", "blocked_inputs"), Ints{0});
  Graph one = BuildNet(16, false);  // the placed pass leaves one-device jobs to the other
  AF_ASSERT_OK(MakeBlockedLayoutPass(16, /*placed=*/true)->Run(one));
  for (const Node& n : one.nodes()) EXPECT_FALSE(n.attrs.Has("channel_block")) << n.name;
}

TEST(BlockedLayoutTest, PlacedPassKeepsATensorReadSplitOnChannelsPlain) {
  for (const Sbp& layout : {Sbp::Split(1), Sbp::Split(3)}) {
    Graph g = PlacedNet();
    g.FindMutableNode("b")->input_sbp.at(0) = layout;  // conv b reads p split inside each sample
    AF_ASSERT_OK(MakeBlockedLayoutPass(16, /*placed=*/true)->Run(g));
    EXPECT_EQ(Slots(g, "p", "blocked_outputs"), Ints{}) << layout.ToString();
    EXPECT_EQ(Slots(g, "b", "blocked_inputs"), Ints{}) << layout.ToString();
    EXPECT_EQ(Slots(g, "p", "blocked_inputs"), Ints{0}) << layout.ToString();  // a pool may convert
    EXPECT_EQ(Slots(g, "a", "blocked_outputs"), Ints{0}) << layout.ToString();
  }
  Graph g = PlacedNet();
  g.FindMutableNode("a")->output_sbp.at(0) = Sbp::Split(1);  // written split on channels
  AF_ASSERT_OK(MakeBlockedLayoutPass(16, /*placed=*/true)->Run(g));
  EXPECT_EQ(Slots(g, "a", "blocked_outputs"), Ints{});
  EXPECT_EQ(Slots(g, "p", "blocked_inputs"), Ints{});  // through the relu: all of it or none
  EXPECT_EQ(Slots(g, "p", "blocked_outputs"), Ints{});  // a pool writes blocked from blocked only
  EXPECT_FALSE(g.FindNode("b")->attrs.Has("channel_block"));
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

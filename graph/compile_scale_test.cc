// The compiler at scale: a 3000-op training job compiles, and the in-place ordering it emits is
// checked against straightforward reference algorithms (string ancestor sets and a search per
// writer, what the passes did before they became linear). No timing is asserted.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "graph/job_builder.h"
#include "graph/passes.h"
#include "graph/test_util.h"

namespace actorflow {
namespace graph {
namespace {

using testing::ValueOrDie;

// `layers` dense layers (matmul + bias_add with relu: two ops each) on a (4, 8) input, a mean
// loss and `optimizer`; a watch_diff on the middle layer. Two ops a layer plus the loss.
JobBuilder BuildChain(int layers, const std::string& optimizer, int devices = 1) {
  JobBuilder b = ValueOrDie(JobBuilder::Create("chain", "train"));
  if (!b.SetDeviceNum(devices).ok()) throw std::runtime_error("SetDeviceNum");
  std::string h = ValueOrDie(b.AddInput("x", {4, 8}, DType::kFloat32, "chain.py:1"));
  std::string middle;
  for (int i = 0; i < layers; ++i) {
    const std::string name = "layer" + std::to_string(i);
    std::string w = ValueOrDie(b.AddVariable(name + "-weight", {8, 8}, DType::kFloat32, "chain.py:2"));
    std::string bias = ValueOrDie(b.AddVariable(name + "-bias", {8}, DType::kFloat32, "chain.py:2"));
    h = ValueOrDie(b.AddOp("matmul", name + "-matmul", {h, w}, {}, "chain.py:3"))->output_ref(0);
    h = ValueOrDie(b.AddOp("bias_add", name + "-bias_add", {h, bias}, Attrs{{"axis", int64_t{1}}, {"fuse_relu", true}},
                           "chain.py:3"))->output_ref(0);
    if (i == layers / 2) middle = h;
  }
  std::string loss = ValueOrDie(b.AddOp("reduce_mean", "loss", {h}, Attrs{{"axis", std::vector<int64_t>{}},
                                                                        {"keepdims", false}}, "chain.py:4"))->output_ref(0);
  if (!b.AddLoss(loss).ok() || !b.SetOutputs({loss}).ok()) throw std::runtime_error("loss");
  if (!b.AddWatch(middle, "middle", true, "chain.py:5").ok()) throw std::runtime_error("watch");
  OptimizerSpec spec;
  spec.type = optimizer;
  if (!b.SetOptimizer(spec).ok()) throw std::runtime_error("SetOptimizer");
  return b;
}

std::string Producer(const std::string& ref) { return ValueOrDie(SplitRef(ref)).first; }

// The ordering pass's control edges as the reference computes them: for each writer, the
// string set of its ancestors, then every earlier reader of a written ref outside it.
std::vector<std::vector<std::string>> ReferenceOrdering(Graph graph) {
  auto ancestors_of = [&](const std::string& name) {
    std::set<std::string> seen;
    std::vector<std::string> stack = {name};
    while (!stack.empty()) {
      const Node* n = graph.FindNode(stack.back());
      stack.pop_back();
      if (!n) continue;
      for (const auto& in : n->inputs)
        if (seen.insert(Producer(in)).second) stack.push_back(Producer(in));
      for (const auto& c : n->control_inputs)
        if (seen.insert(c).second) stack.push_back(c);
    }
    return seen;
  };
  for (size_t m = 0; m < graph.nodes().size(); ++m) {
    if (graph.nodes()[m].mutable_inputs.empty()) continue;
    std::set<std::string> ancestors = ancestors_of(graph.nodes()[m].name);
    std::vector<std::string> control;
    for (int k : graph.nodes()[m].mutable_inputs) {
      const std::string ref = graph.nodes()[m].inputs.at(k);
      for (size_t r = 0; r < m; ++r) {
        const Node& reader = graph.nodes()[r];
        bool reads = false;
        for (const auto& in : reader.inputs) reads |= in == ref;
        if (reads && ancestors.insert(reader.name).second) control.push_back(reader.name);
      }
    }
    for (auto& c : control) graph.mutable_nodes()[m].control_inputs.push_back(c);
  }
  std::vector<std::vector<std::string>> result;
  for (const Node& n : graph.nodes()) result.push_back(n.control_inputs);
  return result;
}

// Whether every reader of a register some task writes in place is an ancestor of the writer
// (or itself a writer ordered after it): one search per writer.
bool ReferenceInPlaceOrderHolds(const plan::Plan& plan) {
  auto ancestors_of = [&](int task) {
    std::vector<bool> seen(plan.tasks_size(), false);
    std::vector<int> stack = {task};
    while (!stack.empty()) {
      const int t = stack.back();
      stack.pop_back();
      for (const plan::InputDesc& in : plan.tasks(t).inputs())
        if (!seen[in.producer_task_id()]) {
          seen[in.producer_task_id()] = true;
          stack.push_back(static_cast<int>(in.producer_task_id()));
        }
    }
    return seen;
  };
  for (int w = 0; w < plan.tasks_size(); ++w) {
    const plan::Task& writer = plan.tasks(w);
    if (writer.mutable_inputs_size() == 0) continue;
    const std::vector<bool> before_writer = ancestors_of(w);
    for (int m : writer.mutable_inputs()) {
      const plan::InputDesc& target = writer.inputs(m);
      for (int r = 0; r < plan.tasks_size(); ++r) {
        if (r == w) continue;
        for (int i = 0; i < plan.tasks(r).inputs_size(); ++i) {
          const plan::InputDesc& in = plan.tasks(r).inputs(i);
          if (in.control() || in.producer_task_id() != target.producer_task_id() ||
              in.producer_register() != target.producer_register())
            continue;
          bool also_writes = false;
          for (int k : plan.tasks(r).mutable_inputs()) also_writes |= k == i;
          if (!before_writer[r] && !(also_writes && ancestors_of(r)[w])) return false;
        }
      }
    }
  }
  return true;
}

TEST(CompileScaleTest, OrderingMatchesTheReferenceOnAMomentumChain) {
  Graph graph = BuildChain(60, "momentum").graph();
  for (auto make : {MakeAutodiffPass, MakeOptimizerPass, MakePrunePass, MakeFusionPass}) AF_ASSERT_OK(make()->Run(graph));
  const std::vector<std::vector<std::string>> expected = ReferenceOrdering(graph);
  AF_ASSERT_OK(MakeOrderingPass()->Run(graph));
  std::vector<std::vector<std::string>> got;
  size_t edges = 0;
  for (const Node& n : graph.nodes()) {
    got.push_back(n.control_inputs);
    edges += n.control_inputs.size();
  }
  EXPECT_EQ(got, expected);
  EXPECT_GT(edges, 0u);  // the chain does need control edges (forward readers of the weights)
}

TEST(CompileScaleTest, ThreeThousandOpTrainJobCompilesWithItsWritersOrdered) {
  JobBuilder builder = BuildChain(1500, "sgd");
  size_t traced_ops = 0;
  for (const Node& n : builder.graph().nodes()) traced_ops += n.kind == NodeKind::kOp;
  EXPECT_GE(traced_ops, 3000u);
  Graph graph = builder.graph();
  plan::Plan plan = ValueOrDie(CompileGraph(graph, CompileOptions{}));  // runs VerifyInPlaceOrder too
  size_t writers = 0;
  for (const plan::Task& t : plan.tasks()) writers += t.mutable_inputs_size() > 0;
  EXPECT_EQ(writers, 3000u);  // one update per weight and bias
  EXPECT_TRUE(ReferenceInPlaceOrderHolds(plan));
}

TEST(CompileScaleTest, InPlaceCheckAgreesWithTheReferenceWhenAnEdgeIsMissing) {
  for (int devices : {1, 2}) {
    SCOPED_TRACE(devices);
    Graph graph = BuildChain(8, "adam", devices).graph();
    plan::Plan plan = ValueOrDie(CompileGraph(graph, CompileOptions{}));
    ASSERT_TRUE(ReferenceInPlaceOrderHolds(plan));
    // Drop each control input in turn that the order depends on: both checks must notice.
    int dropped = 0;
    for (int t = 0; t < plan.tasks_size(); ++t) {
      for (int i = 0; i < plan.tasks(t).inputs_size(); ++i) {
        if (!plan.tasks(t).inputs(i).control() || plan.tasks(t).kind() == plan::SINK) continue;
        plan::Plan broken = plan;
        broken.mutable_tasks(t)->mutable_inputs()->DeleteSubrange(i, 1);
        const bool reference = ReferenceInPlaceOrderHolds(broken);
        EXPECT_EQ(VerifyInPlaceOrder(broken).ok(), reference) << plan.tasks(t).name() << " input " << i;
        dropped += !reference;
      }
    }
    EXPECT_GT(dropped, 0);
  }
}

// FNV-1a of `text`: a golden that stays small for plans of thousands of lines.
uint64_t Fingerprint(const std::string& text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// The compiler's speed-ups must not change what it emits: the plans of a momentum chain on one
// and two devices (every pass, boxing included) are the plans main's compiler emitted, by size
// and fingerprint of their text. A change meant to alter plans regenerates the golden with
// ACTORFLOW_UPDATE_GOLDEN=1.
TEST(CompileScaleTest, ChainPlansAreTheGoldenOnes) {
  std::ostringstream got;
  for (int devices : {1, 2}) {
    Graph graph = BuildChain(40, "momentum", devices).graph();
    const std::string text = ValueOrDie(CompileGraph(graph, CompileOptions{})).DebugString();
    got << "devices " << devices << ": " << text.size() << " bytes, fingerprint " << Fingerprint(text) << "\n";
  }
  const std::string path = std::string(ACTORFLOW_GRAPH_TESTDATA) + "/chain_plan_fingerprints.txt";
  if (std::getenv("ACTORFLOW_UPDATE_GOLDEN") != nullptr) std::ofstream(path) << got.str();
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing golden file " << path;
  std::stringstream golden;
  golden << in.rdbuf();
  EXPECT_EQ(got.str(), golden.str()) << "plan changed; if intended, rerun with ACTORFLOW_UPDATE_GOLDEN=1";
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

// The job cache: a second job of the same structure under other names reuses the first one's
// compile and computes what a fresh compile computes; any difference in structure compiles.
// Bounded by ctest's TIMEOUT.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <set>

#include "graph/test_util.h"
#include "session/session.h"

namespace actorflow {
namespace graph {
namespace {

using testing::ValueOrDie;

#define EXPECT_STATUS_OK(expr)                                 \
  do {                                                         \
    const ::actorflow::Status status_ = (expr);                \
    EXPECT_TRUE(status_.ok()) << status_.ToString();           \
  } while (0)

struct Variant {
  int64_t hidden = 4;          // a shape
  bool fuse_relu = true;       // an attribute
  bool hint = false;           // a layout hint on the first weight
  int devices = 1;             // the device count
  double momentum = 0.9;       // the optimizer
  int line = 10;               // source lines (not part of the structure)
  std::string err = "err";     // the subtraction's name (after the prefix)
};

// Two dense layers, a squared-error loss, momentum SGD, a watch and a watch_diff. Every name
// starts with `prefix`.
JobBuilder Build(const std::string& prefix, const Variant& v = {}) {
  auto at = [&](int offset) { return prefix + ".py:" + std::to_string(v.line + offset); };
  JobBuilder b = ValueOrDie(JobBuilder::Create(prefix + "job", "train"));
  if (!b.SetDeviceNum(v.devices).ok()) throw std::runtime_error("SetDeviceNum");
  std::string x = ValueOrDie(b.AddInput(prefix + "x", {2, 3}, DType::kFloat32, at(0)));
  std::string t = ValueOrDie(b.AddInput(prefix + "t", {2, 2}, DType::kFloat32, at(0)));
  std::string w1 = ValueOrDie(b.AddVariable(prefix + "w1", {3, v.hidden}, DType::kFloat32, at(1)));
  std::string b1 = ValueOrDie(b.AddVariable(prefix + "b1", {v.hidden}, DType::kFloat32, at(1)));
  std::string w2 = ValueOrDie(b.AddVariable(prefix + "w2", {v.hidden, 2}, DType::kFloat32, at(2)));
  if (v.hint && !b.SetOutputSbpHint(w1, Sbp::Split(1)).ok()) throw std::runtime_error("hint");
  std::string h = ValueOrDie(b.AddOp("matmul", prefix + "mm1", {x, w1}, {}, at(3)))->output_ref(0);
  h = ValueOrDie(b.AddOp("bias_add", prefix + "add1", {h, b1}, Attrs{{"axis", int64_t{1}}, {"fuse_relu", v.fuse_relu}},
                         at(3)))->output_ref(0);
  std::string y = ValueOrDie(b.AddOp("matmul", prefix + "mm2", {h, w2}, {}, at(4)))->output_ref(0);
  std::string d = ValueOrDie(b.AddOp("sub", prefix + v.err, {y, t}, {}, at(5)))->output_ref(0);
  std::string loss = ValueOrDie(b.AddOp("square", prefix + "sq", {d}, {}, at(5)))->output_ref(0);
  if (!b.AddLoss(loss).ok() || !b.SetOutputs({loss, w2}).ok()) throw std::runtime_error("loss");
  if (!b.AddWatch(h, prefix + "watch", false, at(6)).ok() || !b.AddWatch(h, prefix + "diff", true, at(7)).ok())
    throw std::runtime_error("watch");
  OptimizerSpec spec;
  spec.type = "momentum";
  spec.momentum = v.momentum;
  if (!b.SetOptimizer(spec).ok()) throw std::runtime_error("SetOptimizer");
  return b;
}

void CreateVariables(Session& session, const std::string& prefix, int64_t hidden = 4) {
  std::vector<float> w1(3 * hidden), b1(hidden), w2(hidden * 2);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  for (size_t i = 0; i < b1.size(); ++i) b1[i] = 0.05f * static_cast<float>(i);
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = 0.2f - 0.07f * static_cast<float>(i % 5);
  AF_ASSERT_OK(session.CreateVariable(prefix + "w1", {{3, hidden}, DType::kFloat32}, w1.data()));
  AF_ASSERT_OK(session.CreateVariable(prefix + "b1", {{hidden}, DType::kFloat32}, b1.data()));
  AF_ASSERT_OK(session.CreateVariable(prefix + "w2", {{hidden, 2}, DType::kFloat32}, w2.data()));
}

// Every name and line of a compiled graph: nodes with their inputs, control inputs, variables
// and lines; feeds, outputs, losses, watches, the optimizer's variables and the gradients.
std::string NamesOf(const Graph& graph) {
  std::string text = graph.job_name() + "\n";
  for (const Node& n : graph.nodes()) {
    text += n.name + " at " + n.location + " variable " + n.variable_name + " (";
    for (const auto& in : n.inputs) text += in + " ";
    text += ") control (";
    for (const auto& c : n.control_inputs) text += c + " ";
    text += ")\n";
  }
  for (const auto& f : graph.feeds()) text += "feed " + f + "\n";
  for (const auto& o : graph.outputs()) text += "output " + o + "\n";
  for (const auto& l : graph.losses()) text += "loss " + l + "\n";
  for (const auto& w : graph.watches()) text += "watch " + w.ref + " " + w.handler_name + " " + w.location + "\n";
  if (graph.optimizer() != nullptr)
    for (const auto& v : graph.optimizer()->variables) text += "optimizes " + v + "\n";
  for (const auto& [forward, gradient] : graph.gradients()) text += "gradient " + forward + " " + gradient + "\n";
  return text;
}

bool Took(const CompiledJob& job, const std::string& step) {
  for (const auto& [name, seconds] : job.compile_timings())
    if (name == step) return true;
  return false;
}

struct Trained {
  std::vector<std::vector<float>> losses, watched;
  std::vector<float> w1, momentum;
};

Trained Train(Session& session, CompiledJob& job, const std::string& prefix, std::vector<std::vector<float>>* watched) {
  Trained result;
  std::vector<float> x = {1, 2, -1, 0.5f, -2, 3}, t = {0.5f, -1, 1, 0}, lr = {0.1f}, loss(4), w2(8);
  for (int step = 0; step < 3; ++step) {
    EXPECT_STATUS_OK(job.Run({TensorView{x.data(), {{2, 3}, DType::kFloat32}}, TensorView{t.data(), {{2, 2}, DType::kFloat32}},
                          TensorView{lr.data(), {{1}, DType::kFloat32}}},
                         {TensorView{loss.data(), {{2, 2}, DType::kFloat32}}, TensorView{w2.data(), {{4, 2}, DType::kFloat32}}}));
    result.losses.push_back(loss);
  }
  result.w1.resize(12);
  result.momentum.resize(12);
  EXPECT_STATUS_OK(session.GetVariable(prefix + "w1", result.w1.data(), 48));
  EXPECT_STATUS_OK(session.GetVariable(prefix + "w1-momentum", result.momentum.data(), 48));
  result.watched = *watched;
  return result;
}

TEST(JobCacheTest, SameStructureUnderOtherNamesReusesTheCompileAndComputesTheSame) {
  Session session;
  CreateVariables(session, "alpha_");
  CreateVariables(session, "beta_");
  CreateVariables(session, "gamma_");
  std::vector<std::vector<float>> watched_alpha, watched_beta;
  auto recorder = [](std::vector<std::vector<float>>* into) {
    return [into](const std::string& name, int64_t, const std::vector<TensorView>& views) {
      if (name.find("watch") != std::string::npos)  // one actor thread at a time per job here
        into->emplace_back(views[0].as<float>(), views[0].as<float>() + views[0].num_elements());
    };
  };
  auto alpha = ValueOrDie(session.Compile(Build("alpha_"), JobOptions{}, recorder(&watched_alpha)));
  EXPECT_TRUE(Took(*alpha, "job cache miss"));
  EXPECT_TRUE(Took(*alpha, "ordering"));
  Variant other_lines;
  other_lines.line = 40;
  auto beta = ValueOrDie(session.Compile(Build("beta_", other_lines), JobOptions{}, recorder(&watched_beta)));
  EXPECT_TRUE(Took(*beta, "job cache hit"));
  EXPECT_FALSE(Took(*beta, "ordering"));  // no pass ran
  EXPECT_EQ(session.job_cache_size(), 1u);

  // The cached plan is the plan a fresh compile of beta gives (names, variables, watch
  // handlers and source lines are beta's; the names sort alike, so even the order agrees).
  JobOptions fresh_options;
  fresh_options.use_job_cache = false;
  auto fresh = ValueOrDie(session.Compile(Build("beta_", other_lines), fresh_options));
  EXPECT_TRUE(Took(*fresh, "ordering"));
  EXPECT_EQ(beta->plan().DebugString(), fresh->plan().DebugString());
  EXPECT_EQ(beta->plan().DebugString().find("alpha_"), std::string::npos);
  EXPECT_NE(beta->plan().DebugString().find("beta_.py:41"), std::string::npos);
  EXPECT_EQ(SbpSummary(beta->graph()), SbpSummary(fresh->graph()));
  EXPECT_EQ(NamesOf(beta->graph()), NamesOf(fresh->graph()));
  EXPECT_EQ(NamesOf(beta->graph()).find("alpha_"), std::string::npos);
  EXPECT_EQ(beta->input_descs()[0].name, "beta_x");
  fresh->Shutdown();

  // Same numbers: losses, watches, the trained variable and its optimizer state, each job on
  // its own variables (beta's momentum state was created under beta's name).
  Trained a = Train(session, *alpha, "alpha_", &watched_alpha);
  Trained b = Train(session, *beta, "beta_", &watched_beta);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.w1, b.w1);
  EXPECT_EQ(a.momentum, b.momentum);
  ASSERT_EQ(a.watched.size(), 3u);
  EXPECT_EQ(a.watched, b.watched);
  std::vector<float> gamma_w1(12);
  AF_ASSERT_OK(session.GetVariable("gamma_w1", gamma_w1.data(), 48));
  EXPECT_NE(a.w1, gamma_w1);  // training moved alpha's weights, and gamma's stayed put
}

// One step of Train's inputs, its loss into `loss`.
Status Step(CompiledJob& job, std::vector<float>* loss) {
  static const std::vector<float> x = {1, 2, -1, 0.5f, -2, 3}, t = {0.5f, -1, 1, 0}, lr = {0.1f};
  std::vector<float> w2(8);
  loss->resize(4);
  return job.Run({TensorView{const_cast<float*>(x.data()), {{2, 3}, DType::kFloat32}},
                  TensorView{const_cast<float*>(t.data()), {{2, 2}, DType::kFloat32}},
                  TensorView{const_cast<float*>(lr.data()), {{1}, DType::kFloat32}}},
                 {TensorView{loss->data(), {{2, 2}, DType::kFloat32}}, TensorView{w2.data(), {{4, 2}, DType::kFloat32}}});
}

// Jobs from the cache run the entry's plan under their own names: they share no variable,
// register or state. Two of them (and the job that stored the entry), stepped alternately and
// then on two threads at once, compute what jobs compiled alone compute, each watch callback
// under its own job's handler name.
TEST(JobCacheTest, JobsSharingAPlanRunAlternatelyAndConcurrentlyAsUncachedOnes) {
  Session session;
  const std::vector<std::string> cached = {"alpha_", "beta_", "gamma_"}, fresh = {"fresh_alpha_", "fresh_beta_", "fresh_gamma_"};
  for (const auto& prefix : cached) CreateVariables(session, prefix);
  for (const auto& prefix : fresh) CreateVariables(session, prefix);
  std::mutex mu;
  std::map<std::string, std::vector<std::vector<float>>> watched;  // by handler name, under mu
  auto recorder = [&](const std::string& name, int64_t, const std::vector<TensorView>& views) {
    std::lock_guard<std::mutex> lock(mu);
    watched[name].emplace_back(views[0].as<float>(), views[0].as<float>() + views[0].num_elements());
  };
  JobOptions fresh_options;
  fresh_options.use_job_cache = false;
  std::vector<std::shared_ptr<CompiledJob>> jobs, fresh_jobs;
  for (size_t k = 0; k < cached.size(); ++k) {
    Variant lines;
    lines.line = 10 + 20 * static_cast<int>(k);
    jobs.push_back(ValueOrDie(session.Compile(Build(cached[k], lines), JobOptions{}, recorder)));
    EXPECT_TRUE(Took(*jobs.back(), k == 0 ? "job cache miss" : "job cache hit"));
    fresh_jobs.push_back(ValueOrDie(session.Compile(Build(fresh[k], lines), fresh_options, recorder)));
    // The runtime's words name this job's tasks (a train job writes variables: not inline).
    std::string expected = fresh_jobs[k]->inline_refusal();
    expected.erase(expected.find("fresh_"), 6);
    EXPECT_NE(expected.find(cached[k]), std::string::npos) << expected;
    EXPECT_EQ(jobs[k]->inline_refusal(), expected);
  }
  // A fresh job's steps, alone: what every job must compute.
  constexpr int kSteps = 6;
  std::vector<std::vector<float>> want;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> loss;
    AF_ASSERT_OK(Step(*fresh_jobs[0], &loss));
    want.push_back(loss);
  }
  // Alternately: beta, gamma and alpha take turns, a step each.
  std::map<std::string, std::vector<std::vector<float>>> losses;
  for (int step = 0; step < kSteps / 2; ++step)
    for (size_t k : {1, 2, 0}) {
      std::vector<float> loss;
      AF_ASSERT_OK(Step(*jobs[k], &loss));
      losses[cached[k]].push_back(loss);
    }
  // Then at once, each job on its own thread (bounded: a deadlock fails the test).
  std::vector<std::future<Status>> running;
  std::vector<std::vector<std::vector<float>>> concurrent(cached.size());
  for (size_t k = 0; k < cached.size(); ++k)
    running.push_back(std::async(std::launch::async, [&, k] {
      for (int step = kSteps / 2; step < kSteps; ++step) {
        std::vector<float> loss;
        AF_RETURN_IF_ERROR(Step(*jobs[k], &loss));
        concurrent[k].push_back(loss);
      }
      return Status::Ok();
    }));
  for (auto& r : running) {
    ASSERT_EQ(r.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "a job did not finish its steps";
    AF_ASSERT_OK(r.get());
  }
  for (size_t k = 0; k < cached.size(); ++k) {
    SCOPED_TRACE(cached[k]);
    auto& all = losses[cached[k]];
    all.insert(all.end(), concurrent[k].begin(), concurrent[k].end());
    EXPECT_EQ(all, want);
  }
  // Variables and optimizer state: each job trained its own as the fresh job did.
  std::vector<float> want_w1(12), want_momentum(12);
  AF_ASSERT_OK(session.GetVariable("fresh_alpha_w1", want_w1.data(), 48));
  AF_ASSERT_OK(session.GetVariable("fresh_alpha_w1-momentum", want_momentum.data(), 48));
  for (const auto& prefix : cached) {
    SCOPED_TRACE(prefix);
    std::vector<float> w1(12), momentum(12);
    AF_ASSERT_OK(session.GetVariable(prefix + "w1", w1.data(), 48));
    AF_ASSERT_OK(session.GetVariable(prefix + "w1-momentum", momentum.data(), 48));
    EXPECT_EQ(w1, want_w1);
    EXPECT_EQ(momentum, want_momentum);
  }
  for (auto& job : jobs) job->Drain();
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& prefix : cached) {
    SCOPED_TRACE(prefix);
    EXPECT_EQ(watched[prefix + "watch"], watched["fresh_alpha_watch"]);
    EXPECT_EQ(watched[prefix + "diff"], watched["fresh_alpha_diff"]);
    EXPECT_EQ(watched[prefix + "watch"].size(), static_cast<size_t>(kSteps));
  }
  // No other handler name was called: the three cached jobs' two each and fresh alpha's two.
  EXPECT_EQ(watched.size(), 8u);
}

// Every hit reuses what the store found about the entry's names; on two devices the
// tasks carry device suffixes ("@1") and boxing tasks, and each hit is still the fresh plan.
TEST(JobCacheTest, RepeatedHitsOnTwoDevicesAreTheFreshPlans) {
  Session session;
  Variant two_devices;
  two_devices.devices = 2;
  for (const std::string prefix : {"one_", "two_", "three_"}) CreateVariables(session, prefix);
  auto first = ValueOrDie(session.Compile(Build("one_", two_devices), JobOptions{}));
  EXPECT_TRUE(Took(*first, "job cache miss"));
  JobOptions fresh_options;
  fresh_options.use_job_cache = false;
  for (const std::string prefix : {"two_", "three_"}) {
    SCOPED_TRACE(prefix);
    Variant lines = two_devices;
    lines.line = prefix == "two_" ? 20 : 30;
    auto hit = ValueOrDie(session.Compile(Build(prefix, lines), JobOptions{}));
    EXPECT_TRUE(Took(*hit, "job cache hit"));
    auto fresh = ValueOrDie(session.Compile(Build(prefix, lines), fresh_options));
    EXPECT_EQ(hit->plan().DebugString(), fresh->plan().DebugString());
    EXPECT_NE(hit->plan().DebugString().find("@1"), std::string::npos);  // device suffixes were renamed
    EXPECT_EQ(NamesOf(hit->graph()), NamesOf(fresh->graph()));
    hit->Shutdown();
    fresh->Shutdown();
  }
}

TEST(JobCacheTest, AnyStructuralDifferenceCompiles) {
  Session session;
  CreateVariables(session, "base_");
  auto base = ValueOrDie(session.Compile(Build("base_"), JobOptions{}));
  EXPECT_TRUE(Took(*base, "job cache miss"));
  struct Case {
    std::string name;
    Variant variant;
    int register_num = 2;
  };
  std::vector<Case> cases(6);
  cases[0].name = "shape_";
  cases[0].variant.hidden = 5;
  cases[1].name = "attr_";
  cases[1].variant.fuse_relu = false;
  cases[2].name = "hint_";
  cases[2].variant.hint = true;
  cases[3].name = "devices_";
  cases[3].variant.devices = 2;
  cases[4].name = "optimizer_";
  cases[4].variant.momentum = 0.8;
  cases[5].name = "registers_";
  cases[5].register_num = 3;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CreateVariables(session, c.name, c.variant.hidden);
    JobOptions options;
    options.register_num = c.register_num;
    EXPECT_NE(CanonicalJobKey(Build(c.name, c.variant).graph(), c.register_num),
              CanonicalJobKey(Build("base_").graph(), 2));
    auto job = ValueOrDie(session.Compile(Build(c.name, c.variant), options));
    EXPECT_TRUE(Took(*job, "job cache miss"));
    EXPECT_FALSE(Took(*job, "job cache hit"));
  }
  // Names and lines alone are no difference.
  Variant lines;
  lines.line = 99;
  EXPECT_EQ(CanonicalJobKey(Build("other_", lines).graph(), 2), CanonicalJobKey(Build("base_").graph(), 2));
}

// The renaming is by the rules the passes name nodes with ("<op>-grad" from "<op>"): a new job
// whose own names make two compiled nodes one name under those rules is compiled, not renamed.
TEST(JobCacheTest, NamesThatWouldCollideUnderTheRenamingCompile) {
  Session session;
  CreateVariables(session, "alpha_");
  CreateVariables(session, "beta_");
  auto alpha = ValueOrDie(session.Compile(Build("alpha_"), JobOptions{}));
  EXPECT_TRUE(Took(*alpha, "job cache miss"));
  std::string derived;  // a compiled name made from the traced "alpha_mm2"
  for (const Node& n : alpha->graph().nodes())
    if (n.name.rfind("alpha_mm2-", 0) == 0) derived = n.name;
  ASSERT_FALSE(derived.empty()) << NamesOf(alpha->graph());
  // beta names its subtraction what "alpha_mm2-..." becomes under beta's names.
  Variant colliding;
  colliding.err = derived.substr(std::string("alpha_").size());
  EXPECT_EQ(CanonicalJobKey(Build("beta_", colliding).graph(), 2), CanonicalJobKey(Build("alpha_").graph(), 2));
  auto beta = session.Compile(Build("beta_", colliding), JobOptions{});
  JobOptions fresh_options;
  fresh_options.use_job_cache = false;
  auto fresh = session.Compile(Build("beta_", colliding), fresh_options);
  ASSERT_EQ(beta.ok(), fresh.ok()) << beta.status().ToString() << " / " << fresh.status().ToString();
  if (beta.ok()) {
    EXPECT_TRUE(Took(**beta, "job cache miss"));
    EXPECT_FALSE(Took(**beta, "job cache hit"));
    EXPECT_EQ((*beta)->plan().DebugString(), (*fresh)->plan().DebugString());
  } else {
    EXPECT_EQ(beta.status().ToString(), fresh.status().ToString());
  }
}

// The key's node part the builder writes as the trace grows is the part written whole at
// compile time; a node changed after it was added (a layout hint) drops the builder's part.
TEST(JobCacheTest, TheKeyWrittenWhileTracingIsTheKeyWrittenWhole) {
  Variant hinted, two_devices, wider;
  hinted.hint = true;
  two_devices.devices = 2;
  wider.hidden = 7;
  for (const Variant& v : {Variant{}, hinted, two_devices, wider}) {
    JobBuilder b = Build("alpha_", v);
    SCOPED_TRACE(v.hint ? "hinted" : "plain");
    EXPECT_EQ(b.node_key() == nullptr, v.hint);
    EXPECT_EQ(CanonicalJobKey(b, 2), CanonicalJobKey(b.graph(), 2));
    EXPECT_EQ(CanonicalJobKey(b, 3), CanonicalJobKey(b.graph(), 3));
  }
  EXPECT_EQ(CanonicalJobKey(Build("alpha_"), 2), CanonicalJobKey(Build("beta_"), 2));
  EXPECT_NE(CanonicalJobKey(Build("alpha_"), 2), CanonicalJobKey(Build("alpha_", wider), 2));
}

// The duplicate check of a hit's names (a NameIndex used as a set) against std::set: equal
// contents, through growth; and NameArena's views (session/name_table.h).
TEST(JobCacheTest, NameSetFindsEveryDuplicate) {
  std::vector<std::string> words;
  for (int i = 0; i < 5000; ++i) words.push_back("n" + std::to_string(i * 7919 % 3001) + (i % 3 ? "-grad" : ""));
  words.push_back("");
  words.push_back("");
  NameIndex views;
  std::set<std::string> reference;
  for (const std::string& w : words) {
    SCOPED_TRACE(w);
    EXPECT_EQ(views.Insert(w, 0), reference.insert(w).second);
  }
  NameArena arena;
  std::string_view joined = arena.Concat("alpha_", "mm2-grad");
  std::string_view big = arena.Concat(std::string(100000, 'x'));
  EXPECT_EQ(joined, "alpha_mm2-grad");  // still intact after a chunk of its own
  EXPECT_EQ(big.size(), 100000u);
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

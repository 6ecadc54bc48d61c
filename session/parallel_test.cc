// One process, several CPU devices: the seed MLP (784-512-10, dense+relu+dense, sparse softmax
// cross entropy, SGD) trained data-parallel, model-parallel and per-layer placed must match the
// one-device run; variables stay logical (a model trained on 2 devices runs on 1 and 3); bad
// placements and impossible splits are clear errors after which the next compile works.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <optional>

#include "graph/test_util.h"
#include "session/session.h"

namespace actorflow {
namespace graph {
namespace {

using testing::ValueOrDie;

constexpr int64_t kBatch = 100, kIn = 784, kHidden = 512, kClasses = 10;

struct MlpOptions {
  int devices = 1;
  std::optional<Sbp> hidden_weight_hint;  // model-parallel first layer
  bool per_layer_placement = false;       // layer 1 on 0:0, layer 2 and the loss on 0:1
  std::string name = "mlp";
};

JobBuilder BuildSeedMlp(const MlpOptions& options) {
  JobBuilder b = ValueOrDie(JobBuilder::Create(options.name, "train"));
  if (!b.SetDeviceNum(options.devices).ok()) throw std::runtime_error("SetDeviceNum");
  auto place = [&](const char* ids) {
    if (options.per_layer_placement && !b.SetPlacement(Placement{"cpu", {ids}}).ok()) throw std::runtime_error("place");
  };
  std::string x = ValueOrDie(b.AddInput("x", {kBatch, kIn}, DType::kFloat32, "mlp.py:1"));
  std::string labels = ValueOrDie(b.AddInput("labels", {kBatch}, DType::kInt32, "mlp.py:2"));
  place("0:0");
  std::string w1 = ValueOrDie(b.AddVariable("hidden-weight", {kIn, kHidden}, DType::kFloat32, "mlp.py:3"));
  std::string b1 = ValueOrDie(b.AddVariable("hidden-bias", {kHidden}, DType::kFloat32, "mlp.py:3"));
  if (options.hidden_weight_hint) {
    Status hinted = b.SetOutputSbpHint(w1, *options.hidden_weight_hint);
    if (!hinted.ok()) throw std::runtime_error(hinted.message());
  }
  std::string t = ValueOrDie(b.AddOp("matmul", "hidden-matmul", {x, w1}, {}, "mlp.py:3"))->output_ref(0);
  t = ValueOrDie(b.AddOp("bias_add", "hidden-bias_add", {t, b1}, {}, "mlp.py:3"))->output_ref(0);
  t = ValueOrDie(b.AddOp("relu", "hidden-relu", {t}, {}, "mlp.py:3"))->output_ref(0);
  place("0:1");
  std::string w2 = ValueOrDie(b.AddVariable("output-weight", {kHidden, kClasses}, DType::kFloat32, "mlp.py:4"));
  std::string b2 = ValueOrDie(b.AddVariable("output-bias", {kClasses}, DType::kFloat32, "mlp.py:4"));
  t = ValueOrDie(b.AddOp("matmul", "output-matmul", {t, w2}, {}, "mlp.py:4"))->output_ref(0);
  std::string logits = ValueOrDie(b.AddOp("bias_add", "output-bias_add", {t, b2}, {}, "mlp.py:4"))->output_ref(0);
  std::string loss =
      ValueOrDie(b.AddOp("sparse_softmax_cross_entropy", "loss", {labels, logits}, {}, "mlp.py:5"))->output_ref(0);
  if (!b.AddLoss(loss).ok()) throw std::runtime_error("AddLoss");
  OptimizerSpec spec;
  spec.type = "sgd";
  if (!b.SetOptimizer(spec).ok()) throw std::runtime_error("SetOptimizer");
  if (!b.SetOutputs({loss}).ok()) throw std::runtime_error("SetOutputs");
  return b;
}

std::vector<float> Values(int64_t n, double scale, double phase) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * std::sin(0.37 * static_cast<double>(i) + phase));
  return v;
}

// What Train needs of a model: its variables, its input's shape and how to build it.
struct Model {
  std::map<std::string, Shape> variables;
  Shape input_shape;
  std::function<JobBuilder()> build;
  // The learning-rate feed's length (LAMB's is 3: the rate and its bias corrections, here 1).
  int64_t rate_size = 1;
};

Model SeedMlp(const MlpOptions& options) {
  return Model{{{"hidden-weight", {kIn, kHidden}},
                {"hidden-bias", {kHidden}},
                {"output-weight", {kHidden, kClasses}},
                {"output-bias", {kClasses}}},
               {kBatch, kIn},
               [options] { return BuildSeedMlp(options); }};
}

void CreateVariables(Session& session, const Model& model) {
  double phase = 0.1;
  for (const auto& [name, shape] : model.variables) {
    std::vector<float> init = Values(NumElements(shape), 0.05, phase += 1.0);
    Status made = session.CreateVariable(name, {shape, DType::kFloat32}, init.data());
    if (!made.ok()) throw std::runtime_error(made.message());
  }
}
void CreateVariables(Session& session) { CreateVariables(session, SeedMlp(MlpOptions{})); }

struct Trained {
  std::vector<std::vector<float>> losses;  // per step, per sample
  std::map<std::string, std::vector<float>> variables;
  std::string summary;
};

// `steps` SGD steps over three alternating batches from the same initial variables.
Trained Train(const Model& model, int steps, Session* shared = nullptr) {
  Session own;
  Session& session = shared ? *shared : own;
  if (!shared) CreateVariables(session, model);
  JobOptions job_options;
  job_options.num_threads = 2;
  auto job = ValueOrDie(session.Compile(model.build(), job_options));
  Trained result;
  result.summary = SbpSummary(job->graph());
  const int64_t batch = model.input_shape[0], features = NumElements(model.input_shape) / batch;
  std::vector<std::vector<float>> xs;
  std::vector<std::vector<int32_t>> labels;
  // A learnable task (each class a pattern plus a smaller pattern per sample), so training
  // converges as on MNIST rather than wandering where rounding differences grow.
  for (int b = 0; b < 3; ++b) {
    labels.emplace_back(batch);
    std::vector<float> x(batch * features);
    for (int64_t i = 0; i < batch; ++i) {
      const int32_t label = static_cast<int32_t>((i * 7 + b) % kClasses);
      labels.back()[i] = label;
      for (int64_t j = 0; j < features; ++j)
        x[i * features + j] = static_cast<float>(std::sin(0.05 * static_cast<double>(j) * (label + 1)) +
                                                 0.3 * std::sin(0.37 * static_cast<double>(j + i * features) + b));
    }
    xs.push_back(std::move(x));
  }
  std::vector<float> learning_rate(model.rate_size, 1.0f);
  learning_rate[0] = 0.1f;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> loss(batch);
    const int b = step % 3;
    Status ran = job->Run({TensorView{xs[b].data(), {model.input_shape, DType::kFloat32}},
                           TensorView{labels[b].data(), {{batch}, DType::kInt32}},
                           TensorView{learning_rate.data(), {{model.rate_size}, DType::kFloat32}}},
                          {TensorView{loss.data(), {{batch}, DType::kFloat32}}});
    if (!ran.ok()) throw std::runtime_error(ran.message());
    result.losses.push_back(std::move(loss));
  }
  for (const auto& [name, shape] : model.variables) {
    std::vector<float>& v = result.variables[name];
    v.resize(NumElements(shape));
    Status got = session.GetVariable(name, v.data(), v.size() * sizeof(float));
    if (!got.ok()) throw std::runtime_error(got.message());
  }
  return result;
}
Trained Train(const MlpOptions& options, int steps, Session* shared = nullptr) {
  return Train(SeedMlp(options), steps, shared);
}

// A small LeNet: conv 3x3 (4 channels) + bias + relu + 2x2 max pool, flatten, dense 144-32 +
// relu, dense 32-10; hybrid on `devices` devices: the convolution data-parallel, the first
// dense layer's weight split on its output axis (model-parallel).
Model SmallLenet(int devices, bool hybrid) {
  auto build = [devices, hybrid] {
    JobBuilder b = ValueOrDie(JobBuilder::Create("lenet", "train"));
    if (!b.SetDeviceNum(devices).ok()) throw std::runtime_error("devices");
    std::string x = ValueOrDie(b.AddInput("x", {20, 1, 12, 12}, DType::kFloat32, "lenet.py:1"));
    std::string labels = ValueOrDie(b.AddInput("labels", {20}, DType::kInt32, "lenet.py:2"));
    std::string k = ValueOrDie(b.AddVariable("conv-weight", {4, 1, 3, 3}, DType::kFloat32, "lenet.py:3"));
    std::string kb = ValueOrDie(b.AddVariable("conv-bias", {4}, DType::kFloat32, "lenet.py:3"));
    std::string w1 = ValueOrDie(b.AddVariable("dense1-weight", {144, 32}, DType::kFloat32, "lenet.py:5"));
    std::string b1 = ValueOrDie(b.AddVariable("dense1-bias", {32}, DType::kFloat32, "lenet.py:5"));
    std::string w2 = ValueOrDie(b.AddVariable("dense2-weight", {32, 10}, DType::kFloat32, "lenet.py:6"));
    std::string b2 = ValueOrDie(b.AddVariable("dense2-bias", {10}, DType::kFloat32, "lenet.py:6"));
    if (hybrid && !b.SetOutputSbpHint(w1, Sbp::Split(1)).ok()) throw std::runtime_error("hint");
    auto op = [&](const std::string& type, const std::string& name, std::vector<std::string> in, Attrs attrs,
                  const char* line) { return ValueOrDie(b.AddOp(type, name, in, attrs, line))->output_ref(0); };
    std::string t = op("conv2d", "conv", {x, k}, Attrs{{"padding", std::string("SAME")}}, "lenet.py:3");
    t = op("bias_add", "conv-bias_add", {t, kb}, Attrs{{"axis", int64_t{1}}}, "lenet.py:3");
    t = op("relu", "conv-relu", {t}, {}, "lenet.py:3");
    t = op("max_pool2d", "pool", {t},
           Attrs{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("VALID")}}, "lenet.py:4");
    t = op("flatten", "flat", {t}, Attrs{{"start_dim", int64_t{1}}}, "lenet.py:4");
    t = op("matmul", "dense1", {t, w1}, {}, "lenet.py:5");
    t = op("bias_add", "dense1-bias_add", {t, b1}, {}, "lenet.py:5");
    t = op("relu", "dense1-relu", {t}, {}, "lenet.py:5");
    t = op("matmul", "dense2", {t, w2}, {}, "lenet.py:6");
    t = op("bias_add", "dense2-bias_add", {t, b2}, {}, "lenet.py:6");
    std::string loss = op("sparse_softmax_cross_entropy", "loss", {labels, t}, {}, "lenet.py:7");
    if (!b.AddLoss(loss).ok()) throw std::runtime_error("AddLoss");
    OptimizerSpec spec;
    spec.type = "sgd";
    if (!b.SetOptimizer(spec).ok() || !b.SetOutputs({loss}).ok()) throw std::runtime_error("optimizer");
    return b;
  };
  return Model{{{"conv-weight", {4, 1, 3, 3}},
                {"conv-bias", {4}},
                {"dense1-weight", {144, 32}},
                {"dense1-bias", {32}},
                {"dense2-weight", {32, 10}},
                {"dense2-bias", {10}}},
               {20, 1, 12, 12},
               build};
}

// Reshapes that keep the split batch axis, of a feed and of a layer's output (each lowered to a
// view on every device, graph/parallel_test.cc): x(10, 8, 16) -> reshape (10, 128) -> dense
// 128-64 + relu -> reshape (10, 8, 8) -> reshape (10, 64) -> dense 64-10. 10 rows over 3
// devices are 4/3/3: each device's views start at its own row.
Model ReshapedMlp(int devices) {
  auto build = [devices] {
    JobBuilder b = ValueOrDie(JobBuilder::Create("reshaped", "train"));
    if (!b.SetDeviceNum(devices).ok()) throw std::runtime_error("devices");
    std::string x = ValueOrDie(b.AddInput("x", {10, 8, 16}, DType::kFloat32, "r.py:1"));
    std::string labels = ValueOrDie(b.AddInput("labels", {10}, DType::kInt32, "r.py:2"));
    std::string w1 = ValueOrDie(b.AddVariable("r1-weight", {128, 64}, DType::kFloat32, "r.py:3"));
    std::string b1 = ValueOrDie(b.AddVariable("r1-bias", {64}, DType::kFloat32, "r.py:3"));
    std::string w2 = ValueOrDie(b.AddVariable("r2-weight", {64, 10}, DType::kFloat32, "r.py:4"));
    auto op = [&](const std::string& type, const std::string& name, std::vector<std::string> in, Attrs attrs = {}) {
      return ValueOrDie(b.AddOp(type, name, in, attrs, "r.py:5"))->output_ref(0);
    };
    std::string t = op("reshape", "flat_x", {x}, Attrs{{"shape", std::vector<int64_t>{10, 128}}});
    t = op("matmul", "r1", {t, w1});
    t = op("bias_add", "r1-bias_add", {t, b1});
    t = op("relu", "r1-relu", {t});
    t = op("reshape", "square", {t}, Attrs{{"shape", std::vector<int64_t>{10, 8, 8}}});
    t = op("reshape", "flat_h", {t}, Attrs{{"shape", std::vector<int64_t>{10, 64}}});
    t = op("matmul", "r2", {t, w2});
    std::string loss = op("sparse_softmax_cross_entropy", "loss", {labels, t});
    if (!b.AddLoss(loss).ok()) throw std::runtime_error("AddLoss");
    OptimizerSpec spec;
    spec.type = "sgd";
    if (!b.SetOptimizer(spec).ok() || !b.SetOutputs({loss}).ok()) throw std::runtime_error("optimizer");
    return b;
  };
  return Model{{{"r1-weight", {128, 64}}, {"r1-bias", {64}}, {"r2-weight", {64, 10}}}, {10, 8, 16}, build};
}

// Two dense layers stored as OneFlow stores them, weights (units, in) read with transpose_b,
// trained with momentum: x(60, 50) -> dense 100 + relu -> dense 10 -> loss. With `split`, both
// weights and biases are hinted S(0) (model_distribute=split(0): output features), so every
// variable and its momentum are stored split: 100 rows over 3 devices are 34/33/33, 10 are 4/3/3.
Model SplitRowsMlp(int devices, bool split, const std::string& optimizer = "momentum") {
  auto build = [devices, split, optimizer] {
    JobBuilder b = ValueOrDie(JobBuilder::Create("rows", "train"));
    if (!b.SetDeviceNum(devices).ok()) throw std::runtime_error("devices");
    std::string x = ValueOrDie(b.AddInput("x", {60, 50}, DType::kFloat32, "rows.py:1"));
    std::string labels = ValueOrDie(b.AddInput("labels", {60}, DType::kInt32, "rows.py:2"));
    auto variable = [&](const std::string& name, Shape shape) {
      std::string ref = ValueOrDie(b.AddVariable(name, shape, DType::kFloat32, "rows.py:3"));
      if (split && !b.SetOutputSbpHint(ref, Sbp::Split(0)).ok()) throw std::runtime_error("hint");
      return ref;
    };
    std::string w1 = variable("rows1-weight", {100, 50}), b1 = variable("rows1-bias", {100});
    std::string w2 = variable("rows2-weight", {10, 100}), b2 = variable("rows2-bias", {10});
    auto op = [&](const std::string& type, const std::string& name, std::vector<std::string> in, Attrs attrs) {
      return ValueOrDie(b.AddOp(type, name, in, attrs, "rows.py:4"))->output_ref(0);
    };
    std::string t = op("matmul", "rows1", {x, w1}, Attrs{{"transpose_b", true}});
    t = op("bias_add", "rows1-bias_add", {t, b1}, {});
    t = op("relu", "rows1-relu", {t}, {});
    t = op("matmul", "rows2", {t, w2}, Attrs{{"transpose_b", true}});
    t = op("bias_add", "rows2-bias_add", {t, b2}, {});
    std::string loss = op("sparse_softmax_cross_entropy", "loss", {labels, t}, {});
    if (!b.AddLoss(loss).ok()) throw std::runtime_error("AddLoss");
    OptimizerSpec spec;
    spec.type = optimizer;
    if (!b.SetOptimizer(spec).ok() || !b.SetOutputs({loss}).ok()) throw std::runtime_error("optimizer");
    return b;
  };
  return Model{{{"rows1-weight", {100, 50}}, {"rows1-bias", {100}}, {"rows2-weight", {10, 100}}, {"rows2-bias", {10}}},
               {60, 50},
               build,
               optimizer == "lamb" ? 3 : 1};
}

// max |a - b| / max |b|: the relative error of a tensor.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 1e-30;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    norm = std::max(norm, std::abs(static_cast<double>(b[i])));
  }
  return a.size() == b.size() ? diff / norm : 1e30;
}

void ExpectSameTraining(const Trained& got, const Trained& want, double tolerance) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_LE(RelativeError(got.losses[s], want.losses[s]), tolerance) << "loss of step " << s;
  for (const auto& [name, values] : want.variables)
    EXPECT_LE(RelativeError(got.variables.at(name), values), tolerance) << "variable " << name;
}

// Whether some line of the summary names `op` with `signature` ("hidden-matmul (matmul) on cpu
// 0:0,0:1: S(0),B->S(0)").
bool Chose(const std::string& summary, const std::string& op, const std::string& signature) {
  size_t at = summary.find(op + " (");
  if (at == std::string::npos) return false;
  size_t end = summary.find('\n', at);
  return summary.substr(at, end - at).find(": " + signature) != std::string::npos;
}


// Copies of matmul and relu with SBP functions written here, so that the placement, SBP,
// boxing and lowering machinery is checked on its own, whatever the registry's ops declare.
void RegisterTestOps() {
  static bool done = [] {
    RegisterAllOps();
    OpDef matmul = *OpRegistry::Global().Find("matmul").value();
    matmul.type = "test_matmul";
    matmul.grad = nullptr;
    matmul.sbp = [](const SbpContext&) -> StatusOr<std::vector<SbpSignature>> {
      std::vector<SbpSignature> signatures;
      for (const char* text : {"S(0),B->S(0)", "B,S(1)->S(1)", "S(1),S(0)->P", "B,B->B"})
        signatures.push_back(ParseSbpSignature(text).value());
      return signatures;
    };
    OpRegistry::Global().Register(matmul);
    OpDef relu = *OpRegistry::Global().Find("relu").value();
    relu.type = "test_relu";
    relu.grad = nullptr;
    relu.sbp = [](const SbpContext& context) -> StatusOr<std::vector<SbpSignature>> {
      std::vector<SbpSignature> signatures;
      for (int64_t axis = 0; axis < static_cast<int64_t>(context.inputs[0].shape.size()); ++axis)
        signatures.push_back(ParseSbpSignature("S(" + std::to_string(axis) + ")->S(" + std::to_string(axis) + ")").value());
      signatures.push_back(ParseSbpSignature("B->B").value());
      return signatures;
    };
    OpRegistry::Global().Register(relu);
    return true;
  }();
  (void)done;
}

// x(7, 6) -> test_matmul w(6, 5) -> test_relu, returned and watched, on `devices` devices.
std::vector<std::vector<float>> RunSmallJob(int devices, std::optional<Sbp> x_hint, std::optional<Sbp> w_hint,
                                            std::string* summary, plan::Plan* plan) {
  RegisterTestOps();
  Session session;
  std::vector<float> w = Values(30, 0.5, 0.3), x = Values(42, 1.0, 0.7);
  if (!session.CreateVariable("w", {{6, 5}, DType::kFloat32}, w.data()).ok()) throw std::runtime_error("w");
  JobBuilder b = ValueOrDie(JobBuilder::Create("small", "predict"));
  if (!b.SetDeviceNum(devices).ok()) throw std::runtime_error("devices");
  std::string xr = ValueOrDie(b.AddInput("x", {7, 6}, DType::kFloat32, "small.py:1"));
  std::string wr = ValueOrDie(b.AddVariable("w", {6, 5}, DType::kFloat32, "small.py:2"));
  if (x_hint && !b.SetOutputSbpHint(xr, *x_hint).ok()) throw std::runtime_error("x hint");
  if (w_hint && !b.SetOutputSbpHint(wr, *w_hint).ok()) throw std::runtime_error("w hint");
  std::string mm = ValueOrDie(b.AddOp("test_matmul", "mm", {xr, wr}, {}, "small.py:3"))->output_ref(0);
  std::string y = ValueOrDie(b.AddOp("test_relu", "act", {mm}, {}, "small.py:4"))->output_ref(0);
  if (!b.SetOutputs({y, mm}).ok()) throw std::runtime_error("outputs");
  if (!b.AddWatch(mm, "mm", false, "small.py:5").ok()) throw std::runtime_error("watch");
  std::vector<float> watched;
  auto job = ValueOrDie(session.Compile(b, JobOptions{}, [&](const std::string&, int64_t, const std::vector<TensorView>& v) {
    watched.assign(v[0].as<float>(), v[0].as<float>() + v[0].num_elements());
  }));
  *summary = SbpSummary(job->graph());
  *plan = job->plan();
  std::vector<float> out(35), out_mm(35);
  Status ran = job->Run({TensorView{x.data(), {{7, 6}, DType::kFloat32}}},
                        {TensorView{out.data(), {{7, 5}, DType::kFloat32}}, TensorView{out_mm.data(), {{7, 5}, DType::kFloat32}}});
  if (!ran.ok()) throw std::runtime_error(ran.message());
  job->Drain();
  return {out, out_mm, watched};
}

int CountTasks(const plan::Plan& plan, const std::string& op_type) {
  int count = 0;
  for (const plan::Task& task : plan.tasks()) count += task.op_type() == op_type;
  return count;
}

TEST(ParallelMachineryTest, EachLayoutOfASmallJobMatchesOneDevice) {
  std::string summary;
  plan::Plan plan;
  const auto want = RunSmallJob(1, std::nullopt, std::nullopt, &summary, &plan);
  EXPECT_EQ(CountTasks(plan, "boxing"), 0);
  ASSERT_EQ(want[0].size(), 35u);
  struct Case {
    int devices;
    std::optional<Sbp> x_hint, w_hint;
    std::string matmul_signature;
    int boxing_tasks;
  };
  const std::vector<Case> cases = {
      // x read in place per device (7 rows: 4/3, 3/2/2: byte ranges of the feed's register);
      // both outputs are gathered to device 0 in place: row shards are byte ranges of the
      // whole, so the producers' registers are slices of one block the sink reads whole. No
      // boxing task at all.
      {2, std::nullopt, std::nullopt, "S(0),B->S(0)", 0},
      {3, std::nullopt, std::nullopt, "S(0),B->S(0)", 0},
      // model-parallel: w sliced on axis 1 (5 columns: 3/2), x read whole; column shards are
      // strided, so both outputs keep a gather task (the watch shares the output's)
      {2, Sbp::Broadcast(), Sbp::Split(1), "B,S(1)->S(1)", 2 + 1 + 1},
      // contraction split: partial sums; relu needs them reduced: P->S(0) then S(0)->B for the
      // output, P->S(0) shared by relu... each destination a task per device
      {3, Sbp::Split(1), Sbp::Split(0), "S(1),S(0)->P", -1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.devices) + " devices, matmul " + c.matmul_signature);
    const auto got = RunSmallJob(c.devices, c.x_hint, c.w_hint, &summary, &plan);
    EXPECT_TRUE(Chose(summary, "mm", c.matmul_signature)) << summary;
    if (c.boxing_tasks >= 0) {
      EXPECT_EQ(CountTasks(plan, "boxing"), c.boxing_tasks) << summary;
    }
    EXPECT_EQ(CountTasks(plan, "test_matmul"), c.devices);
    for (size_t k = 0; k < want.size(); ++k) EXPECT_LE(RelativeError(got[k], want[k]), 1e-6) << "output " << k;
  }
}

class ParallelTest : public ::testing::Test {
 protected:
  static const Trained& OneDevice(int steps) {
    static std::map<int, Trained> cache;
    auto it = cache.find(steps);
    if (it == cache.end()) it = cache.emplace(steps, Train(MlpOptions{}, steps)).first;
    return it->second;
  }
};

TEST_F(ParallelTest, DataParallelOneStepMatchesOneDevice) {
  for (int devices : {2, 3}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    MlpOptions options;
    options.devices = devices;
    Trained got = Train(options, 1);
    EXPECT_TRUE(Chose(got.summary, "hidden-matmul", "S(0),B,B->S(0)")) << got.summary;  // fused bias
    // The copy cost decides the weight gradients: dW1 (784x512) from gathered activations
    // (100x784 + 100x512 floats) on one device rather than reduced from partial sums, and
    // there, beside its update, its GEMM accumulates straight into the weight (the placed
    // gradient update fusion). dW2 (512x10) and the biases' gradients are small reductions of
    // activations gathered at no copy: computed whole on device 0 too (dW2 in its update)
    // rather than as partial sums a task would sum. The activations' gradient stays split.
    EXPECT_EQ(got.summary.find("hidden-matmul-grad (matmul)"), std::string::npos) << got.summary;
    EXPECT_NE(got.summary.find("hidden-weight-update (matmul_sgd_update) on cpu 0:0: B,B,B,B->"), std::string::npos)
        << got.summary;
    EXPECT_NE(got.summary.find("output-weight-update (matmul_sgd_update) on cpu 0:0: B,B,B,B->"), std::string::npos)
        << got.summary;
    EXPECT_TRUE(Chose(got.summary, "output-bias_add-grad", "B->B")) << got.summary;
    // The relu's gradient is the data-gradient matmul's epilogue (matmul_relu_grad): its mask
    // y is split like the product.
    EXPECT_TRUE(Chose(got.summary, "output-matmul-grad", "S(0),B,S(0)->S(0)")) << got.summary;
    EXPECT_EQ(got.summary.find("P->B"), std::string::npos) << got.summary;
    ExpectSameTraining(got, OneDevice(1), 1e-5);
  }
}

TEST_F(ParallelTest, DataParallelHundredStepsMatchOneDevice) {
  for (int devices : {2, 3}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    MlpOptions options;
    options.devices = devices;
    ExpectSameTraining(Train(options, 100), OneDevice(100), 1e-3);
  }
}

TEST_F(ParallelTest, ModelParallelDenseWeightSplitOnEitherAxisMatchesOneDevice) {
  for (int64_t axis : {0, 1}) {
    SCOPED_TRACE("hidden weight S(" + std::to_string(axis) + ")");
    MlpOptions options;
    options.devices = 2;
    options.hidden_weight_hint = Sbp::Split(axis);
    Trained got = Train(options, 1);
    EXPECT_TRUE(Chose(got.summary, "hidden-weight", "->S(" + std::to_string(axis) + ")")) << got.summary;
    ExpectSameTraining(got, OneDevice(1), 1e-5);
    ExpectSameTraining(Train(options, 100), OneDevice(100), 1e-3);
  }
}

TEST_F(ParallelTest, PerLayerPlacementMatchesOneDevice) {
  MlpOptions options;
  options.devices = 2;
  options.per_layer_placement = true;
  Trained got = Train(options, 1);
  EXPECT_NE(got.summary.find("hidden-matmul (matmul) on cpu 0:0:"), std::string::npos) << got.summary;
  EXPECT_NE(got.summary.find("output-matmul (matmul) on cpu 0:1:"), std::string::npos) << got.summary;
  ExpectSameTraining(got, OneDevice(1), 1e-5);
  ExpectSameTraining(Train(options, 100), OneDevice(100), 1e-3);
}

TEST_F(ParallelTest, HybridLenetMatchesOneDevice) {
  const Trained one_step = Train(SmallLenet(1, false), 1), hundred = Train(SmallLenet(1, false), 100);
  for (int devices : {2, 3}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    Trained got = Train(SmallLenet(devices, true), 1);
    // Data-parallel convolution, its bias (and relu) fused in on every device: x, filter, bias.
    EXPECT_TRUE(Chose(got.summary, "conv", "S(0),B,B->S(0)")) << got.summary;
    EXPECT_TRUE(Chose(got.summary, "dense1", "B,S(1)")) << got.summary;
    ExpectSameTraining(got, one_step, 1e-5);
    ExpectSameTraining(Train(SmallLenet(devices, true), 100), hundred, 1e-3);
  }
}

TEST_F(ParallelTest, ReshapeViewsOnSeveralDevicesMatchOneDevice) {
  const Trained one_step = Train(ReshapedMlp(1), 1), hundred = Train(ReshapedMlp(1), 100);
  for (int devices : {2, 3}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    ExpectSameTraining(Train(ReshapedMlp(devices), 1), one_step, 1e-5);
    ExpectSameTraining(Train(ReshapedMlp(devices), 100), hundred, 1e-3);
  }
}

TEST_F(ParallelTest, VariablesTrainedOnTwoDevicesContinueOnOneAndThree) {
  // 40 steps on 2 devices, then 20 more on 1 and on 3 devices, against 60 on one device:
  // the store holds logical tensors whatever the device count of the job that wrote them.
  for (int then : {1, 3}) {
    SCOPED_TRACE("continued on " + std::to_string(then));
    Session session;
    CreateVariables(session);
    MlpOptions two;
    two.devices = 2;
    two.name = "mlp2";
    Train(two, 40, &session);
    MlpOptions next;
    next.devices = then;
    next.name = "mlp_next";
    Trained continued = Train(next, 20, &session);
    Session reference;
    CreateVariables(reference);
    Train(MlpOptions{}, 40, &reference);
    Trained want = Train(MlpOptions{}, 20, &reference);
    ExpectSameTraining(continued, want, 1e-3);
  }
}

// Variables stored split: each device reads its rows of the one buffer in place and updates
// them itself; no task slices a weight or gathers a weight's gradient, and training is the
// one-device training (2 devices, and 3 with 100 rows as 34/33/33).
TEST_F(ParallelTest, VariablesStoredSplitTrainEachShardInPlaceAndMatchOneDevice) {
  const Trained one_step = Train(SplitRowsMlp(1, false), 1), hundred = Train(SplitRowsMlp(1, false), 100);
  const std::vector<std::string> variables = {"rows1-weight", "rows1-bias", "rows2-weight", "rows2-bias"};
  for (int devices : {2, 3}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    Session session;
    CreateVariables(session, SplitRowsMlp(devices, true));
    JobOptions options;
    options.num_threads = 2;
    auto job = ValueOrDie(session.Compile(SplitRowsMlp(devices, true).build(), options));
    const std::string summary = SbpSummary(job->graph());
    const plan::Plan& plan = job->plan();
    std::map<std::string, int> variable_task;  // variable name -> task id
    for (const plan::Task& task : plan.tasks())
      if (task.kind() == plan::VARIABLE) variable_task[task.variable_name()] = static_cast<int>(task.id());
    for (const std::string& name : variables) {
      SCOPED_TRACE(name);
      EXPECT_TRUE(Chose(summary, name + "-update", "S(0),S(0),S(0),B->")) << summary;
      EXPECT_EQ(summary.find(name + "-boxing"), std::string::npos) << summary;
      for (const std::string& stored : {name, name + "-momentum"}) {
        ASSERT_TRUE(variable_task.count(stored)) << stored;
        const int id = variable_task.at(stored);
        int64_t next_offset = 0;
        for (int d = 0; d < devices; ++d) {
          // The device's update writes its rows in place: a part view at the shard's offset.
          const std::string update = name + "-update@" + std::to_string(d);
          const plan::Task* task = nullptr;
          for (const plan::Task& t : plan.tasks()) task = t.name() == update ? &t : task;
          ASSERT_NE(task, nullptr) << update;
          EXPECT_EQ(task->device_id(), d);
          bool writes_its_shard = false;
          for (int m : task->mutable_inputs()) {
            const plan::InputDesc& in = task->inputs(m);
            if (in.producer_task_id() != id) continue;
            writes_its_shard = in.part() && in.byte_offset() == next_offset;
            int64_t bytes = sizeof(float);
            for (int64_t extent : in.view_shape()) bytes *= extent;
            next_offset += bytes;
          }
          EXPECT_TRUE(writes_its_shard) << update << " of " << stored;
        }
        EXPECT_EQ(next_offset, static_cast<int64_t>(sizeof(float)) * NumElements(
                                   stored.rfind("rows1-weight", 0) == 0 ? Shape{100, 50}
                                   : stored.rfind("rows2-weight", 0) == 0 ? Shape{10, 100}
                                   : stored.rfind("rows1-bias", 0) == 0   ? Shape{100}
                                                                          : Shape{10}));
        // Nothing copies the variable: its readers are kernels reading it in place.
        for (const plan::Task& t : plan.tasks())
          for (const plan::InputDesc& in : t.inputs())
            if (in.producer_task_id() == id && !in.control()) {
              EXPECT_NE(t.op_type(), "boxing") << t.name() << " reads " << stored;
            }
      }
    }
    // Each device's gradient reaches its update as that device's rows: no task gathers a whole
    // gradient (the batch-split loss still makes the biases' gradients partial sums, whose
    // reduce-scatter is one task per device ending in S(0)).
    for (const plan::Task& t : plan.tasks()) {
      if (t.op_type() != "momentum_update") continue;
      for (const plan::InputDesc& in : t.inputs()) {
        const plan::Task& producer = plan.tasks(static_cast<int>(in.producer_task_id()));
        if (producer.op_type() != "boxing") continue;
        EXPECT_EQ(producer.attrs().at("out_sbp").s(), "S(0)") << producer.name() << " feeds " << t.name() << summary;
        EXPECT_EQ(producer.attrs().at("out_parts").i(), devices) << producer.name();
      }
    }
    ExpectSameTraining(Train(SplitRowsMlp(devices, true), 1), one_step, 1e-5);
    ExpectSameTraining(Train(SplitRowsMlp(devices, true), 100), hundred, 1e-3);
  }
}

// An update that is not elementwise (LAMB's trust ratio reads the whole tensor) cannot write
// shards: it runs whole on the first device over the one buffer, and trains as one device does.
TEST_F(ParallelTest, WholeTensorUpdatesOfSplitVariablesRunOnTheFirstDevice) {
  // LAMB reads the whole weight (its trust ratio's norms): split variables under it are updated
  // on their first device; the training is the one-device training (the issue's tolerances:
  // 1e-5 after one step, 1e-3 after 100).
  for (int devices : {2, 3}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    Trained got = Train(SplitRowsMlp(devices, true, "lamb"), 1);
    EXPECT_NE(got.summary.find("rows1-weight-update (lamb_update) on cpu 0:0:"), std::string::npos) << got.summary;
    ExpectSameTraining(got, Train(SplitRowsMlp(1, false, "lamb"), 1), 1e-5);
    ExpectSameTraining(Train(SplitRowsMlp(devices, true, "lamb"), 100), Train(SplitRowsMlp(1, false, "lamb"), 100), 1e-3);
  }
}

TEST_F(ParallelTest, BadPlacementsAndImpossibleSplitsAreClearErrorsAndTheNextCompileWorks) {
  Session session;
  CreateVariables(session);
  {
    JobBuilder b = ValueOrDie(JobBuilder::Create("bad", "predict"));
    AF_ASSERT_OK(b.SetDeviceNum(2));
    Status placed = b.SetPlacement(Placement{"cpu", {"0:3"}});
    ASSERT_FALSE(placed.ok());
    EXPECT_NE(placed.message().find("device 3 does not exist: cpu_device_num is 2"), std::string::npos) << placed.message();
    Status gpu = b.SetDeviceNum(0, 2);
    EXPECT_NE(gpu.message().find("cpu_device_num(2)"), std::string::npos) << gpu.message();
  }
  {
    // A placement made for 4 devices compiled with 2 (a job round trip): the placement pass
    // names op, placement and line.
    JobBuilder b = ValueOrDie(JobBuilder::Create("bad_range", "predict"));
    AF_ASSERT_OK(b.SetDeviceNum(4));
    AF_ASSERT_OK(b.SetPlacement(Placement{"cpu", {"0:0-3"}}));
    std::string x = ValueOrDie(b.AddInput("x", {4, 3}, DType::kFloat32, "bad.py:1"));
    std::string y = ValueOrDie(b.AddOp("relu", "act", {x}, {}, "bad.py:2"))->output_ref(0);
    AF_ASSERT_OK(b.SetOutputs({y}));
    job::Job job = b.ToJob();
    job.mutable_config()->set_cpu_device_num(2);
    auto rebuilt = JobBuilder::FromJob(job);
    ASSERT_FALSE(rebuilt.ok());
    EXPECT_NE(rebuilt.status().message().find("device 2 does not exist"), std::string::npos) << rebuilt.status().message();
    Graph graph = b.graph();
    graph.set_device_num(2);
    auto compiled = CompileGraph(graph, CompileOptions{});
    ASSERT_FALSE(compiled.ok());
    EXPECT_NE(compiled.status().message().find("op 'x' (input) at bad.py:1"), std::string::npos) << compiled.status().message();
    EXPECT_NE(compiled.status().message().find("'cpu 0:0-3'"), std::string::npos) << compiled.status().message();
  }
  {
    // An axis of length 2 over 4 devices, hinted: the error names op, blob, axis and line.
    JobBuilder b = ValueOrDie(JobBuilder::Create("bad_split", "predict"));
    AF_ASSERT_OK(b.SetDeviceNum(4));
    std::string x = ValueOrDie(b.AddInput("x", {2, 3}, DType::kFloat32, "split.py:1"));
    AF_ASSERT_OK(b.SetOutputSbpHint(x, Sbp::Split(0)));
    std::string y = ValueOrDie(b.AddOp("relu", "act", {x}, {}, "split.py:2"))->output_ref(0);
    AF_ASSERT_OK(b.SetOutputs({y}));
    auto job = session.Compile(b, JobOptions{});
    ASSERT_FALSE(job.ok());
    const std::string& message = job.status().message();
    EXPECT_NE(message.find("op 'x' (input) at split.py:1"), std::string::npos) << message;
    EXPECT_NE(message.find("'x/out'"), std::string::npos) << message;
    EXPECT_NE(message.find("axis 0 of float32(2, 3) has length 2 < 4 devices"), std::string::npos) << message;
  }
  {
    // Without the hint the same job compiles: the batch axis too short to split stays whole.
    JobBuilder b = ValueOrDie(JobBuilder::Create("short_batch", "predict"));
    AF_ASSERT_OK(b.SetDeviceNum(4));
    std::string x = ValueOrDie(b.AddInput("x", {2, 3}, DType::kFloat32, "split.py:1"));
    std::string y = ValueOrDie(b.AddOp("relu", "act", {x}, {}, "split.py:2"))->output_ref(0);
    AF_ASSERT_OK(b.SetOutputs({y}));
    auto job = ValueOrDie(session.Compile(b, JobOptions{}));
    std::vector<float> in = {-1, 2, -3, 4, -5, 6}, out(6);
    AF_ASSERT_OK(job->Run({TensorView{in.data(), {{2, 3}, DType::kFloat32}}}, {TensorView{out.data(), {{2, 3}, DType::kFloat32}}}));
    EXPECT_EQ(out, (std::vector<float>{0, 2, 0, 4, 0, 6}));
  }
  // And the session still trains.
  MlpOptions options;
  options.devices = 2;
  options.name = "after_errors";
  Trained got = Train(options, 1, &session);
  EXPECT_EQ(got.losses.size(), 1u);
}

TEST_F(ParallelTest, DevicesShareTheThreadBudget) {
  Session session;
  CreateVariables(session);
  JobOptions options;
  options.num_threads = 4;
  for (int devices : {1, 2, 3, 8}) {
    MlpOptions mlp;
    mlp.devices = devices;
    mlp.name = "mlp" + std::to_string(devices);
    auto job = ValueOrDie(session.Compile(BuildSeedMlp(mlp), options));
    // One device: one worker, the whole budget in each kernel; n devices: a worker per device
    // while each keeps two threads (min(n, budget / 2)), the rest of the budget inside kernels.
    const int workers = std::min(devices, 2);
    EXPECT_EQ(job->num_workers(), workers) << devices;
    EXPECT_EQ(job->kernel_threads(), 4 / workers) << devices;
    EXPECT_LE(job->num_workers() * job->kernel_threads(), 4);
  }
}

TEST_F(ParallelTest, OneDevicePlansHaveNoBoxingAndOneTaskPerOp) {
  Session session;
  CreateVariables(session);
  auto job = ValueOrDie(session.Compile(BuildSeedMlp(MlpOptions{}), JobOptions{}));
  for (const plan::Task& task : job->plan().tasks()) {
    EXPECT_NE(task.op_type(), "boxing") << task.name();
    EXPECT_EQ(task.device_id(), 0) << task.name();
    EXPECT_EQ(task.name().find('@'), std::string::npos) << task.name();
  }
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

// Saved model directories: a compiled job saved and loaded without a session gives the job's
// outputs; damaged, truncated or missing files and wrong inputs are clear errors, never a
// crash (a fuzz loop over every file). Bounded by ctest's TIMEOUT.
#include "session/model.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "graph/test_util.h"
#include "session/model_export.h"
#include "session/npy.h"

namespace actorflow {
namespace {

namespace fs = std::filesystem;
using graph::JobBuilder;
using graph::testing::ValueOrDie;

// A directory of this test's own under the test temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = fs::path(::testing::TempDir()) / "actorflow-model-test-XXXXXX";
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

TensorView View(std::vector<float>& data, Shape shape) { return TensorView{data.data(), {std::move(shape), DType::kFloat32}}; }

// x(2,3) . w(3,4) + b, relu, reshaped to (8,) (a view), and scale * sum(x) as a second output;
// a watch sink that a model ignores.
JobBuilder DenseJob(const std::string& type = "predict") {
  JobBuilder b = ValueOrDie(JobBuilder::Create("dense_" + type, type));
  std::string x = ValueOrDie(b.AddInput("x", {2, 3}, DType::kFloat32, "d.py:1"));
  std::string scale = ValueOrDie(b.AddInput("scale", {1}, DType::kFloat32, "d.py:2"));
  std::string w = ValueOrDie(b.AddVariable("dense/weight", {3, 4}, DType::kFloat32, "d.py:3"));
  std::string bias = ValueOrDie(b.AddVariable("dense bias", {4}, DType::kFloat32, "d.py:3"));
  std::string mm = ValueOrDie(b.AddOp("matmul", "mm", {x, w}, {}, "d.py:4"))->output_ref(0);
  std::string y = ValueOrDie(b.AddOp("bias_add", "add", {mm, bias}, {}, "d.py:4"))->output_ref(0);
  std::string r = ValueOrDie(b.AddOp("relu", "act", {y}, {}, "d.py:5"))->output_ref(0);
  std::string flat = ValueOrDie(b.AddOp("reshape", "flat", {r}, Attrs{{"shape", std::vector<int64_t>{8}}}, "d.py:6"))
                         ->output_ref(0);
  std::string total =
      ValueOrDie(b.AddOp("reduce_sum", "total", {x}, Attrs{{"axis", std::vector<int64_t>{0, 1}}, {"keepdims", false}},
                         "d.py:7"))
          ->output_ref(0);
  std::string total1 = ValueOrDie(b.AddOp("reshape", "total1", {total}, Attrs{{"shape", std::vector<int64_t>{1}}}, "d.py:7"))
                           ->output_ref(0);
  std::string scaled = ValueOrDie(b.AddOp("mul", "scaled", {total1, scale}, {}, "d.py:8"))->output_ref(0);
  if (type == "train") {
    std::string loss = ValueOrDie(b.AddOp("reduce_sum", "loss", {flat}, Attrs{{"axis", std::vector<int64_t>{0}}, {"keepdims", true}}, "d.py:9"))->output_ref(0);
    if (!b.AddLoss(loss).ok()) throw std::runtime_error("AddLoss");
    graph::OptimizerSpec spec;
    spec.type = "sgd";
    if (!b.SetOptimizer(spec).ok()) throw std::runtime_error("SetOptimizer");
  }
  if (!b.SetOutputs({flat, scaled}).ok()) throw std::runtime_error("SetOutputs");
  if (!b.AddWatch(y, "pre", false, "d.py:9").ok()) throw std::runtime_error("AddWatch");
  return b;
}

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(temp_.path().empty());
    weight_ = {1, -1, 2, 0, 0.5f, 3, -2, 1, -1, 0, 1, 4};
    bias_ = {0.25f, -0.5f, 1, 0};
    AF_ASSERT_OK(session_.CreateVariable("dense/weight", {{3, 4}, DType::kFloat32}, weight_.data()));
    AF_ASSERT_OK(session_.CreateVariable("dense bias", {{4}, DType::kFloat32}, bias_.data()));
    job_ = ValueOrDie(session_.Compile(DenseJob(), JobOptions{}));
    model_dir_ = temp_ / "model";
    AF_ASSERT_OK(SaveCompiledJob(session_, *job_, model_dir_));
    AF_ASSERT_OK(job_->Run({View(x_, {2, 3}), View(scale_, {1})}, {View(expected_flat_, {8}), View(expected_scaled_, {1})}));
  }

  // The outputs of the saved model on x_, scale_ (an error when it does not load or run).
  StatusOr<std::vector<ModelOutput>> LoadAndRun(const std::string& directory) {
    AF_ASSIGN_OR_RETURN(Model model, LoadModel(directory, ModelOptions{1}));
    return model.Run({View(x_, {2, 3}), View(scale_, {1})});
  }
  void ExpectExpected(const std::vector<ModelOutput>& outputs) {
    ASSERT_EQ(outputs.size(), 2u);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(static_cast<float*>(outputs[0].data.get())[i], expected_flat_[i]) << i;
    EXPECT_EQ(static_cast<float*>(outputs[1].data.get())[0], expected_scaled_[0]);
  }

  TempDir temp_;
  Session session_;
  std::shared_ptr<CompiledJob> job_;
  std::string model_dir_;
  std::vector<float> weight_, bias_;
  std::vector<float> x_ = {1, 2, 3, -1, 0.5f, 1}, scale_ = {3};
  std::vector<float> expected_flat_ = std::vector<float>(8), expected_scaled_ = std::vector<float>(1);
};

TEST_F(ModelTest, LoadedModelGivesTheJobsOutputsWithNamesInOrder) {
  Model model = ValueOrDie(LoadModel(model_dir_));
  ASSERT_EQ(model.inputs().size(), 2u);
  EXPECT_EQ(model.inputs()[0].name, "x");
  EXPECT_EQ(model.inputs()[0].desc, (TensorDesc{{2, 3}, DType::kFloat32}));
  EXPECT_EQ(model.inputs()[1].name, "scale");
  ASSERT_EQ(model.outputs().size(), 2u);
  EXPECT_EQ(model.outputs()[0].name, "flat/out");
  EXPECT_EQ(model.outputs()[0].desc, (TensorDesc{{8}, DType::kFloat32}));
  EXPECT_EQ(model.job_name(), "dense_predict");
  EXPECT_EQ(model.actorflow_version(), ActorflowVersion());
  // relu(x.w + b) by hand: row 0 = [1+1-3+.25, -1+6+0-.5, 2-4+3+1, 0+2+12],
  // row 1 = [-1+.25-1+.25, 1+1.5+0-.5, -2-1+1+1, 0+.5+4]
  const std::vector<float> by_hand = {0, 4.5f, 2, 14, 0, 2, 0, 4.5f};
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(expected_flat_[i], by_hand[i]) << i;
  EXPECT_FLOAT_EQ(expected_scaled_[0], 3 * 6.5f);
  auto outputs = ValueOrDie(model.Run({View(x_, {2, 3}), View(scale_, {1})}));
  ExpectExpected(outputs);
  EXPECT_EQ(outputs[1].name, "scaled/out");
  // The model holds its own copy: changing the session's variable later changes nothing.
  std::vector<float> zeros(12, 0.f);
  AF_ASSERT_OK(session_.SetVariable("dense/weight", {{3, 4}, DType::kFloat32}, zeros.data()));
  ExpectExpected(ValueOrDie(model.Run({View(x_, {2, 3}), View(scale_, {1})})));
}

TEST_F(ModelTest, WrongInputsAreClearErrorsAndTheNextCallWorks) {
  Model model = ValueOrDie(LoadModel(model_dir_));
  std::vector<float> wrong(6);
  auto bad_shape = model.Run({View(wrong, {3, 2}), View(scale_, {1})});
  ASSERT_FALSE(bad_shape.ok());
  EXPECT_NE(bad_shape.status().message().find("input 'x': expected float32(2, 3), got float32(3, 2)"), std::string::npos)
      << bad_shape.status().message();
  std::vector<int32_t> ints(1);
  auto bad_dtype = model.Run({View(x_, {2, 3}), TensorView{ints.data(), {{1}, DType::kInt32}}});
  ASSERT_FALSE(bad_dtype.ok());
  EXPECT_NE(bad_dtype.status().message().find("input 'scale': expected float32(1,), got int32(1,)"), std::string::npos)
      << bad_dtype.status().message();
  auto too_few = model.Run({View(x_, {2, 3})});
  ASSERT_FALSE(too_few.ok());
  EXPECT_NE(too_few.status().message().find("takes 2 inputs, got 1"), std::string::npos);
  std::vector<float> small(1);
  Status bad_output = model.Run({View(x_, {2, 3}), View(scale_, {1})}, {View(small, {1}), View(small, {1})});
  EXPECT_NE(bad_output.message().find("output 'flat/out'"), std::string::npos) << bad_output.message();
  ExpectExpected(ValueOrDie(model.Run({View(x_, {2, 3}), View(scale_, {1})})));
}

TEST_F(ModelTest, SaveNeverReplacesAnythingAndRefusesTrainJobs) {
  // The directory exists now: a second save into it fails on the first file, changing nothing.
  const std::string manifest = ValueOrDie(ReadFile(model_dir_ + "/model.json"));
  Status again = SaveCompiledJob(session_, *job_, model_dir_);
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find("plan.pb"), std::string::npos) << again.message();
  EXPECT_EQ(ValueOrDie(ReadFile(model_dir_ + "/model.json")), manifest);
  // A file where the directory should be.
  { std::ofstream(temp_ / "file") << "user data"; }
  Status onto_file = SaveCompiledJob(session_, *job_, temp_ / "file");
  EXPECT_NE(onto_file.message().find("not a directory"), std::string::npos) << onto_file.message();
  EXPECT_EQ(ValueOrDie(ReadFile(temp_ / "file")), "user data");
  // A train job updates its variables and takes a learning-rate feed: not a model.
  auto train = ValueOrDie(session_.Compile(DenseJob("train"), JobOptions{}));
  Status refused = SaveCompiledJob(session_, *train, temp_ / "train");
  EXPECT_NE(refused.message().find("only predict jobs"), std::string::npos) << refused.message();
  EXPECT_FALSE(fs::exists(temp_ / "train"));
}

TEST_F(ModelTest, MissingFilesAreNamed) {
  auto missing_dir = LoadModel(temp_ / "nowhere");
  ASSERT_FALSE(missing_dir.ok());
  EXPECT_NE(missing_dir.status().message().find("no such directory"), std::string::npos);
  for (const auto& entry : fs::directory_iterator(model_dir_)) {
    const std::string name = entry.path().filename();
    const std::string copy = temp_ / ("without-" + name);
    fs::copy(model_dir_, copy);
    fs::remove(fs::path(copy) / name);
    auto loaded = LoadModel(copy);
    ASSERT_FALSE(loaded.ok()) << name;
    EXPECT_NE(loaded.status().message().find(name), std::string::npos) << loaded.status().message();
    EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound) << loaded.status().message();
  }
}

TEST_F(ModelTest, ManifestThatDisagreesWithThePlanIsRefused) {
  std::string manifest = ValueOrDie(ReadFile(model_dir_ + "/model.json"));
  const std::string copy = temp_ / "edited";
  fs::copy(model_dir_, copy);
  // The input's shape, edited consistently in the JSON: the plan still feeds (2, 3).
  const size_t at = manifest.find("\"shape\": [\n    \"2\",\n    \"3\"\n   ]");
  ASSERT_NE(at, std::string::npos) << manifest;
  std::string edited = manifest;
  edited.replace(at, std::strlen("\"shape\": [\n    \"2\""), "\"shape\": [\n    \"4\"");
  fs::remove(fs::path(copy) / "model.json");
  AF_ASSERT_OK(WriteFileDurably(fs::path(copy) / "model.json", edited));
  auto loaded = LoadModel(copy);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("input 'x' is float32(4, 3) in the manifest and float32(2, 3) in the plan"),
            std::string::npos)
      << loaded.status().message();
  // A newer format version is named, with the version that reads it.
  std::string newer = manifest;
  newer.replace(newer.find("\"version\": 1"), std::strlen("\"version\": 1"), "\"version\": 7");
  fs::remove(fs::path(copy) / "model.json");
  AF_ASSERT_OK(WriteFileDurably(fs::path(copy) / "model.json", newer));
  auto version = LoadModel(copy);
  ASSERT_FALSE(version.ok());
  EXPECT_NE(version.status().message().find("format version 7"), std::string::npos) << version.status().message();
}

// Every file, truncated at random lengths and with random bytes changed, in a fresh copy each
// time: LoadModel either refuses with an error or (a change the manifest allows, e.g. in the
// writer's version string) loads a model that still gives the job's outputs. The plan and the
// weights are covered by CRC-32, which detects every change of up to 32 consecutive bits: a
// changed or truncated plan or weight file is always refused.
TEST_F(ModelTest, DamagedFilesNeverCrashFuzz) {
  std::mt19937 random(12345);
  int refused = 0, loaded = 0;
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(model_dir_)) names.push_back(entry.path().filename());
  ASSERT_EQ(names.size(), 4u);  // model.json, plan.pb, two weights
  for (const std::string& name : names) {
    const std::string original = ValueOrDie(ReadFile(fs::path(model_dir_) / name));
    for (int trial = 0; trial < 60; ++trial) {
      std::string damaged = original;
      if (trial % 3 == 0) {
        damaged.resize(random() % original.size());
      } else {
        const int changes = trial % 3 == 1 ? 1 : 1 + static_cast<int>(random() % 4);
        const size_t start = random() % original.size();
        for (int c = 0; c < changes; ++c) {
          const size_t at = std::min(original.size() - 1, start + c);
          damaged[at] = static_cast<char>(damaged[at] ^ (1 + random() % 255));
        }
      }
      const std::string copy = temp_ / ("fuzz-" + std::to_string(refused + loaded));
      fs::copy(model_dir_, copy);
      fs::remove(fs::path(copy) / name);
      AF_ASSERT_OK(WriteFileDurably(fs::path(copy) / name, damaged));
      auto outputs = LoadAndRun(copy);
      if (outputs.ok()) {
        ++loaded;
        EXPECT_EQ(name, "model.json") << "a damaged " << name << " loaded (trial " << trial << ")";
        ExpectExpected(*outputs);
      } else {
        ++refused;
        EXPECT_FALSE(outputs.status().message().empty());
        EXPECT_NE(outputs.status().message().find("model '"), std::string::npos) << outputs.status().message();
      }
      fs::remove_all(copy);
    }
  }
  EXPECT_GT(refused, 200);
  std::printf("fuzz: %d damaged directories refused, %d loaded and ran correctly\n", refused, loaded);
}

}  // namespace
}  // namespace actorflow

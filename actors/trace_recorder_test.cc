// The recorder's JSON against docs/trace_format.md: the trace viewer reads exactly this.
#include "actors/trace_recorder.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "actorflow/pipeline.h"

namespace actorflow {
namespace {

using nlohmann::json;

const TensorDesc kScalar{{1}, DType::kFloat32};

StageFn Copy(std::chrono::microseconds delay) {
  return [delay](const StageArgs& a) {
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    *a.outputs[0].as<float>() = *a.inputs[0].as<float>();
    return Status::Ok();
  };
}

// A fast stage feeding a slow one with one register: the fast stage must wait on
// backpressure, the sink on its input, and the JSON must say so in the spec's words.
TEST(ChromeTraceRecorder, WritesTheDocumentedFormat) {
  std::string path = ::testing::TempDir() + "format.trace.json";
  constexpr int kIterations = 12;
  {
    Pipeline p;
    Port x = p.AddInput("x", kScalar, 4);
    Port fast = p.AddStage("fast", {x}, {kScalar}, Copy(std::chrono::microseconds(0)), 1);
    Port slow = p.AddStage("slow", {fast}, {kScalar}, Copy(std::chrono::microseconds(2000)));
    p.SetOutputs({slow});
    PipelineOptions options;
    options.trace_path = path;
    options.num_threads = 2;
    ASSERT_TRUE(p.Start(options).ok());
    float in = 1;
    std::vector<float> out(kIterations);
    for (int i = 0; i < kIterations; ++i) ASSERT_TRUE(p.Push({TensorView{&in, kScalar}}, {TensorView{&out[i], kScalar}}, nullptr).ok());
    ASSERT_TRUE(p.Finish().ok());
  }
  std::ifstream file(path);
  ASSERT_TRUE(file.good());
  json trace = json::parse(file);
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  ASSERT_TRUE(trace["traceEvents"].is_array());

  const json& meta = trace["actorflow"];
  EXPECT_EQ(meta["version"], 1);
  EXPECT_EQ(meta["job"], "pipeline");
  ASSERT_EQ(meta["actors"].size(), 4u);  // x, fast, slow, output
  const json& fast_actor = meta["actors"][1];
  EXPECT_EQ(fast_actor["id"], 1);
  EXPECT_EQ(fast_actor["name"], "fast");
  EXPECT_EQ(fast_actor["kind"], "compute");
  EXPECT_EQ(fast_actor["op"], "stage");
  EXPECT_EQ(fast_actor["device"], "cpu:0");
  EXPECT_EQ(fast_actor["machine"], 0);
  EXPECT_EQ(fast_actor["pid"], 0);
  EXPECT_TRUE(fast_actor["source_location"].is_string());
  EXPECT_EQ(fast_actor["inputs"], json::parse(R"([{"producer":0,"register":0,"control":false}])"));
  ASSERT_EQ(fast_actor["registers"].size(), 1u);
  EXPECT_EQ(fast_actor["registers"][0]["register_num"], 1);
  EXPECT_EQ(fast_actor["registers"][0]["bytes"], 4);
  EXPECT_EQ(fast_actor["registers"][0]["consumers"], json::parse("[2]"));
  EXPECT_EQ(meta["actors"][0]["kind"], "source");
  EXPECT_EQ(meta["actors"][3]["kind"], "sink");

  std::map<int, std::vector<int64_t>> act_iterations;  // tid -> iterations, in recorded order
  std::map<int, std::set<std::string>> wait_reasons;  // tid -> reasons
  bool process_name = false;
  std::set<int> thread_names, sort_indices;
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") {
        EXPECT_EQ(e["pid"], 0);
        EXPECT_EQ(e["args"]["name"], "machine 0 cpu:0");
        process_name = true;
      } else if (e["name"] == "thread_name") {
        thread_names.insert(e["tid"].get<int>());
      } else if (e["name"] == "thread_sort_index") {
        EXPECT_EQ(e["args"]["sort_index"], e["tid"]);
        sort_indices.insert(e["tid"].get<int>());
      }
      continue;
    }
    ASSERT_EQ(e["ph"], "X") << e.dump();
    ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number()) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    int tid = e["tid"];
    if (e["cat"] == "act") {
      act_iterations[tid].push_back(e["args"]["iteration"].get<int64_t>());
      EXPECT_EQ(e["name"], e["args"]["op"]);
      if (tid == 1) {
        EXPECT_EQ(e["args"]["actor"], "fast");
        EXPECT_EQ(e["args"]["kind"], "compute");
      }
    } else {
      ASSERT_EQ(e["cat"], "wait") << e.dump();
      std::string reason = e["args"]["reason"];
      EXPECT_EQ(e["name"], "wait: " + reason);
      EXPECT_TRUE(reason == "input not ready" || reason == "output registers full") << reason;
      EXPECT_GE(e["dur"].get<double>(), 1.0);  // shorter waits are omitted
      wait_reasons[tid].insert(reason);
    }
  }
  EXPECT_TRUE(process_name);
  EXPECT_EQ(thread_names, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(sort_indices, (std::set<int>{0, 1, 2, 3}));
  for (int tid = 0; tid < 4; ++tid) {
    ASSERT_EQ(act_iterations[tid].size(), static_cast<size_t>(kIterations)) << "tid " << tid;
    for (int i = 0; i < kIterations; ++i) EXPECT_EQ(act_iterations[tid][i], i);
  }
  EXPECT_TRUE(wait_reasons[1].count("output registers full")) << "backpressure wait missing";
  EXPECT_TRUE(wait_reasons[3].count("input not ready")) << "the sink waits ~2 ms per iteration for slow";
  std::remove(path.c_str());
}

TEST(ChromeTraceRecorder, UnwritablePathIsAnError) {
  ChromeTraceRecorder recorder;
  Status s = recorder.Write("/nonexistent-dir/trace.json");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/trace.json"), std::string::npos);
}

}  // namespace
}  // namespace actorflow

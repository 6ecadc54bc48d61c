// The recorder's JSON against docs/trace_format.md: the trace viewer reads exactly this.
#include "actors/runtime_testing.h"
#include "actors/trace_recorder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
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
  ASSERT_EQ(meta["actors"].size(), 5u);  // x, fast, slow, output, and the host
  const json& fast_actor = meta["actors"][1];
  EXPECT_EQ(fast_actor["id"], 1);
  EXPECT_EQ(fast_actor["name"], "fast");
  EXPECT_EQ(fast_actor["kind"], "compute");
  EXPECT_EQ(fast_actor["op"], "fast");  // a stage's op defaults to its name
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
  const json& host = meta["actors"][4];
  EXPECT_EQ(host["kind"], "host");
  EXPECT_EQ(host["id"], 4);  // one past the last task
  EXPECT_EQ(host["pid"], 999);

  std::map<int, std::vector<int64_t>> act_iterations;  // tid -> iterations, in recorded order
  std::map<int, std::set<std::string>> wait_reasons;  // tid -> reasons
  bool process_name = false;
  std::set<int> thread_names, sort_indices;
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") {
        EXPECT_TRUE(e["pid"] == 0 || e["pid"] == 999) << e.dump();
        EXPECT_EQ(e["args"]["name"], e["pid"] == 0 ? "machine 0 cpu:0" : "machine 0 host");
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
      EXPECT_TRUE(reason == "input not ready" || reason == "output registers full" || reason == "worker busy") << reason;
      EXPECT_GE(e["dur"].get<double>(), 1.0);  // shorter waits are omitted
      wait_reasons[tid].insert(reason);
    }
  }
  EXPECT_TRUE(process_name);
  EXPECT_EQ(thread_names, (std::set<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(sort_indices, (std::set<int>{0, 1, 2, 3, 4}));
  for (int tid = 0; tid < 5; ++tid) {  // the host's acts are its pushes
    ASSERT_EQ(act_iterations[tid].size(), static_cast<size_t>(kIterations)) << "tid " << tid;
    for (int i = 0; i < kIterations; ++i) EXPECT_EQ(act_iterations[tid][i], i);
  }
  EXPECT_TRUE(wait_reasons[1].count("output registers full")) << "backpressure wait missing";
  EXPECT_TRUE(wait_reasons[3].count("input not ready")) << "the sink waits ~2 ms per iteration for slow";
  EXPECT_TRUE(wait_reasons[4].count("output registers full")) << "Push blocks behind the slow stage";
  std::remove(path.c_str());
}

// The compact encoding decodes to exactly what was appended: short slots (the wait starts where
// the previous event ended), and every case that needs the long form.
TEST(TraceLane, DecodesWhatWasAppended) {
  using W = WaitReason;
  std::vector<TraceLane::Event> want = {
      {0, true, false, W::kInputNotReady, 1000, 1000, 1500},                  // first event: long form
      {1, true, true, W::kInputNotReady, 1500, 1700, 1900},                   // short
      {2, true, true, W::kOutputRegistersFull, 1900, 1900, 2000},             // zero-length wait
      {3, false, true, W::kOutputRegistersFull, 2000, 2600, 2600},            // a wait alone
      {3, true, true, W::kInputNotReady, 2600, 2700, 2800},                   // same iteration again
      {4, true, true, W::kInputNotReady, 3000, 3100, 3200},                   // wait started later: long
      {5, true, false, W::kInputNotReady, 3200, 3300, 3400},                  // busy before, gap 100
      {6, true, true, W::kInputNotReady, 3400, 3400 + (int64_t{1} << 33), (int64_t{1} << 34)},  // long wait
      {7, true, true, W::kInputNotReady, int64_t{1} << 34, (int64_t{1} << 34) + 5, (int64_t{1} << 35)},  // long act
      {1, true, true, W::kOutputRegistersFull, int64_t{1} << 35, (int64_t{1} << 35) + 1, (int64_t{1} << 35) + 2},  // step back
      {int64_t{1} << 60, true, true, W::kInputNotReady, (int64_t{1} << 35) + 2, (int64_t{1} << 35) + 3,
       (int64_t{1} << 35) + 4},  // a far iteration
      {int64_t{1} << 60, true, true, W::kInputNotReady, (int64_t{1} << 35) + 4, (int64_t{1} << 35) + 4,
       (int64_t{1} << 35) + 3},  // end before start (clocks of two cores): long form keeps it
      {0, false, true, W::kInputNotReady, (int64_t{1} << 35) + 3, (int64_t{1} << 35) + 9,
       (int64_t{1} << 35) + 9},  // a wait for input, then the same wait goes on for a worker:
      {0, true, true, W::kWorkerBusy, (int64_t{1} << 35) + 9, (int64_t{1} << 35) + 20, (int64_t{1} << 35) + 30},
      {1, false, true, W::kWorkerBusy, (int64_t{1} << 35) + 30, (int64_t{1} << 35) + 31, (int64_t{1} << 35) + 31},
  };
  TraceLane lane;
  for (const auto& e : want) {
    if (e.is_act)
      lane.Act(e.iteration, e.waited, e.wait_start, e.reason, e.start, e.end);
    else
      lane.Wait(e.iteration, e.reason, e.wait_start, e.end);
  }
  // Enough short events to fill several chunks.
  int64_t t = (int64_t{1} << 35) + 31;
  constexpr W kReasons[] = {W::kOutputRegistersFull, W::kInputNotReady, W::kWorkerBusy};
  for (int64_t i = 0; i < 30000; ++i, t += 7) {
    want.push_back({i, true, true, kReasons[i % 3], t, t + 3, t + 7});
    lane.Act(i, true, t, want.back().reason, t + 3, t + 7);
  }
  std::vector<TraceLane::Event> got;
  lane.ForEach([&](const TraceLane::Event& e) { got.push_back(e); });
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(lane.num_events(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto &g = got[i], &w = want[i];
    EXPECT_EQ(g.iteration, w.iteration) << i;
    EXPECT_EQ(g.is_act, w.is_act) << i;
    EXPECT_EQ(g.waited, w.waited) << i;
    if (w.waited) {
      EXPECT_EQ(g.reason, w.reason) << i;
      EXPECT_EQ(g.wait_start, w.wait_start) << i;
    }
    EXPECT_EQ(g.start, w.start) << i;
    EXPECT_EQ(g.end, w.end) << i;
  }
}

// Trace clock ticks become microseconds: a stage that sleeps 3 ms shows acts of at least 3 ms,
// and recording paused on a live pipeline records nothing until it resumes.
TEST(ChromeTraceRecorder, TimesAreCalibratedAndRecordingPauses) {
  constexpr auto kSleep = std::chrono::milliseconds(3);
  ChromeTraceRecorder recorder;
  Pipeline p;
  Port x = p.AddInput("x", kScalar, 2);
  Port slow = p.AddStage("slow", {x}, {kScalar}, Copy(kSleep));
  p.SetOutputs({slow});
  PipelineOptions options;
  options.observer = &recorder;
  ASSERT_TRUE(p.Start(options).ok());
  float in = 1, out = 0;
  recorder.set_recording(false);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(p.Run({TensorView{&in, kScalar}}, {TensorView{&out, kScalar}}).ok());
  recorder.set_recording(true);
  const int64_t before = NowNs();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.Run({TensorView{&in, kScalar}}, {TensorView{&out, kScalar}}).ok());
  const double elapsed_us = (NowNs() - before) / 1000.0;
  ASSERT_TRUE(p.Finish().ok());

  json trace = json::parse(recorder.ToJson());
  std::vector<double> slow_acts;
  std::set<int64_t> iterations;
  double first_ts = 1e300, last_end = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "act") continue;
    iterations.insert(e["args"]["iteration"].get<int64_t>());
    first_ts = std::min(first_ts, e["ts"].get<double>());
    last_end = std::max(last_end, e["ts"].get<double>() + e["dur"].get<double>());
    if (e["args"]["actor"] == "slow") slow_acts.push_back(e["dur"].get<double>());
  }
  EXPECT_EQ(iterations, (std::set<int64_t>{3, 4, 5, 6})) << "paused iterations 0-2 must not be recorded";
  ASSERT_EQ(slow_acts.size(), 4u);
  for (double dur : slow_acts) {
    EXPECT_GE(dur, 1000.0 * kSleep.count() * 0.99);  // the sleep, in microseconds
    EXPECT_LE(dur, elapsed_us);
  }
  EXPECT_LE(last_end - first_ts, elapsed_us * 1.01);  // all recorded acts fit in the measured time
}

// A trace may be written while actors record (each lane publishes whole events): every
// snapshot parses, and later snapshots hold at least the acts of earlier ones.
TEST(ChromeTraceRecorder, SnapshotsWhileRunning) {
  ChromeTraceRecorder recorder;
  Pipeline p;
  Port x = p.AddInput("x", kScalar, 2);
  Port a = p.AddStage("a", {x}, {kScalar}, Copy(std::chrono::microseconds(0)));
  Port b = p.AddStage("b", {a}, {kScalar}, Copy(std::chrono::microseconds(20)));
  p.SetOutputs({b});
  PipelineOptions options;
  options.observer = &recorder;
  ASSERT_TRUE(p.Start(options).ok());
  std::atomic<bool> done{false};
  std::thread feeder([&] {
    float in = 1, out = 0;
    for (int i = 0; i < 300; ++i) (void)p.Push({TensorView{&in, kScalar}}, {TensorView{&out, kScalar}}, nullptr);
    p.Drain();
    done = true;
  });
  auto count_acts = [&] {
    json trace = json::parse(recorder.ToJson());
    size_t acts = 0;
    for (const json& e : trace["traceEvents"]) acts += e["ph"] == "X" && e["cat"] == "act";
    return acts;
  };
  size_t last_acts = 0;
  for (int snapshots = 0; !done || snapshots < 2; ++snapshots) {
    size_t acts = count_acts();
    EXPECT_GE(acts, last_acts);
    last_acts = acts;
  }
  feeder.join();
  EXPECT_EQ(count_acts(), 5u * 300);  // source, a, b, sink and the host's pushes: all drained
  ASSERT_TRUE(p.Finish().ok());
}

TEST(ChromeTraceRecorder, UnwritablePathIsAnError) {
  ChromeTraceRecorder recorder;
  Status s = recorder.Write("/nonexistent-dir/trace.json");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/trace.json"), std::string::npos);
  EXPECT_NE(s.message().find("No such file or directory"), std::string::npos) << s.message();
}

// A bad trace path fails when tracing is set up, naming the path and the OS error, and a
// directory is never replaced by a trace.
TEST(ChromeTraceRecorder, BadPathFailsAtStart) {
  const std::string dir = ::testing::TempDir() + "trace-is-a-dir";
  ASSERT_EQ(::system(("mkdir -p '" + dir + "' && touch '" + dir + "/keep.txt'").c_str()), 0);
  for (const std::string& path : {dir, std::string("/nonexistent-dir/trace.json")}) {
    Pipeline p;
    Port x = p.AddInput("x", kScalar);
    p.SetOutputs({p.AddStage("copy", {x}, {kScalar}, Copy(std::chrono::microseconds(0)))});
    PipelineOptions options;
    options.trace_path = path;
    Status s = p.Start(options);
    ASSERT_FALSE(s.ok()) << path;
    EXPECT_NE(s.message().find("'" + path + "'"), std::string::npos) << s.message();
    EXPECT_TRUE(s.message().find("directory") != std::string::npos) << s.message();
  }
  EXPECT_TRUE(std::ifstream(dir + "/keep.txt").good()) << "the directory was touched";
  std::string error = ChromeTraceRecorder().Write(dir).message();
  EXPECT_NE(error.find("is a directory"), std::string::npos) << error;
  EXPECT_TRUE(std::ifstream(dir + "/keep.txt").good());
}

// The temporary the recorder writes first is its own: a user's file named like it survives.
TEST(ChromeTraceRecorder, WriteKeepsOtherFiles) {
  const std::string path = ::testing::TempDir() + "keeps.trace.json";
  { std::ofstream(path + ".tmp") << "mine"; }
  ChromeTraceRecorder recorder;
  ASSERT_TRUE(recorder.Write(path).ok());
  std::string text;
  std::getline(std::ifstream(path + ".tmp"), text);
  EXPECT_EQ(text, "mine");
  EXPECT_NO_THROW(json::parse(std::ifstream(path)));
  std::remove(path.c_str());
  std::remove((path + ".tmp").c_str());
}

// Time per reason on each actor's lane, in microseconds.
std::map<std::string, std::map<std::string, double>> TimeByReason(const json& trace) {
  std::map<std::string, std::map<std::string, double>> out;  // actor -> reason ("act") -> µs
  std::map<int, std::string> names;
  for (const json& a : trace["actorflow"]["actors"]) names[a["id"]] = a["name"];
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    std::string what = e["cat"] == "act" ? "act" : e["args"]["reason"].get<std::string>();
    out[names[e["tid"]]][what] += e["dur"].get<double>();
  }
  return out;
}

// Two heavy stages side by side (both read x): with one worker, while one runs the other is
// often ready but cannot run (CAF runs an actor's queued messages in a row, so the other then
// waits several acts for the worker; after that run it waits for input, since x's registers are
// still held). With two workers they run at once and the wait for a worker mostly disappears.
// The sleeps hold the worker thread as a kernel would.
TEST(ChromeTraceRecorder, SeparatesWaitingForAWorkerFromWaitingForInput) {
  // Sleeping acts of 10 ms: long against the few ms an idle worker can take to be woken on a
  // loaded host (that delay counts as waiting for a worker and once failed the 2-worker check
  // with 3 ms acts at load ~8).
  constexpr int kIterations = 20;
  constexpr auto kWork = std::chrono::microseconds(10000);
  double one_worker_wait = 0;
  for (int workers : {1, 2}) {
    ChromeTraceRecorder recorder;
    Pipeline p;
    Port x = p.AddInput("x", kScalar, 4);
    Port a = p.AddStage("a", {x}, {kScalar}, Copy(kWork), 4);
    Port b = p.AddStage("b", {x}, {kScalar}, Copy(kWork), 4);
    p.SetOutputs({a, b});
    PipelineOptions options;
    options.observer = &recorder;
    options.num_threads = workers;
    ASSERT_TRUE(p.Start(options).ok());
    float in = 1;
    std::vector<float> out(2 * kIterations);
    for (int i = 0; i < kIterations; ++i)
      ASSERT_TRUE(p.Push({TensorView{&in, kScalar}},
                         {TensorView{&out[2 * i], kScalar}, TensorView{&out[2 * i + 1], kScalar}}, nullptr)
                      .ok());
    p.Drain();
    json trace = json::parse(recorder.ToJson());
    ASSERT_TRUE(p.Finish().ok());
    EXPECT_EQ(trace["actorflow"]["workers"], workers);
    auto time = TimeByReason(trace);
    const double acts = time["a"]["act"] + time["b"]["act"];
    const double worker = time["a"]["worker busy"] + time["b"]["worker busy"];
    const double input = time["a"]["input not ready"] + time["b"]["input not ready"];
    SCOPED_TRACE("workers " + std::to_string(workers) + ": a and b act " + std::to_string(acts) +
                 " us, wait for a worker " + std::to_string(worker) + " us, for input " + std::to_string(input) + " us");
    if (workers == 1) {
      EXPECT_GT(worker, 0.25 * acts);
      EXPECT_GT(worker + input, 0.75 * acts) << "each stage waits while the other runs";
      one_worker_wait = worker;
    } else {
      EXPECT_LT(worker, 0.5 * one_worker_wait);
    }
  }
}

}  // namespace
}  // namespace actorflow

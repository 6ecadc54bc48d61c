// Runtime behaviour through the embedding API (and raw plans where the API has no word for
// it: variables, control edges). Every test is bounded by ctest's TIMEOUT; none waits forever.
#include <gtest/gtest.h>

#include <caf/logger.hpp>

#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "actorflow/pipeline.h"
#include "actors/runtime.h"
#include "actors/runtime_testing.h"
#include "actors/trace_recorder.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace {

const TensorDesc kScalar{{1}, DType::kFloat32};

TensorView View(float* x) { return TensorView{x, kScalar}; }

// A hand-built plan's register of one float32 scalar blob, `register_num` registers deep.
plan::RegisterDesc* AddScalarRegister(plan::Task* t, int register_num = 2) {
  plan::RegisterDesc* r = t->add_registers();
  r->set_register_num(register_num);
  plan::BlobDesc* b = r->add_blobs();
  b->add_shape(1);
  b->set_dtype(plan::DT_FLOAT32);
  b->set_byte_size(4);
  return r;
}

StageFn AddConstant(float c, std::chrono::microseconds delay = std::chrono::microseconds(0)) {
  return [c, delay](const StageArgs& a) {
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    float sum = c;
    for (const TensorView& in : a.inputs) sum += *in.as<float>();
    *a.outputs[0].as<float>() = sum;
    return Status::Ok();
  };
}

TEST(Runtime, ChainComputesAndDeliversInOrder) {
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  Port a = p.AddStage("a", {x}, {kScalar}, AddConstant(1));
  Port b = p.AddStage("b", {a}, {kScalar}, AddConstant(10));
  p.SetOutputs({b});
  ASSERT_TRUE(p.Start().ok());
  constexpr int kN = 200;
  std::vector<float> in(kN), out(kN, -1);
  std::vector<int64_t> order;
  std::mutex mu;
  for (int i = 0; i < kN; ++i) {
    in[i] = static_cast<float>(i);
    auto pushed = p.Push({View(&in[i])}, {View(&out[i])}, [&](int64_t it, const Status& s) {
      EXPECT_TRUE(s.ok()) << s.ToString();
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(it);
    });
    ASSERT_TRUE(pushed.ok());
  }
  p.Drain();
  ASSERT_EQ(order.size(), static_cast<size_t>(kN));
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(order[i], i);
    EXPECT_EQ(out[i], i + 11.0f);
  }
}

TEST(Runtime, FanOutFanInDiamond) {
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  Port left = p.AddStage("left", {x}, {kScalar}, AddConstant(1));
  Port right = p.AddStage("right", {x}, {kScalar}, AddConstant(2));
  Port join = p.AddStage("join", {left, right, x}, {kScalar}, AddConstant(0));  // fan-in of 3
  p.SetOutputs({join, left});
  ASSERT_TRUE(p.Start().ok());
  for (int i = 0; i < 50; ++i) {
    float in = static_cast<float>(i), out = 0, out_left = 0;
    ASSERT_TRUE(p.Run({View(&in)}, {View(&out), View(&out_left)}).ok());
    EXPECT_EQ(out, 3.0f * i + 3.0f);
    EXPECT_EQ(out_left, i + 1.0f);
  }
}

// 100,000 iterations in the normal build; under ThreadSanitizer an iteration costs ~1.2 ms of
// race checking (CAF's internals are uninstrumented and each of their accesses is matched
// against the suppressions), so the sanitizer run checks the same protocol on 10,000.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int kTinyIterations = 10000;
#else
constexpr int kTinyIterations = 100000;
#endif

TEST(Runtime, TinyIterationsCompleteInOrder) {
  Pipeline p;
  Port x = p.AddInput("x", kScalar, 4);
  Port a = p.AddStage("inc", {x}, {kScalar}, AddConstant(1), 4);
  p.SetOutputs({a});
  ASSERT_TRUE(p.Start().ok());
  constexpr int kN = kTinyIterations;
  std::atomic<int64_t> expected{0};
  std::atomic<int> wrong{0};
  std::vector<float> out(kN);
  for (int i = 0; i < kN; ++i) {
    float in = static_cast<float>(i % 1000);  // copied into a register by Push
    ASSERT_TRUE(p.Push({View(&in)}, {View(&out[i])}, [&](int64_t it, const Status& s) {
                   if (!s.ok() || it != expected.fetch_add(1)) wrong++;
                 }).ok());
  }
  p.Drain();
  EXPECT_EQ(expected.load(), kN);
  EXPECT_EQ(wrong.load(), 0);
  for (int i = 0; i < kN; i += 997) EXPECT_EQ(out[i], (i % 1000) + 1.0f);
}

// With register_num = k on the producer's output, the producer is never more than k
// iterations ahead of its slow consumer.
TEST(Runtime, BackpressureBoundsTheProducer) {
  for (int k : {1, 2, 3}) {
    Pipeline p;
    std::atomic<int64_t> produced{0}, consumed{0}, max_lead{0};
    Port x = p.AddInput("x", kScalar, 8);
    Port fast = p.AddStage("fast", {x}, {kScalar}, [&](const StageArgs& a) {
      int64_t lead = produced.fetch_add(1) + 1 - consumed.load();
      int64_t prev = max_lead.load();
      while (lead > prev && !max_lead.compare_exchange_weak(prev, lead)) {}
      *a.outputs[0].as<float>() = *a.inputs[0].as<float>();
      return Status::Ok();
    }, k);
    Port slow = p.AddStage("slow", {fast}, {kScalar}, [&](const StageArgs& a) {
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      consumed.fetch_add(1);
      *a.outputs[0].as<float>() = *a.inputs[0].as<float>();
      return Status::Ok();
    });
    p.SetOutputs({slow});
    ASSERT_TRUE(p.Start().ok());
    std::vector<float> out(100);
    float in = 1;
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(p.Push({View(&in)}, {View(&out[i])}, nullptr).ok());
    p.Drain();
    EXPECT_EQ(consumed.load(), 100);
    // The consumer acks only after its kernel counted, so while the producer acts it holds at
    // most k-1 unacked registers: the one it fills makes the lead at most k. The producer is
    // 300x faster, so it does reach k.
    EXPECT_LE(max_lead.load(), k) << "register_num " << k;
    EXPECT_EQ(max_lead.load(), k) << "register_num " << k;
  }
}

TEST(Runtime, KernelFailureFailsOnlyItsIteration) {
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  Port a = p.AddStage("flaky", {x}, {kScalar}, [](const StageArgs& a) {
    if (a.iteration == 7) return InvalidArgument("bad value");
    *a.outputs[0].as<float>() = *a.inputs[0].as<float>() * 2;
    return Status::Ok();
  });
  Port b = p.AddStage("after", {a}, {kScalar}, AddConstant(1));
  p.SetOutputs({b});
  ASSERT_TRUE(p.Start().ok());
  std::vector<Status> results(20);
  std::vector<float> in(20), out(20);
  for (int i = 0; i < 20; ++i) {
    in[i] = static_cast<float>(i);
    ASSERT_TRUE(p.Push({View(&in[i])}, {View(&out[i])}, [&results](int64_t it, const Status& s) { results[it] = s; }).ok());
  }
  p.Drain();
  for (int i = 0; i < 20; ++i) {
    if (i == 7) {
      ASSERT_FALSE(results[i].ok());
      EXPECT_NE(results[i].message().find("flaky"), std::string::npos) << results[i].message();
      EXPECT_NE(results[i].message().find("bad value"), std::string::npos);
      EXPECT_NE(results[i].message().find("iteration 7"), std::string::npos);
    } else {
      EXPECT_TRUE(results[i].ok()) << i << ": " << results[i].ToString();
      EXPECT_EQ(out[i], 2.0f * i + 1.0f);
    }
  }
  // The runtime keeps working after the failure.
  float again_in = 5, again_out = 0;
  EXPECT_TRUE(p.Run({View(&again_in)}, {View(&again_out)}).ok());
  EXPECT_EQ(again_out, 11.0f);
}

// Errors from raw plans name the task, its op type and the user's source line; downstream
// kernels of the failed iteration do not run.
TEST(Runtime, KernelErrorNamesOpTypeAndSourceLine) {
  plan::Plan plan;
  auto add = [&](int id, const std::string& name, plan::TaskKind kind) {
    plan::Task* t = plan.add_tasks();
    t->set_id(id);
    t->set_name(name);
    t->set_kind(kind);
    if (kind != plan::SINK) {
      AddScalarRegister(t);
    }
    if (id > 0) {
      t->add_inputs()->set_producer_task_id(id - 1);
      plan.mutable_tasks(id - 1)->mutable_registers(0)->add_consumer_task_ids(id);
    }
    return t;
  };
  add(0, "x", plan::SOURCE);
  plan::Task* bad = add(1, "hidden-matmul", plan::COMPUTE);
  bad->set_op_type("matmul");
  bad->set_source_location("train.py:42");
  add(2, "relu", plan::COMPUTE)->set_op_type("relu");
  add(3, "out", plan::SINK);
  std::atomic<int> relu_calls{0};
  RuntimeHooks hooks;
  hooks.make_kernel = [&](const plan::Task& t) -> StatusOr<KernelFn> {
    if (t.op_type() == "relu")
      return KernelFn([&](KernelContext& c) {
        relu_calls++;
        *c.output(0).as<float>() = *c.input(0).as<float>();
        return Status::Ok();
      });
    return KernelFn([](KernelContext& c) {
      if (*c.input(0).as<float>() < 0) return InvalidArgument("negative input");
      *c.output(0).as<float>() = *c.input(0).as<float>();
      return Status::Ok();
    });
  };
  auto runtime = Runtime::Create(plan, hooks);
  ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
  float good = 1, negative = -1, out = 0;
  Status s = (*runtime)->Run({View(&negative)}, {View(&out)});
  ASSERT_FALSE(s.ok());
  for (const char* part : {"hidden-matmul", "(matmul)", "train.py:42", "negative input"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " missing in: " << s.message();
  EXPECT_EQ(relu_calls.load(), 0);
  EXPECT_TRUE((*runtime)->Run({View(&good)}, {View(&out)}).ok());
  EXPECT_EQ(out, 1.0f);
  EXPECT_EQ(relu_calls.load(), 1);
}

// A plan shared by several jobs (the job cache) runs under each job's names: errors name the
// task and source line of the table, through the actors and inline; a table of the wrong size
// is refused.
TEST(Runtime, ErrorsNameTheTasksOfThePlanNamesTable) {
  plan::Plan plan;
  plan.set_job_name("first_job");
  for (int id = 0; id < 3; ++id) {
    plan::Task* t = plan.add_tasks();
    t->set_id(id);
    t->set_name(std::string("first_") + (id == 0 ? "x" : id == 1 ? "check" : "out"));
    t->set_kind(id == 0 ? plan::SOURCE : id == 1 ? plan::COMPUTE : plan::SINK);
    if (id == 1) {
      t->set_op_type("check");
      t->set_source_location("first.py:3");
    }
    if (id < 2) {
      AddScalarRegister(t)->add_consumer_task_ids(id + 1);
    }
    if (id > 0) t->add_inputs()->set_producer_task_id(id - 1);
  }
  RuntimeHooks hooks;
  hooks.make_kernel = [](const plan::Task&) -> StatusOr<KernelFn> {
    return KernelFn([](KernelContext& c) {
      if (*c.input(0).as<float>() < 0) return InvalidArgument("negative input");
      *c.output(0).as<float>() = *c.input(0).as<float>();
      return Status::Ok();
    });
  };
  auto names = std::make_shared<PlanNames>();
  names->job_name = "second_job";
  names->task_names = {"second_x", "second_check", "second_out"};
  names->source_locations = {"", "second.py:9", ""};
  for (bool run_inline : {false, true}) {
    SCOPED_TRACE(run_inline ? "inline" : "actors");
    RuntimeOptions options;
    options.names = names;
    options.run_inline = run_inline;
    auto runtime = Runtime::Create(std::make_shared<const plan::Plan>(plan), hooks, options);
    ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
    EXPECT_EQ((*runtime)->inline_refusal().empty(), run_inline) << (*runtime)->inline_refusal();
    float good = 2, negative = -1, out = 0;
    Status s = (*runtime)->Run({View(&negative)}, {View(&out)});
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("op 'second_check' (check) at second.py:9, iteration 0"), std::string::npos)
        << s.message();
    EXPECT_EQ(s.message().find("first"), std::string::npos) << s.message();
    EXPECT_TRUE((*runtime)->Run({View(&good)}, {View(&out)}).ok());
    EXPECT_EQ(out, 2.0f);
    float wrong[2] = {0, 0};
    s = (*runtime)->Run({TensorView{wrong, {{2}, DType::kFloat32}}}, {View(&out)});
    EXPECT_NE(s.message().find("input 0 ('second_x')"), std::string::npos) << s.message();
  }
  auto short_names = std::make_shared<PlanNames>(*names);
  short_names->task_names.pop_back();
  RuntimeOptions options;
  options.names = short_names;
  auto refused = Runtime::Create(std::make_shared<const plan::Plan>(plan), hooks, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("2 task names and 3 source lines for a plan of 3 tasks"), std::string::npos)
      << refused.status().message();
}

TEST(Runtime, BadPushIsRejectedAndNextCallWorks) {
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  p.SetOutputs({p.AddStage("id", {x}, {kScalar}, AddConstant(0))});
  ASSERT_TRUE(p.Start().ok());
  float v[2] = {1, 2}, out = 0;
  Status s = p.Run({TensorView{v, {{2}, DType::kFloat32}}}, {View(&out)});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expected float32(1,)"), std::string::npos) << s.message();
  EXPECT_FALSE(p.Run({}, {View(&out)}).ok());
  EXPECT_TRUE(p.Run({View(&v[1])}, {View(&out)}).ok());
  EXPECT_EQ(out, 2.0f);
}

TEST(Runtime, DestroyWhileIterationsInFlightAndConsumerSlow) {
  std::atomic<int> done{0};
  {
    Pipeline p;
    Port x = p.AddInput("x", kScalar);
    Port s = p.AddStage("slow", {x}, {kScalar}, AddConstant(1, std::chrono::microseconds(2000)));
    p.SetOutputs({s});
    ASSERT_TRUE(p.Start().ok());
    static float in = 1;
    static std::vector<float> out(20);
    for (int i = 0; i < 20; ++i)
      ASSERT_TRUE(p.Push({View(&in)}, {View(&out[i])}, [&](int64_t, const Status&) { done++; }).ok());
    // ~Pipeline runs now, with most iterations still in flight.
  }
  EXPECT_EQ(done.load(), 20);
}

TEST(Runtime, DestroyBeforeAnyIteration) {
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  p.SetOutputs({p.AddStage("id", {x}, {kScalar}, AddConstant(0))});
  ASSERT_TRUE(p.Start().ok());
}

// Three slow stages: the trace must show stage 1 acting on iteration i+1 while stage 3 acts
// on iteration i (pipelining), judged from recorded intervals, not wall-clock totals.
TEST(Runtime, PipeliningOverlapsStagesInTrace) {
  std::string path = ::testing::TempDir() + "pipelining.trace.json";
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  Port s1 = p.AddStage("stage1", {x}, {kScalar}, AddConstant(1, std::chrono::microseconds(3000)));
  Port s2 = p.AddStage("stage2", {s1}, {kScalar}, AddConstant(1, std::chrono::microseconds(3000)));
  Port s3 = p.AddStage("stage3", {s2}, {kScalar}, AddConstant(1, std::chrono::microseconds(3000)));
  p.SetOutputs({s3});
  PipelineOptions options;
  options.num_threads = 4;  // stages sleep, so more workers than cores is fine here
  options.trace_path = path;
  ASSERT_TRUE(p.Start(options).ok());
  float in = 0;
  std::vector<float> out(20);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(p.Push({View(&in)}, {View(&out[i])}, nullptr).ok());
  ASSERT_TRUE(p.Finish().ok());
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  // Parse the act events of stage1 (tid 1) and stage3 (tid 3) with a tiny scan.
  struct Act { double ts, dur; int it; };
  auto acts_of = [&](int tid) {
    std::vector<Act> acts;
    std::string s = text.str(), key = "\"cat\":\"act\"";
    for (size_t pos = s.find(key); pos != std::string::npos; pos = s.find(key, pos + 1)) {
      size_t end = s.find('\n', pos);
      std::string line = s.substr(pos, end - pos);
      if (line.find("\"tid\":" + std::to_string(tid) + ",") == std::string::npos) continue;
      Act a{};
      std::sscanf(line.c_str() + line.find("\"ts\":"), "\"ts\":%lf,\"dur\":%lf", &a.ts, &a.dur);
      std::sscanf(line.c_str() + line.find("\"iteration\":"), "\"iteration\":%d", &a.it);
      acts.push_back(a);
    }
    return acts;
  };
  auto stage1 = acts_of(1), stage3 = acts_of(3);
  ASSERT_EQ(stage1.size(), 20u);
  ASSERT_EQ(stage3.size(), 20u);
  int overlaps = 0;
  for (const Act& a3 : stage3)
    for (const Act& a1 : stage1)
      if (a1.it > a3.it && a1.ts < a3.ts + a3.dur && a3.ts < a1.ts + a1.dur) overlaps++;
  EXPECT_GE(overlaps, 3) << "stage 1 never worked ahead of stage 3";
  EXPECT_NE(text.str().find("wait: "), std::string::npos);
  std::remove(path.c_str());
}

// A variable read by one task and updated in place by another, ordered by a control edge:
// the reader of iteration i sees the value after i updates.
TEST(Runtime, VariableUpdateOrderedAfterReaders) {
  plan::Plan plan;
  auto add_task = [&](int id, const std::string& name, plan::TaskKind kind) {
    plan::Task* t = plan.add_tasks();
    t->set_id(id);
    t->set_name(name);
    t->set_kind(kind);
    return t;
  };
  auto add_register = [](plan::Task* t, bool data, int register_num) {
    plan::RegisterDesc* r = t->add_registers();
    r->set_register_num(register_num);
    if (data) {
      plan::BlobDesc* b = r->add_blobs();
      b->add_shape(1);
      b->set_dtype(plan::DT_FLOAT32);
      b->set_byte_size(4);
    }
  };
  auto connect = [&](plan::Task* consumer, int producer, bool control) {
    plan::InputDesc* in = consumer->add_inputs();
    in->set_producer_task_id(producer);
    in->set_control(control);
    plan.mutable_tasks(producer)->mutable_registers(0)->add_consumer_task_ids(consumer->id());
  };
  add_register(add_task(0, "w", plan::VARIABLE), true, 1);
  plan::Task* reader = add_task(1, "reader", plan::COMPUTE);
  reader->set_op_type("copy");
  add_register(reader, true, 2);
  connect(reader, 0, false);
  plan::Task* update = add_task(2, "update", plan::COMPUTE);
  update->set_op_type("increment");
  update->add_mutable_inputs(0);
  add_register(update, false, 2);
  connect(update, 0, false);
  connect(update, 1, true);
  plan::Task* sink = add_task(3, "sink", plan::SINK);
  connect(sink, 1, false);
  connect(sink, 2, true);

  float w = 100;
  RuntimeHooks hooks;
  hooks.variable_buffer = [&](const plan::Task&) -> StatusOr<void*> { return static_cast<void*>(&w); };
  hooks.make_kernel = [](const plan::Task& t) -> StatusOr<KernelFn> {
    if (t.op_type() == "copy")
      return KernelFn([](KernelContext& c) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // a slow reader must still win
        *c.output(0).as<float>() = *c.input(0).as<float>();
        return Status::Ok();
      });
    return KernelFn([](KernelContext& c) {
      *c.input(0).as<float>() += 1;
      return Status::Ok();
    });
  };
  auto runtime = Runtime::Create(plan, hooks);
  ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
  std::vector<float> seen(30);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE((*runtime)->Push({}, {View(&seen[i])}, nullptr).ok());
  (*runtime)->Drain();
  for (int i = 0; i < 30; ++i) EXPECT_EQ(seen[i], 100.0f + i) << "iteration " << i;
  EXPECT_EQ(w, 130.0f);
}

// A read-only variable (nothing in the plan writes it) is read in place: its readers do not
// wait for it, it never acts, and the host feeds only the source. Readers: a kernel that also
// reads the source, a kernel that reads only variables (so it becomes a root, ticked per
// iteration), and the main sink itself.
TEST(Runtime, ReadOnlyVariablesAreReadInPlace) {
  using nlohmann::json;
  plan::Plan plan;
  auto add_task = [&](int id, const std::string& name, plan::TaskKind kind, bool data_register) {
    plan::Task* t = plan.add_tasks();
    t->set_id(id);
    t->set_name(name);
    t->set_kind(kind);
    if (data_register) {
      AddScalarRegister(t);
    }
    return t;
  };
  auto connect = [&](plan::Task* consumer, int producer) {
    consumer->add_inputs()->set_producer_task_id(producer);
    plan.mutable_tasks(producer)->mutable_registers(0)->add_consumer_task_ids(consumer->id());
  };
  add_task(0, "x", plan::SOURCE, true);
  add_task(1, "w", plan::VARIABLE, true)->set_read_only(true);
  plan::Task* add = add_task(2, "add", plan::COMPUTE, true);
  add->set_op_type("add");
  connect(add, 0);
  connect(add, 1);
  plan::Task* twice = add_task(3, "twice", plan::COMPUTE, true);
  twice->set_op_type("twice");
  connect(twice, 1);
  plan::Task* sink = add_task(4, "sink", plan::SINK, false);
  connect(sink, 2);
  connect(sink, 3);
  connect(sink, 1);

  float w = 10;
  RuntimeHooks hooks;
  hooks.variable_buffer = [&](const plan::Task&) -> StatusOr<void*> { return static_cast<void*>(&w); };
  hooks.make_kernel = [](const plan::Task& t) -> StatusOr<KernelFn> {
    if (t.op_type() == "add")
      return KernelFn([](KernelContext& c) {
        *c.output(0).as<float>() = *c.input(0).as<float>() + *c.input(1).as<float>();
        return Status::Ok();
      });
    return KernelFn([](KernelContext& c) {
      *c.output(0).as<float>() = 2 * *c.input(0).as<float>();
      return Status::Ok();
    });
  };
  ChromeTraceRecorder recorder;
  RuntimeOptions options;
  options.observer = &recorder;
  auto runtime = Runtime::Create(plan, hooks, options);
  ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
  ASSERT_EQ((*runtime)->output_descs().size(), 3u);
  constexpr int kIterations = 50;
  std::vector<float> in(kIterations), sum(kIterations), doubled(kIterations), weight(kIterations);
  for (int i = 0; i < kIterations; ++i) {
    in[i] = static_cast<float>(i);
    ASSERT_TRUE((*runtime)->Push({View(&in[i])}, {View(&sum[i]), View(&doubled[i]), View(&weight[i])}, nullptr).ok());
  }
  (*runtime)->Drain();
  for (int i = 0; i < kIterations; ++i) {
    EXPECT_EQ(sum[i], 10.0f + i) << i;
    EXPECT_EQ(doubled[i], 20.0f) << i;
    EXPECT_EQ(weight[i], 10.0f) << i;
  }
  runtime->reset();
  json trace = json::parse(recorder.ToJson());
  std::map<int, int> acts;  // tid -> acts
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "act") ++acts[e["tid"].get<int>()];
  EXPECT_EQ(acts[1], 0) << "the read-only variable must not act";
  EXPECT_EQ(acts[2], kIterations);
  EXPECT_EQ(acts[3], kIterations) << "a kernel reading only variables still runs once per iteration";
  EXPECT_EQ(acts[4], kIterations);
}

// source -> one compute task -> main sink, one float per register.
plan::Plan OneStagePlan() {
  plan::Plan plan;
  for (int id = 0; id < 3; ++id) {
    plan::Task* t = plan.add_tasks();
    t->set_id(id);
    t->set_name("task" + std::to_string(id));
    t->set_kind(id == 0 ? plan::SOURCE : id == 1 ? plan::COMPUTE : plan::SINK);
    if (id < 2) {
      AddScalarRegister(t)->add_consumer_task_ids(id + 1);
    }
    if (id > 0) t->add_inputs()->set_producer_task_id(id - 1);
  }
  return plan;
}

// One thread budget: workers x kernel threads stays within num_threads, and every thread a
// kernel runs on was handed its kernel share before running anything.
TEST(Runtime, ThreadBudgetReachesEveryWorker) {
  struct Case { int threads, workers, kernel_threads; };
  for (Case c : {Case{4, 2, 2}, Case{2, 0, 1}, Case{3, 2, 1}}) {
    std::mutex mu;
    std::set<std::thread::id> started;
    std::set<int> shares;
    bool kernel_on_started_thread = true;
    RuntimeHooks hooks;
    hooks.make_kernel = [&](const plan::Task&) -> StatusOr<KernelFn> {
      return KernelFn([&](KernelContext& ctx) {
        std::lock_guard<std::mutex> lock(mu);
        if (!started.count(std::this_thread::get_id())) kernel_on_started_thread = false;
        *ctx.output(0).as<float>() = 0;
        return Status::Ok();
      });
    };
    RuntimeOptions options;
    options.num_threads = c.threads;
    options.num_workers = c.workers;
    options.on_worker_start = [&](int kernel_threads) {
      std::lock_guard<std::mutex> lock(mu);
      started.insert(std::this_thread::get_id());
      shares.insert(kernel_threads);
    };
    auto runtime = Runtime::Create(OneStagePlan(), hooks, options);
    ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
    float in = 1, out = 0;
    for (int i = 0; i < 20; ++i) ASSERT_TRUE((*runtime)->Run({View(&in)}, {View(&out)}).ok());
    // Worker threads start asynchronously: one that got no work may still be starting.
    const size_t expected = static_cast<size_t>(c.workers > 0 ? c.workers : c.threads);
    for (int wait = 0; wait < 500; ++wait) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (started.size() >= expected) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(kernel_on_started_thread) << "a kernel ran on a thread the hook never saw";
    EXPECT_EQ(shares, (std::set<int>{c.kernel_threads})) << c.threads << " threads, " << c.workers << " workers";
    EXPECT_GE(started.size(), expected);
  }
}

// Idle shares are lent (RuntimeOptions::lend_idle_threads): a kernel acting alone may use the
// whole budget; one starting while another kernel acts gets its own share only. Pipeline:
// x -> {left, right} -> join; left and right meet inside their kernels (each waits, bounded,
// until the other started), so they act at once; join acts alone.
TEST(Runtime, IdleWorkersLendTheirThreadsToAnActingKernel) {
  for (bool lend : {true, false}) {
    std::mutex mu;
    std::condition_variable cv;
    int started = 0;
    std::vector<int> pair_threads, join_threads;
    auto meet = [&](KernelContext& c) {
      std::unique_lock<std::mutex> lock(mu);
      pair_threads.push_back(c.threads);
      ++started;
      cv.notify_all();
      const int want = 2 * (c.iteration + 1);
      cv.wait_for(lock, std::chrono::seconds(5), [&] { return started >= want; });
      *c.output(0).as<float>() = *c.input(0).as<float>();
      return Status::Ok();
    };
    plan::Plan plan;
    auto add_task = [&](const std::string& name, plan::TaskKind kind, std::vector<int> inputs) {
      plan::Task* t = plan.add_tasks();
      t->set_id(plan.tasks_size() - 1);
      t->set_name(name);
      t->set_kind(kind);
      t->set_op_type(name);
      for (int producer : inputs) {
        t->add_inputs()->set_producer_task_id(producer);
        plan.mutable_tasks(producer)->mutable_registers(0)->add_consumer_task_ids(t->id());
      }
      if (kind == plan::SINK) return;
      AddScalarRegister(t, 1);
    };
    add_task("x", plan::SOURCE, {});
    add_task("left", plan::COMPUTE, {0});
    add_task("right", plan::COMPUTE, {0});
    add_task("join", plan::COMPUTE, {1, 2});
    add_task("output", plan::SINK, {3});
    RuntimeHooks hooks;
    hooks.make_kernel = [&](const plan::Task& t) -> StatusOr<KernelFn> {
      if (t.name() != "join") return KernelFn(meet);
      return KernelFn([&](KernelContext& c) {
        std::lock_guard<std::mutex> lock(mu);
        join_threads.push_back(c.threads);
        *c.output(0).as<float>() = *c.input(0).as<float>() + *c.input(1).as<float>();
        return Status::Ok();
      });
    };
    RuntimeOptions options;
    options.num_threads = 4;
    options.num_workers = 2;
    options.kernel_threads = 2;
    options.lend_idle_threads = lend;
    testing_support::FinishesWithin(std::chrono::seconds(60), "lending plan", [&] {
      auto runtime = Runtime::Create(plan, hooks, options);
      ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
      for (int i = 0; i < 10; ++i) {
        float in = static_cast<float>(i), out = 0;
        ASSERT_TRUE((*runtime)->Run({View(&in)}, {View(&out)}).ok());
        EXPECT_EQ(out, 2.0f * i);
      }
    });
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(pair_threads.size(), 20u);
    ASSERT_EQ(join_threads.size(), 10u);
    for (int i = 0; i < 10; ++i) {
      // Of each meeting pair the later one started while the other acted: its share only.
      const int low = std::min(pair_threads[2 * i], pair_threads[2 * i + 1]);
      EXPECT_EQ(low, lend ? 2 : 0) << "iteration " << i;
      // The join acts alone (left and right are done): both workers' shares.
      EXPECT_EQ(join_threads[i], lend ? 4 : 0) << "iteration " << i;
    }
  }
}

// CAF's worker loop looks up the logger's per-thread actor id around every resume (a shared
// spinlock and a hash lookup) whenever the thread has a logger, though this CAF writes no log
// lines; actor threads drop theirs, so a kernel (inside a handler) sees none.
TEST(Runtime, ActorThreadsRunWithoutCafLogger) {
  std::atomic<int> with_logger{0}, calls{0};
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  Port a = p.AddStage("probe", {x}, {kScalar}, [&](const StageArgs& args) {
    calls++;
    if (caf::logger::current_logger() != nullptr) with_logger++;
    *args.outputs[0].as<float>() = *args.inputs[0].as<float>();
    return Status::Ok();
  });
  p.SetOutputs({a});
  ASSERT_TRUE(p.Start().ok());
  float in = 1;
  std::vector<float> out(64);
  for (float& o : out) ASSERT_TRUE(p.Push({View(&in)}, {View(&o)}, nullptr).ok());
  p.Drain();
  EXPECT_EQ(calls.load(), 64);
  EXPECT_EQ(with_logger.load(), 0);
}

TEST(Runtime, InvalidPlansAreRejectedClearly) {
  plan::Plan plan;
  plan::Task* t = plan.add_tasks();
  t->set_id(0);
  t->set_name("orphan");
  t->set_kind(plan::COMPUTE);
  t->add_inputs()->set_producer_task_id(42);
  RuntimeHooks hooks;
  hooks.make_kernel = [](const plan::Task&) -> StatusOr<KernelFn> { return KernelFn([](KernelContext&) { return Status::Ok(); }); };
  auto runtime = Runtime::Create(plan, hooks);
  ASSERT_FALSE(runtime.ok());
  EXPECT_NE(runtime.status().message().find("main sink"), std::string::npos) << runtime.status().message();
}

}  // namespace
}  // namespace actorflow

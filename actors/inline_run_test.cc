// Synchronous calls run inline (RuntimeOptions::run_inline): the same results as the actors'
// run, on the caller's thread only when the runtime is idle, errors named as the actors name
// them, and plans that cannot run inline say why. Every wait is bounded (FinishesWithin).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/runtime.h"
#include "actors/runtime_testing.h"
#include "actors/trace_recorder.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace {

using testing_support::AddRegister;
using testing_support::AddTask;
using testing_support::FinishesWithin;

constexpr auto kLimit = std::chrono::seconds(60);

void Connect(plan::Plan& plan, plan::Task* consumer, int producer) {
  consumer->add_inputs()->set_producer_task_id(producer);
  plan.mutable_tasks(producer)->mutable_registers(0)->add_consumer_task_ids(consumer->id());
}

// x (4 floats) -> add (x + w, w a read-only variable) -> scale (2 * add) -> sink(scale, add):
// a diamond into the sink, a variable read in place and two kernels.
plan::Plan DiamondPlan() {
  plan::Plan plan;
  plan.set_job_name("diamond");
  AddRegister(AddTask(plan, "x", plan::SOURCE), 4, 2);
  plan::Task* w = AddTask(plan, "w", plan::VARIABLE);
  w->set_read_only(true);
  AddRegister(w, 4, 1);
  plan::Task* add = AddTask(plan, "add", plan::COMPUTE, "add");
  add->set_source_location("model.py:3");
  AddRegister(add, 4, 2);
  Connect(plan, add, 0);
  Connect(plan, add, 1);
  plan::Task* scale = AddTask(plan, "scale", plan::COMPUTE, "scale");
  AddRegister(scale, 4, 2);
  Connect(plan, scale, 2);
  plan::Task* sink = AddTask(plan, "sink", plan::SINK);
  Connect(plan, sink, 3);
  Connect(plan, sink, 2);
  return plan;
}

const TensorDesc kFour{{4}, DType::kFloat32};

struct Harness {
  float w[4] = {10, 20, 30, 40};
  std::mutex mu;
  std::vector<std::thread::id> kernel_threads;  // one per act of any kernel
  std::atomic<int> slow_us{0};                 // delay of every `add` act
  RuntimeHooks Hooks() {
    RuntimeHooks hooks;
    hooks.variable_buffer = [this](const plan::Task&) -> StatusOr<void*> { return static_cast<void*>(w); };
    hooks.make_kernel = [this](const plan::Task& t) -> StatusOr<KernelFn> {
      const bool add = t.op_type() == "add";
      return KernelFn([this, add](KernelContext& c) {
        {
          std::lock_guard<std::mutex> lock(mu);
          kernel_threads.push_back(std::this_thread::get_id());
        }
        const float* a = c.input(0).as<float>();
        float* out = c.output(0).as<float>();
        if (add && a[0] == 13) return InvalidArgument("x[0] may not be 13");
        if (add && slow_us.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(slow_us.load()));
        for (int i = 0; i < 4; ++i) out[i] = add ? a[i] + c.input(1).as<float>()[i] : 2 * a[i];
        return Status::Ok();
      });
    };
    return hooks;
  }
  std::unique_ptr<Runtime> Make(const plan::Plan& plan, bool run_inline, RuntimeObserver* observer = nullptr) {
    RuntimeOptions options;
    options.run_inline = run_inline;
    options.observer = observer;
    auto runtime = Runtime::Create(plan, Hooks(), options);
    EXPECT_TRUE(runtime.ok()) << runtime.status().ToString();
    return runtime.ok() ? std::move(runtime).value() : nullptr;
  }
  std::vector<std::thread::id> TakeThreads() {
    std::lock_guard<std::mutex> lock(mu);
    return std::move(kernel_threads);
  }
};

TEST(InlineRun, SameResultsAsTheActorsOnTheCallersThread) {
  FinishesWithin(kLimit, "SameResultsAsTheActorsOnTheCallersThread", [] {
    Harness inline_harness, actor_harness;
    auto inline_runtime = inline_harness.Make(DiamondPlan(), true);
    auto actor_runtime = actor_harness.Make(DiamondPlan(), false);
    ASSERT_TRUE(inline_runtime && actor_runtime);
    EXPECT_EQ(inline_runtime->inline_refusal(), "");
    EXPECT_EQ(actor_runtime->inline_refusal(), "RuntimeOptions::run_inline is off");
    for (int call = 0; call < 50; ++call) {
      float x[4] = {static_cast<float>(call) + 0.5f, 1.5f, -2, 1e-3f * call};
      float scaled[2][4], added[2][4];
      ASSERT_TRUE(inline_runtime->Run({{x, kFour}}, {{scaled[0], kFour}, {added[0], kFour}}).ok());
      ASSERT_TRUE(actor_runtime->Run({{x, kFour}}, {{scaled[1], kFour}, {added[1], kFour}}).ok());
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(added[0][i], x[i] + inline_harness.w[i]);
        EXPECT_EQ(scaled[0][i], 2 * added[0][i]);
        EXPECT_EQ(added[0][i], added[1][i]);
        EXPECT_EQ(scaled[0][i], scaled[1][i]);
      }
    }
    for (std::thread::id id : inline_harness.TakeThreads()) EXPECT_EQ(id, std::this_thread::get_id());
    for (std::thread::id id : actor_harness.TakeThreads()) EXPECT_NE(id, std::this_thread::get_id());
  });
}

TEST(InlineRun, KernelErrorNamesTheOpAndTheNextCallWorks) {
  FinishesWithin(kLimit, "KernelErrorNamesTheOpAndTheNextCallWorks", [] {
    Harness harness;
    auto runtime = harness.Make(DiamondPlan(), true);
    ASSERT_TRUE(runtime);
    float bad[4] = {13, 0, 0, 0}, good[4] = {1, 2, 3, 4}, scaled[4], added[4];
    Status failed = runtime->Run({{bad, kFour}}, {{scaled, kFour}, {added, kFour}});
    EXPECT_FALSE(failed.ok());
    EXPECT_NE(failed.message().find("op 'add' (add) at model.py:3, iteration 0"), std::string::npos)
        << failed.ToString();
    EXPECT_NE(failed.message().find("x[0] may not be 13"), std::string::npos) << failed.ToString();
    ASSERT_TRUE(runtime->Run({{good, kFour}}, {{scaled, kFour}, {added, kFour}}).ok());
    EXPECT_EQ(added[3], 44);
    EXPECT_EQ(scaled[3], 88);
  });
}

// Asynchronous pushes use the actors; a synchronous call while they are in flight does too, and
// completions keep iteration order.
TEST(InlineRun, OnlyAnIdleRuntimeRunsInline) {
  FinishesWithin(kLimit, "OnlyAnIdleRuntimeRunsInline", [] {
    Harness harness;
    auto runtime = harness.Make(DiamondPlan(), true);
    ASSERT_TRUE(runtime);
    harness.slow_us = 20000;
    std::mutex mu;
    std::vector<int64_t> completed;
    float x[3][4] = {{1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}}, scaled[3][4], added[3][4];
    for (int k = 0; k < 2; ++k)
      ASSERT_TRUE(runtime->Push({{x[k], kFour}}, {{scaled[k], kFour}, {added[k], kFour}},
                                [&](int64_t iteration, const Status& s) {
                                  EXPECT_TRUE(s.ok()) << s.ToString();
                                  std::lock_guard<std::mutex> lock(mu);
                                  completed.push_back(iteration);
                                }).ok());
    ASSERT_TRUE(runtime->Push({{x[2], kFour}}, {{scaled[2], kFour}, {added[2], kFour}},
                              [&](int64_t iteration, const Status& s) {
                                EXPECT_TRUE(s.ok()) << s.ToString();
                                std::lock_guard<std::mutex> lock(mu);
                                completed.push_back(iteration);
                              }, /*may_run_inline=*/true).ok());
    runtime->Drain();
    EXPECT_EQ(completed, (std::vector<int64_t>{0, 1, 2}));
    for (int k = 0; k < 3; ++k) EXPECT_EQ(added[k][0], x[k][0] + 10);
    for (std::thread::id id : harness.TakeThreads()) EXPECT_NE(id, std::this_thread::get_id());
    // Idle again: the next synchronous call runs here.
    harness.slow_us = 0;
    ASSERT_TRUE(runtime->Run({{x[0], kFour}}, {{scaled[0], kFour}, {added[0], kFour}}).ok());
    for (std::thread::id id : harness.TakeThreads()) EXPECT_EQ(id, std::this_thread::get_id());
  });
}

// The completion of an inline iteration runs on the caller, as a handler: a Push from it fails
// at once instead of waiting for the push lock its own call holds.
TEST(InlineRun, CompletionRunsAsAHandler) {
  FinishesWithin(kLimit, "CompletionRunsAsAHandler", [] {
    Harness harness;
    auto runtime = harness.Make(DiamondPlan(), true);
    ASSERT_TRUE(runtime);
    float x[4] = {1, 2, 3, 4}, scaled[4], added[4];
    Status nested = Status::Ok();
    bool called = false;
    ASSERT_TRUE(runtime->Push({{x, kFour}}, {{scaled, kFour}, {added, kFour}},
                              [&](int64_t, const Status& s) {
                                EXPECT_TRUE(s.ok());
                                called = true;
                                nested = runtime->Push({{x, kFour}}, {{scaled, kFour}, {added, kFour}}, nullptr).status();
                              }, /*may_run_inline=*/true).ok());
    EXPECT_TRUE(called);  // inline: before Push returned
    EXPECT_EQ(nested.code(), StatusCode::kFailedPrecondition) << nested.ToString();
  });
}

TEST(InlineRun, IneligiblePlansSayWhyAndUseTheActors) {
  FinishesWithin(kLimit, "IneligiblePlansSayWhyAndUseTheActors", [] {
    struct Case {
      const char* expected;
      std::function<void(plan::Plan&)> change;
    };
    const std::vector<Case> cases = {
        {"task 'scale' is asynchronous", [](plan::Plan& p) { p.mutable_tasks(3)->set_asynchronous(true); }},
        {"task 'watch' is a watch sink",
         [](plan::Plan& p) {
           plan::Task* watch = AddTask(p, "watch", plan::SINK);
           watch->set_sink_name("watch");
           Connect(p, watch, 2);
         }},
        {"task 'w' is a variable the plan writes", [](plan::Plan& p) { p.mutable_tasks(1)->set_read_only(false); }},
    };
    for (const Case& c : cases) {
      Harness harness;
      plan::Plan plan = DiamondPlan();
      c.change(plan);
      RuntimeOptions options;
      options.run_inline = true;
      RuntimeHooks hooks = harness.Hooks();
      hooks.sink_handler = [](const std::string&, int64_t, const std::vector<TensorView>&) { return Status::Ok(); };
      auto runtime = Runtime::Create(plan, hooks, options);
      ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
      EXPECT_NE(runtime.value()->inline_refusal().find(c.expected), std::string::npos)
          << runtime.value()->inline_refusal();
    }
    Harness harness;
    RuntimeOptions small;
    small.run_inline = true;
    small.inline_register_bytes = 100;
    auto limited = Runtime::Create(DiamondPlan(), harness.Hooks(), small);
    ASSERT_TRUE(limited.ok());
    EXPECT_NE(limited.value()->inline_refusal().find("more than the inline limit of 100"), std::string::npos)
        << limited.value()->inline_refusal();
    ChromeTraceRecorder recorder;
    auto traced = harness.Make(DiamondPlan(), true, &recorder);
    ASSERT_TRUE(traced);
    EXPECT_EQ(traced->inline_refusal(), "an observer records the actors");
    float x[4] = {1, 2, 3, 4}, scaled[4], added[4];
    harness.TakeThreads();
    ASSERT_TRUE(traced->Run({{x, kFour}}, {{scaled, kFour}, {added, kFour}}).ok());
    EXPECT_EQ(scaled[0], 22);
    for (std::thread::id id : harness.TakeThreads()) EXPECT_NE(id, std::this_thread::get_id());
  });
}

}  // namespace
}  // namespace actorflow

// The embedding API's boundary: arguments validated before they reach the runtime, stages and
// completions that throw or call back into the pipeline, and Shutdown's bounded fallback.
// Every wait is bounded (FinishesWithin, ctest's TIMEOUT).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "actorflow/pipeline.h"
#include "actors/runtime_testing.h"

namespace actorflow {
namespace {

using testing_support::FinishesWithin;

const TensorDesc kScalar{{1}, DType::kFloat32};
TensorView View(float* x) { return TensorView{x, kScalar}; }

StageFn AddOne() {
  return [](const StageArgs& a) {
    *a.outputs[0].as<float>() = *a.inputs[0].as<float>() + 1;
    return Status::Ok();
  };
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A completion that pushes more iterations than the registers hold: before, the pushes waited
// for registers only the blocked actor thread could free (a hang with 1 or 2 workers).
TEST(Pipeline, PushFromCompletionFailsFast) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    Pipeline p;
    Port x = p.AddInput("x", kScalar, 1);
    p.SetOutputs({p.AddStage("add", {x}, {kScalar}, AddOne(), 1)});
    PipelineOptions options;
    options.num_threads = threads;
    ASSERT_TRUE(p.Start(options).ok());
    float in = 1, out = 0;
    std::vector<float> more_out(8);
    std::vector<Status> inner;
    Status inner_run;
    FinishesWithin(std::chrono::seconds(20), "Push from a completion", [&] {
      auto pushed = p.Push({View(&in)}, {View(&out)}, [&](int64_t, const Status& status) {
        EXPECT_TRUE(status.ok()) << status.ToString();
        for (float& o : more_out) {
          auto again = p.Push({View(&in)}, {View(&o)}, nullptr);
          inner.push_back(again.ok() ? Status::Ok() : again.status());
        }
        inner_run = p.Run({View(&in)}, {View(&out)});
        p.Drain();  // returns at once here instead of waiting for itself
      });
      ASSERT_TRUE(pushed.ok());
      p.Drain();
    });
    ASSERT_EQ(inner.size(), more_out.size());
    for (const Status& s : inner) {
      EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
      EXPECT_TRUE(Contains(s.message(), "Runtime::Push called from a completion")) << s.message();
    }
    EXPECT_EQ(inner_run.code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(inner_run.message(), "Runtime::Run")) << inner_run.message();
    EXPECT_EQ(out, 2.0f);
    // The pipeline still works from an ordinary thread.
    ASSERT_TRUE(p.Run({View(&in)}, {View(&out)}).ok());
  }
}

TEST(Pipeline, PushFromAStageFailsThatStagesIteration) {
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  Status inner;
  float in = 1, scratch = 0;
  p.SetOutputs({p.AddStage("reentrant", {x}, {kScalar}, [&](const StageArgs& a) {
    auto pushed = p.Push({View(&in)}, {View(&scratch)}, nullptr);
    inner = pushed.ok() ? Status::Ok() : pushed.status();
    *a.outputs[0].as<float>() = 0;
    return inner;
  })});
  ASSERT_TRUE(p.Start().ok());
  float out = 0;
  FinishesWithin(std::chrono::seconds(20), "Push from a stage", [&] {
    Status s = p.Run({View(&in)}, {View(&out)});
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.message(), "op 'reentrant'")) << s.message();
  });
  EXPECT_EQ(inner.code(), StatusCode::kFailedPrecondition);
}

TEST(Pipeline, ThrowingStageFailsOnlyItsIteration) {
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  p.SetOutputs({p.AddStage("picky", {x}, {kScalar}, [](const StageArgs& a) {
    if (a.iteration == 1) throw std::runtime_error("odd input");
    if (a.iteration == 2) throw 42;
    *a.outputs[0].as<float>() = *a.inputs[0].as<float>();
    return Status::Ok();
  })});
  ASSERT_TRUE(p.Start().ok());
  FinishesWithin(std::chrono::seconds(20), "throwing stage", [&] {
    for (int i = 0; i < 4; ++i) {
      float in = static_cast<float>(i), out = -1;
      Status s = p.Run({View(&in)}, {View(&out)});
      if (i == 1) {
        ASSERT_FALSE(s.ok());
        EXPECT_TRUE(Contains(s.message(), "op 'picky'")) << s.message();
        EXPECT_TRUE(Contains(s.message(), "odd input")) << s.message();
      } else if (i == 2) {
        ASSERT_FALSE(s.ok());
        EXPECT_TRUE(Contains(s.message(), "unknown type")) << s.message();
      } else {
        EXPECT_TRUE(s.ok()) << s.ToString();
        EXPECT_EQ(out, static_cast<float>(i));
      }
    }
  });
}

TEST(Pipeline, ThrowingCompletionDoesNotWedgeThePipeline) {
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  p.SetOutputs({p.AddStage("add", {x}, {kScalar}, AddOne())});
  ASSERT_TRUE(p.Start().ok());
  float in = 1;
  std::vector<float> out(10, 0);
  std::atomic<int> completed{0};
  FinishesWithin(std::chrono::seconds(20), "throwing completions", [&] {
    for (float& o : out)
      ASSERT_TRUE(p.Push({View(&in)}, {View(&o)}, [&](int64_t, const Status&) {
                     ++completed;
                     throw std::runtime_error("completion failed");
                   }).ok());
    p.Drain();
    float last = 0;
    EXPECT_TRUE(p.Run({View(&in)}, {View(&last)}).ok());
    EXPECT_EQ(last, 2.0f);
  });
  EXPECT_EQ(completed.load(), 10);
  for (float o : out) EXPECT_EQ(o, 2.0f);
}

TEST(Pipeline, BadDescriptionsAreRejectedByStart) {
  {
    Pipeline p;
    p.SetOutputs({p.AddInput("x", TensorDesc{{4, -1}, DType::kFloat32})});
    Status s = p.Start();
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.message(), "AddInput('x')")) << s.message();
    EXPECT_TRUE(Contains(s.message(), "dimension 1 of shape (4, -1) is negative")) << s.message();
  }
  {
    Pipeline p;
    Port x = p.AddInput("x", kScalar);
    p.SetOutputs({p.AddStage("s", {x}, {TensorDesc{{-3}, DType::kFloat32}}, AddOne())});
    Status s = p.Start();
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.message(), "AddStage('s') output 0")) << s.message();
  }
  {
    Pipeline p;
    Port x = p.AddInput("x", TensorDesc{{1}, static_cast<DType>(99)});
    p.SetOutputs({x});
    Status s = p.Start();
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.message(), "unknown dtype 99")) << s.message();
  }
  {
    Pipeline p;
    Port x = p.AddInput("x", kScalar, 0);
    p.SetOutputs({p.AddStage("s", {x}, {kScalar}, StageFn())});
    Status s = p.Start();
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.message(), "register_num must be >= 1, got 0")) << s.message();
  }
  {
    Pipeline p;
    Port x = p.AddInput("x", kScalar);
    p.SetOutputs({p.AddStage("s", {x}, {kScalar}, StageFn())});
    Status s = p.Start();
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(Contains(s.message(), "stage function is empty")) << s.message();
  }
}

TEST(Pipeline, BadBuffersAreRejectedByPushAndNextCallWorks) {
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  p.SetOutputs({p.AddStage("add", {x}, {kScalar}, AddOne())});
  ASSERT_TRUE(p.Start().ok());
  float in = 1, out = 0;
  Status s = p.Run({View(&in)}, {TensorView{nullptr, kScalar}});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "output 0: the buffer is null")) << s.message();
  s = p.Run({TensorView{nullptr, kScalar}}, {View(&out)});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "input 0 has no data")) << s.message();
  int32_t wrong = 0;
  s = p.Run({View(&in)}, {TensorView{&wrong, {{1}, DType::kInt32}}});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "expected float32(1,), got int32(1,)")) << s.message();
  ASSERT_TRUE(p.Run({View(&in)}, {View(&out)}).ok());
  EXPECT_EQ(out, 2.0f);
}

TEST(Pipeline, ShutdownIsOkIdempotentAndRefusesLaterPushes) {
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  p.SetOutputs({p.AddStage("add", {x}, {kScalar}, AddOne())});
  ASSERT_TRUE(p.Start().ok());
  float in = 1, out = 0;
  ASSERT_TRUE(p.Run({View(&in)}, {View(&out)}).ok());
  const int64_t forced = Runtime::forced_shutdown_count();
  EXPECT_TRUE(p.Shutdown().ok());
  EXPECT_TRUE(p.Shutdown().ok());
  Status s = p.Run({View(&in)}, {View(&out)});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.message(), "shut down")) << s.message();
  EXPECT_EQ(Runtime::forced_shutdown_count(), forced);
}

// An iteration that never completes: Shutdown gives up after shutdown_timeout, says so (Status,
// counter, hook) and fails the stuck iteration's completion instead of hanging or being silent.
TEST(Pipeline, ShutdownTimeoutIsAnError) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  Pipeline p;
  Port x = p.AddInput("x", kScalar);
  p.SetOutputs({p.AddStage("stuck", {x}, {kScalar}, [released](const StageArgs& a) {
    released.wait();
    *a.outputs[0].as<float>() = 0;
    return Status::Ok();
  })});
  PipelineOptions options;
  options.shutdown_timeout = std::chrono::milliseconds(200);
  Status heard;
  options.on_forced_shutdown = [&](const Status& s) {
    heard = s;
    release.set_value();  // let the stage return so the actors can be stopped
  };
  ASSERT_TRUE(p.Start(options).ok());
  float in = 1, out = 0;
  Status completion;
  std::atomic<bool> completed{false};
  ASSERT_TRUE(p.Push({View(&in)}, {View(&out)}, [&](int64_t, const Status& s) {
                 completion = s;
                 completed = true;
               }).ok());
  const int64_t forced = Runtime::forced_shutdown_count();
  Status s;
  FinishesWithin(std::chrono::seconds(20), "Shutdown with a stuck stage", [&] { s = p.Shutdown(); });
  testing_support::ExpectedForcedShutdowns() += 1;
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "did not shut down within 200 ms")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "1 iterations still in flight")) << s.message();
  EXPECT_EQ(heard.message(), s.message());
  EXPECT_EQ(Runtime::forced_shutdown_count(), forced + 1);
  ASSERT_TRUE(completed.load());
  EXPECT_FALSE(completion.ok());
  EXPECT_TRUE(Contains(completion.message(), "iteration 0")) << completion.message();
  EXPECT_EQ(p.Shutdown().message(), s.message());  // repeated calls keep the verdict
}

}  // namespace
}  // namespace actorflow

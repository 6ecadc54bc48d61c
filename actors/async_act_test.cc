// The asynchronous act (actors/kernel.h): kernels that launch work and complete it later on
// another thread, as GPU streams, network sends and collectives will. Every wait is bounded
// (FinishesWithin, ctest's TIMEOUT).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "actorflow/pipeline.h"
#include "actors/runtime.h"
#include "actors/runtime_testing.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace {

using testing_support::FinishesWithin;
using std::chrono::milliseconds;

const TensorDesc kScalar{{1}, DType::kFloat32};
TensorView View(float* x) { return TensorView{x, kScalar}; }

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs work after a delay on its own threads, in due-time order (so later launches with
// shorter delays complete first). Joins its threads on destruction, dropping work not yet due.
class DelayedWorkers {
 public:
  explicit DelayedWorkers(int threads = 2) {
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { Loop(); });
  }
  ~DelayedWorkers() { Stop(); }
  void After(milliseconds delay, std::function<void()> work) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({std::chrono::steady_clock::now() + delay, std::move(work)});
    std::sort(queue_.begin(), queue_.end(), [](const Item& a, const Item& b) { return a.due < b.due; });
    cv_.notify_all();
  }
  // Joins the threads; work not started is dropped (destroying what it captured).
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
    std::deque<Item> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dropped.swap(queue_);
    }
  }

 private:
  struct Item {
    std::chrono::steady_clock::time_point due;
    std::function<void()> work;
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      if (queue_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const auto due = queue_.front().due;  // a copy: the front may go while we wait
      if (cv_.wait_until(lock, due) != std::cv_status::timeout && !stopping_) continue;
      if (stopping_) break;
      if (queue_.empty() || queue_.front().due > std::chrono::steady_clock::now()) continue;
      Item item = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      item.work();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// Tracks how many acts of a stage are in flight (launched, not completed) at once.
struct InFlight {
  std::atomic<int> now{0}, most{0};
  void Enter() {
    int n = now.fetch_add(1) + 1;
    int prev = most.load();
    while (n > prev && !most.compare_exchange_weak(prev, n)) {}
  }
  void Leave() { now.fetch_sub(1); }
};

// out = in + 1, computed on a worker after `delay(iteration)`.
AsyncStageFn AddOneLater(DelayedWorkers* workers, InFlight* in_flight, std::function<milliseconds(int64_t)> delay) {
  return [=](const StageArgs& a, KernelCompletion done) {
    const float* in = a.inputs[0].as<float>();
    float* out = a.outputs[0].as<float>();
    in_flight->Enter();
    workers->After(delay(a.iteration), [=]() mutable {
      *out = *in + 1;
      in_flight->Leave();
      done.Complete();
    });
    return Status::Ok();
  };
}

TEST(AsyncAct, CompletionsOutOfOrderStillDeliverInIterationOrder) {
  FinishesWithin(std::chrono::seconds(60), "out-of-order completions", [] {
    DelayedWorkers workers(3);
    InFlight in_flight;
    Pipeline p;
    Port x = p.AddInput("x", kScalar, 4);
    // Iteration i takes 4 - i % 4 ms: of four launches in flight, the last completes first.
    Port a = p.AddAsyncStage("a", {x}, {kScalar},
                             AddOneLater(&workers, &in_flight, [](int64_t i) { return milliseconds(4 - i % 4); }), 4);
    Port b = p.AddStage("b", {a}, {kScalar}, [](const StageArgs& s) {
      *s.outputs[0].as<float>() = *s.inputs[0].as<float>() * 10;
      return Status::Ok();
    });
    p.SetOutputs({b});
    ASSERT_TRUE(p.Start().ok());
    constexpr int kN = 200;
    std::vector<float> in(kN), out(kN, -1);
    std::vector<int64_t> order;
    std::mutex mu;
    for (int i = 0; i < kN; ++i) {
      in[i] = static_cast<float>(i);
      ASSERT_TRUE(p.Push({View(&in[i])}, {View(&out[i])}, [&](int64_t it, const Status& s) {
                     EXPECT_TRUE(s.ok()) << s.ToString();
                     std::lock_guard<std::mutex> lock(mu);
                     order.push_back(it);
                   }).ok());
    }
    p.Drain();
    ASSERT_EQ(order.size(), static_cast<size_t>(kN));
    for (int i = 0; i < kN; ++i) {
      EXPECT_EQ(order[i], i);
      EXPECT_EQ(out[i], (i + 1) * 10.0f) << "iteration " << i;
    }
    // Several launches overlapped (the point of the asynchronous act), never more than the
    // stage's registers.
    EXPECT_GT(in_flight.most.load(), 1);
    EXPECT_LE(in_flight.most.load(), 4);
    EXPECT_TRUE(p.Shutdown().ok());
  });
}

// The registers bound the launches in flight: with register_num = k on the asynchronous
// stage, at most k of its acts are outstanding, whatever the caller pushes.
TEST(AsyncAct, BackpressureBoundsLaunchesInFlight) {
  for (int k : {1, 2, 3}) {
    FinishesWithin(std::chrono::seconds(60), "backpressure on launches", [k] {
      DelayedWorkers workers(4);
      InFlight in_flight;
      Pipeline p;
      Port x = p.AddInput("x", kScalar, 8);
      Port a = p.AddAsyncStage("a", {x}, {kScalar}, AddOneLater(&workers, &in_flight, [](int64_t) { return milliseconds(2); }),
                               k);
      p.SetOutputs({a});
      ASSERT_TRUE(p.Start().ok());
      constexpr int kN = 60;
      std::vector<float> in(kN), out(kN, -1);
      for (int i = 0; i < kN; ++i) {
        in[i] = static_cast<float>(i);
        ASSERT_TRUE(p.Push({View(&in[i])}, {View(&out[i])}, nullptr).ok());
      }
      p.Drain();
      for (int i = 0; i < kN; ++i) EXPECT_EQ(out[i], i + 1.0f);
      EXPECT_LE(in_flight.most.load(), k) << "register_num " << k;
      EXPECT_EQ(in_flight.most.load(), k) << "register_num " << k << ": the stage did not fill its registers";
    });
  }
}

TEST(AsyncAct, ErrorInCompletionFailsOnlyItsIteration) {
  FinishesWithin(std::chrono::seconds(60), "failing completions", [] {
    DelayedWorkers workers(2);
    Pipeline p;
    Port x = p.AddInput("x", kScalar);
    Port a = p.AddAsyncStage("remote", {x}, {kScalar}, [&](const StageArgs& s, KernelCompletion done) {
      const float* in = s.inputs[0].as<float>();
      float* out = s.outputs[0].as<float>();
      const int64_t iteration = s.iteration;
      workers.After(milliseconds(1), [=]() mutable {
        *out = *in + 1;
        done.Complete(iteration % 3 == 1 ? Internal("the send to machine 1 failed") : Status::Ok());
      });
      return Status::Ok();
    });
    p.SetOutputs({a});
    ASSERT_TRUE(p.Start().ok());
    constexpr int kN = 12;
    std::vector<float> in(kN), out(kN, -1);
    std::vector<Status> results(kN);
    for (int i = 0; i < kN; ++i) {
      in[i] = static_cast<float>(i);
      ASSERT_TRUE(p.Push({View(&in[i])}, {View(&out[i])}, [&](int64_t it, const Status& s) { results[it] = s; }).ok());
    }
    p.Drain();
    for (int i = 0; i < kN; ++i) {
      if (i % 3 == 1) {
        ASSERT_FALSE(results[i].ok()) << "iteration " << i;
        EXPECT_TRUE(Contains(results[i].message(), "the send to machine 1 failed")) << results[i].message();
        EXPECT_TRUE(Contains(results[i].message(), "op 'remote'")) << results[i].message();
        EXPECT_TRUE(Contains(results[i].message(), "iteration " + std::to_string(i))) << results[i].message();
      } else {
        EXPECT_TRUE(results[i].ok()) << "iteration " << i << ": " << results[i].message();
        EXPECT_EQ(out[i], i + 1.0f);
      }
    }
  });
}

// A launch that fails after handing its handle to work still holds the registers until the
// work completes (the work may be writing them), and fails its iteration with its own error.
TEST(AsyncAct, FailedLaunchWaitsForItsWorkAndFailsItsIteration) {
  FinishesWithin(std::chrono::seconds(60), "failed launch", [] {
    DelayedWorkers workers(1);
    std::atomic<bool> work_done{false};
    std::atomic<bool> released_early{false};
    Pipeline p;
    Port x = p.AddInput("x", kScalar, 1);
    Port a = p.AddAsyncStage("launch", {x}, {kScalar}, [&](const StageArgs& s, KernelCompletion done) {
      float* out = s.outputs[0].as<float>();
      workers.After(milliseconds(20), [&, out, done]() mutable {
        *out = 5;
        work_done = true;
        done.Complete();
      });
      return Internal("the launch half failed");
    }, 1);
    Port b = p.AddStage("after", {a}, {kScalar}, [&](const StageArgs& s) {
      *s.outputs[0].as<float>() = *s.inputs[0].as<float>();
      return Status::Ok();
    });
    p.SetOutputs({b});
    ASSERT_TRUE(p.Start().ok());
    float in = 1, out = -1;
    Status status = p.Run({View(&in)}, {View(&out)});
    if (!work_done.load()) released_early = true;
    EXPECT_FALSE(released_early.load()) << "the iteration finished before the launched work completed";
    ASSERT_FALSE(status.ok());
    EXPECT_TRUE(Contains(status.message(), "the launch half failed")) << status.message();
    EXPECT_TRUE(Contains(status.message(), "op 'launch'")) << status.message();
  });
}

TEST(AsyncAct, CompletingInsideTheCallAndNotTakingTheHandleBothWork) {
  FinishesWithin(std::chrono::seconds(60), "inline completion", [] {
    Pipeline p;
    Port x = p.AddInput("x", kScalar);
    Port a = p.AddAsyncStage("inline", {x}, {kScalar}, [](const StageArgs& s, KernelCompletion done) {
      *s.outputs[0].as<float>() = *s.inputs[0].as<float>() + 1;
      EXPECT_TRUE(done.Complete().ok());
      return Status::Ok();
    });
    p.SetOutputs({a});
    ASSERT_TRUE(p.Start().ok());
    for (int i = 0; i < 20; ++i) {
      float in = static_cast<float>(i), out = -1;
      ASSERT_TRUE(p.Run({View(&in)}, {View(&out)}).ok());
      EXPECT_EQ(out, i + 1.0f);
    }
  });
}

TEST(AsyncAct, CompletionCalledTwiceIsRefusedAndChangesNothing) {
  FinishesWithin(std::chrono::seconds(60), "double completion", [] {
    std::vector<Status> second;
    std::mutex mu;
    Pipeline p;
    Port x = p.AddInput("x", kScalar);
    Port a = p.AddAsyncStage("twice", {x}, {kScalar}, [&](const StageArgs& s, KernelCompletion done) {
      *s.outputs[0].as<float>() = *s.inputs[0].as<float>() + 1;
      KernelCompletion copy = done;  // copies complete the same act
      EXPECT_TRUE(done.Complete().ok());
      Status again = copy.Complete(Internal("late error"));
      std::lock_guard<std::mutex> lock(mu);
      second.push_back(again);
      return Status::Ok();
    });
    p.SetOutputs({a});
    ASSERT_TRUE(p.Start().ok());
    for (int i = 0; i < 5; ++i) {
      float in = static_cast<float>(i), out = -1;
      Status status = p.Run({View(&in)}, {View(&out)});
      EXPECT_TRUE(status.ok()) << "the refused second call must not fail the iteration: " << status.message();
      EXPECT_EQ(out, i + 1.0f);
    }
    ASSERT_EQ(second.size(), 5u);
    for (const Status& s : second) {
      EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
      EXPECT_TRUE(Contains(s.message(), "called more than once")) << s.message();
      EXPECT_TRUE(Contains(s.message(), "op 'twice'")) << s.message();
    }
    KernelCompletion empty;
    EXPECT_EQ(empty.Complete().code(), StatusCode::kFailedPrecondition);
  });
}

// A handle dropped without being called (a queue that discards work) fails its iteration with
// a clear error instead of holding the registers forever.
TEST(AsyncAct, DroppedCompletionFailsItsIterationAndTheNextWorks) {
  FinishesWithin(std::chrono::seconds(60), "dropped completion", [] {
    Pipeline p;
    Port x = p.AddInput("x", kScalar);
    Port a = p.AddAsyncStage("lossy", {x}, {kScalar}, [](const StageArgs& s, KernelCompletion done) {
      *s.outputs[0].as<float>() = *s.inputs[0].as<float>() + 1;
      if (s.iteration == 1) {
        std::thread([lost = std::move(done)] {}).join();  // dropped on another thread
        return Status::Ok();
      }
      return done.Complete();
    });
    p.SetOutputs({a});
    ASSERT_TRUE(p.Start().ok());
    for (int i = 0; i < 4; ++i) {
      float in = static_cast<float>(i), out = -1;
      Status status = p.Run({View(&in)}, {View(&out)});
      if (i == 1) {
        ASSERT_FALSE(status.ok());
        EXPECT_TRUE(Contains(status.message(), "destroyed without being called")) << status.message();
        EXPECT_TRUE(Contains(status.message(), "op 'lossy'")) << status.message();
      } else {
        EXPECT_TRUE(status.ok()) << status.message();
        EXPECT_EQ(out, i + 1.0f);
      }
    }
  });
}

// Shutdown with launches outstanding waits for their completions (no hang, nothing freed
// under the workers' feet: ASan/TSan builds check the memory).
TEST(AsyncAct, ShutdownWhileCompletionsAreOutstanding) {
  FinishesWithin(std::chrono::seconds(60), "shutdown with outstanding completions", [] {
    DelayedWorkers workers(2);
    InFlight in_flight;
    std::atomic<int> completed{0};
    constexpr int kN = 16;
    std::vector<float> in(kN, 1), out(kN, -1);
    {
      Pipeline p;
      Port x = p.AddInput("x", kScalar, 3);
      Port a = p.AddAsyncStage("slow", {x}, {kScalar},
                               AddOneLater(&workers, &in_flight, [](int64_t) { return milliseconds(5); }), 3);
      p.SetOutputs({a});
      ASSERT_TRUE(p.Start().ok());
      for (int i = 0; i < kN; ++i)
        ASSERT_TRUE(p.Push({View(&in[i])}, {View(&out[i])}, [&](int64_t, const Status& s) {
                       EXPECT_TRUE(s.ok()) << s.message();
                       completed++;
                     }).ok());
      // The last launches need 5 ms each from their start, which came after their Push.
      EXPECT_LT(completed.load(), kN) << "nothing was outstanding: the test checks nothing";
      EXPECT_TRUE(p.Shutdown().ok());
      EXPECT_EQ(completed.load(), kN);
    }  // the pipeline (and its registers) are gone
    workers.Stop();
    for (int i = 0; i < kN; ++i) EXPECT_EQ(out[i], 2.0f);
  });
}

// A completion that never comes: Shutdown's timeout fires with an error naming the act, and a
// handle used after the runtime is gone is refused; the registers it points at stay valid.
TEST(AsyncAct, CompletionNeverCalledIsNamedAtShutdownAndRefusedAfter) {
  testing_support::ExpectedForcedShutdowns() += 1;
  FinishesWithin(std::chrono::seconds(60), "completion never called", [] {
    KernelCompletion kept;
    float* kept_output = nullptr;
    std::mutex mu;
    std::condition_variable launched;
    Status status;
    {
      PipelineOptions options;
      options.shutdown_timeout = milliseconds(200);
      Pipeline p;
      Port x = p.AddInput("x", kScalar);
      Port a = p.AddAsyncStage("forgetful", {x}, {kScalar}, [&](const StageArgs& s, KernelCompletion done) {
        std::lock_guard<std::mutex> lock(mu);
        kept = done;  // held, never called while the runtime lives
        kept_output = s.outputs[0].as<float>();
        launched.notify_all();
        return Status::Ok();
      });
      p.SetOutputs({a});
      ASSERT_TRUE(p.Start(options).ok());
      float in = 1, out = -1;
      Status result;
      ASSERT_TRUE(p.Push({View(&in)}, {View(&out)}, [&](int64_t, const Status& s) { result = s; }).ok());
      {
        // The act must be launched before the shutdown starts (a slow sanitizer build could
        // otherwise time out before the kernel ran, and there would be nothing outstanding).
        std::unique_lock<std::mutex> lock(mu);
        ASSERT_TRUE(launched.wait_for(lock, std::chrono::seconds(20), [&] { return kept_output != nullptr; }));
      }
      status = p.Shutdown();
      EXPECT_FALSE(result.ok()) << "the abandoned iteration's caller must hear of it";
    }
    ASSERT_FALSE(status.ok());
    EXPECT_TRUE(Contains(status.message(), "completions never called: op 'forgetful'")) << status.message();
    EXPECT_TRUE(Contains(status.message(), "iteration 0")) << status.message();
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_NE(kept_output, nullptr);
    *kept_output = 3;  // the register outlives the runtime while a handle exists (ASan checks)
    Status late = kept.Complete();
    EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(late.message(), "after its runtime shut down")) << late.message();
  });
}

// Only asynchronous tasks get a handle: a synchronous kernel that asks for one fails its
// iteration (nothing would hold its registers).
TEST(AsyncAct, SynchronousKernelTakingACompletionFailsItsIteration) {
  KernelCompletion taken;
  // A synchronous stage cannot reach the context; build the plan's kernel directly.
  plan::Plan plan;
  plan.set_job_name("sync-take");
  for (int id = 0; id < 3; ++id) {
    plan::Task* t = plan.add_tasks();
    t->set_id(id);
    t->set_name(id == 0 ? "x" : id == 1 ? "grabby" : "out");
    t->set_kind(id == 0 ? plan::SOURCE : id == 1 ? plan::COMPUTE : plan::SINK);
    if (id < 2) {
      plan::RegisterDesc* r = t->add_registers();
      r->set_register_num(2);
      r->add_consumer_task_ids(id + 1);
      plan::BlobDesc* b = r->add_blobs();
      b->add_shape(1);
      b->set_dtype(plan::DT_FLOAT32);
    }
    if (id > 0) t->add_inputs()->set_producer_task_id(id - 1);
  }
  RuntimeHooks hooks;
  hooks.make_kernel = [&](const plan::Task&) -> StatusOr<KernelFn> {
    return KernelFn([&](KernelContext& ctx) {
      taken = ctx.TakeCompletion();
      return Status::Ok();
    });
  };
  auto runtime = Runtime::Create(plan, hooks);
  ASSERT_TRUE(runtime.ok()) << runtime.status().message();
  float in = 1, out = -1;
  Status status = runtime.value()->Run({View(&in)}, {View(&out)});
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "its task is synchronous")) << status.message();
  EXPECT_TRUE(Contains(status.message(), "op 'grabby'")) << status.message();
  EXPECT_FALSE(taken.valid());
}

TEST(AsyncAct, OnlyComputeTasksMayBeAsynchronous) {
  plan::Plan plan;
  plan.set_job_name("async-sink");
  plan::Task* source = plan.add_tasks();
  source->set_id(0);
  source->set_name("x");
  source->set_kind(plan::SOURCE);
  plan::RegisterDesc* r = source->add_registers();
  r->set_register_num(1);
  r->add_blobs()->add_shape(1);
  r->mutable_blobs(0)->set_dtype(plan::DT_FLOAT32);
  plan::Task* sink = plan.add_tasks();
  sink->set_id(1);
  sink->set_name("out");
  sink->set_kind(plan::SINK);
  sink->set_asynchronous(true);
  sink->add_inputs()->set_producer_task_id(0);
  auto runtime = Runtime::Create(plan, RuntimeHooks{});
  ASSERT_FALSE(runtime.ok());
  EXPECT_TRUE(Contains(runtime.status().message(), "task 'out' is asynchronous, but only compute tasks can be"))
      << runtime.status().message();
}

}  // namespace
}  // namespace actorflow

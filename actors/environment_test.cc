#include "actors/environment.h"

#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/proto/plan.pb.h"
#include "actors/runtime.h"
#include "actors/runtime_testing.h"

namespace actorflow {
namespace {

// Appends task `name` (op type `name` too) on CPU device `device`, reading register 0 of each
// of `inputs`; unless a sink, with one register of one float and `register_num` slots.
void AddTask(plan::Plan& plan, const std::string& name, plan::TaskKind kind, int device,
             const std::vector<int>& inputs, int register_num) {
  plan::Task* t = testing_support::AddTask(plan, name, kind, name);
  t->set_device_type("cpu");
  t->set_device_id(device);
  for (int producer : inputs) {
    t->add_inputs()->set_producer_task_id(producer);
    plan.mutable_tasks(producer)->mutable_registers(0)->add_consumer_task_ids(t->id());
  }
  if (kind != plan::SINK) testing_support::AddRegister(t, 1, register_num);
}

// One producer read by two kernels (two devices' first kernels): the producer's worker queues
// both; the second worker is asleep. The scheduler must hand the second kernel to the sleeper
// at once. Its periodic steal is set to 10 minutes here, so the two kernels, each waiting for
// the other to start, meet only through that hand-off (CAF's own policy leaves the second one
// queued behind the first: they never meet, each gives up after its 5 s wait).
TEST(Environment, ASleepingWorkerIsGivenAJobQueuedBehindAnother) {
  EnvironmentOptions environment_options;
  environment_options.num_threads = 2;
  environment_options.num_workers = 2;
  environment_options.kernel_threads = 1;
  environment_options.configure_system = [](caf::actor_system_config& config) {
    config.set("work-stealing.relaxed-sleep-duration", caf::timespan{std::chrono::minutes(10)});
    config.set("work-stealing.aggressive-poll-attempts", static_cast<size_t>(100));
  };
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  std::vector<bool> met;
  auto meet = [&](KernelContext& c) {
    std::unique_lock<std::mutex> lock(mu);
    ++started;
    cv.notify_all();
    const int want = 2 * static_cast<int>(c.iteration + 1);
    met.push_back(cv.wait_for(lock, std::chrono::seconds(5), [&] { return started >= want; }));
    *c.output(0).as<float>() = *c.input(0).as<float>();
    return Status::Ok();
  };
  plan::Plan plan;
  AddTask(plan, "x", plan::SOURCE, 0, {}, 1);
  AddTask(plan, "left", plan::COMPUTE, 0, {0}, 1);
  AddTask(plan, "right", plan::COMPUTE, 1, {0}, 1);
  AddTask(plan, "output", plan::SINK, 0, {1, 2}, 1);
  RuntimeHooks hooks;
  hooks.make_kernel = [&](const plan::Task&) -> StatusOr<KernelFn> { return KernelFn(meet); };
  RuntimeOptions options;
  options.kernel_threads = 1;
  testing_support::FinishesWithin(std::chrono::seconds(90), "fan-out plan", [&] {
    auto environment = ActorEnvironment::Create(environment_options);
    ASSERT_TRUE(environment.ok()) << environment.status().ToString();
    auto runtime = Runtime::Create(plan, hooks, options, *environment);
    ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
    for (int i = 0; i < 4; ++i) {
      // Well past the workers' polling: both are asleep when the call comes.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      float in = static_cast<float>(i), left = 0, right = 0;
      ASSERT_TRUE((*runtime)
                      ->Run({{&in, {{1}, DType::kFloat32}}},
                            {{&left, {{1}, DType::kFloat32}}, {&right, {{1}, DType::kFloat32}}})
                      .ok());
      EXPECT_EQ(left, in);
      EXPECT_EQ(right, in);
    }
    ASSERT_TRUE((*runtime)->Shutdown().ok());
  });
  ASSERT_EQ(met.size(), 8u);
  for (size_t k = 0; k < met.size(); ++k) EXPECT_TRUE(met[k]) << "act " << k << " waited 5 s for the other kernel";
}

// A job an act made runnable goes to its worker's `next` slot, which other workers leave to the
// owner; but not forever: here the owner stays inside one actor's long acts (`first` has three
// iterations in its mailbox and handles them in one go), and the job in its slot (`second`,
// made runnable by the first act) must be taken by the other worker, or `first`'s second act,
// which waits for `second` to start, gives up after 5 s.
TEST(Environment, TheJobAWorkerRunsNextIsTakenWhileItsOwnerIsInALongAct) {
  EnvironmentOptions environment_options;
  environment_options.num_threads = 2;
  environment_options.num_workers = 2;
  environment_options.kernel_threads = 1;
  std::mutex mu;
  std::condition_variable cv;
  int second_started = 0;
  std::vector<bool> met;
  auto first = [&](KernelContext& c) {
    // The first act outlasts the three pushes, so the later iterations wait in the mailbox.
    if (c.iteration == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::unique_lock<std::mutex> lock(mu);
    if (c.iteration > 0)
      met.push_back(cv.wait_for(lock, std::chrono::seconds(5), [&] { return second_started >= c.iteration; }));
    *c.output(0).as<float>() = *c.input(0).as<float>();
    return Status::Ok();
  };
  auto second = [&](KernelContext& c) {
    std::lock_guard<std::mutex> lock(mu);
    ++second_started;
    cv.notify_all();
    *c.output(0).as<float>() = *c.input(0).as<float>() + 1;
    return Status::Ok();
  };
  plan::Plan plan;
  AddTask(plan, "x", plan::SOURCE, 0, {}, 3);
  AddTask(plan, "first", plan::COMPUTE, 0, {0}, 3);
  AddTask(plan, "second", plan::COMPUTE, 0, {1}, 3);
  AddTask(plan, "output", plan::SINK, 0, {2}, 3);
  RuntimeHooks hooks;
  hooks.make_kernel = [&](const plan::Task& task) -> StatusOr<KernelFn> {
    return task.name() == "first" ? KernelFn(first) : KernelFn(second);
  };
  RuntimeOptions options;
  options.kernel_threads = 1;
  float in[3] = {1, 2, 3}, out[3] = {0, 0, 0};
  testing_support::FinishesWithin(std::chrono::seconds(90), "two-stage pipeline", [&] {
    auto environment = ActorEnvironment::Create(environment_options);
    ASSERT_TRUE(environment.ok()) << environment.status().ToString();
    auto runtime = Runtime::Create(plan, hooks, options, *environment);
    ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE((*runtime)->Push({{&in[i], {{1}, DType::kFloat32}}}, {{&out[i], {{1}, DType::kFloat32}}}, nullptr).ok());
    (*runtime)->Drain();
    ASSERT_TRUE((*runtime)->Shutdown().ok());
  });
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], in[i] + 1) << "iteration " << i;
  ASSERT_EQ(met.size(), 2u);
  for (size_t k = 0; k < met.size(); ++k) EXPECT_TRUE(met[k]) << "act " << k + 1 << " of 'first' waited 5 s for 'second'";
}

// Four workers on a fan-out / fan-in plan (six branches of uneven, iteration-dependent acts,
// then their sum) with a thousand iterations in flight: every iteration's result is exact and
// none is lost or repeated, whichever worker's slot, queue or steal each act went through.
TEST(Environment, FourWorkersRunAThousandFanOutIterationsExactly) {
  constexpr int kBranches = 6, kIterations = 1000;
  EnvironmentOptions environment_options;
  environment_options.num_threads = 4;
  environment_options.num_workers = 4;
  environment_options.kernel_threads = 1;
  auto spin = [](int64_t iteration, int branch) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds((iteration * 7 + branch * 3) % 20);
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  plan::Plan plan;
  AddTask(plan, "x", plan::SOURCE, 0, {}, 2);
  std::vector<int> branches;
  for (int k = 0; k < kBranches; ++k) {
    AddTask(plan, "scale" + std::to_string(k), plan::COMPUTE, 0, {0}, 2);
    branches.push_back(plan.tasks_size() - 1);
  }
  AddTask(plan, "sum", plan::COMPUTE, 0, branches, 2);
  AddTask(plan, "output", plan::SINK, 0, {plan.tasks_size() - 1}, 2);
  RuntimeHooks hooks;
  hooks.make_kernel = [&](const plan::Task& task) -> StatusOr<KernelFn> {
    if (task.name() == "sum")
      return KernelFn([](KernelContext& c) {
        float total = 0;
        for (int k = 0; k < kBranches; ++k) total += *c.input(k).as<float>();
        *c.output(0).as<float>() = total;
        return Status::Ok();
      });
    const int branch = static_cast<int>(task.id()) - 1;
    return KernelFn([branch, spin](KernelContext& c) {
      spin(c.iteration, branch);
      *c.output(0).as<float>() = *c.input(0).as<float>() * static_cast<float>(branch + 1);
      return Status::Ok();
    });
  };
  RuntimeOptions options;
  options.kernel_threads = 1;
  std::vector<float> in(kIterations), out(kIterations, -1);
  std::atomic<int> completions{0}, failures{0};
  for (int i = 0; i < kIterations; ++i) in[i] = static_cast<float>(i % 97);
  testing_support::FinishesWithin(std::chrono::seconds(120), "fan-out plan on four workers", [&] {
    auto environment = ActorEnvironment::Create(environment_options);
    ASSERT_TRUE(environment.ok()) << environment.status().ToString();
    auto runtime = Runtime::Create(plan, hooks, options, *environment);
    ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
    for (int i = 0; i < kIterations; ++i)
      ASSERT_TRUE((*runtime)
                      ->Push({{&in[i], {{1}, DType::kFloat32}}}, {{&out[i], {{1}, DType::kFloat32}}},
                             [&](int64_t, const Status& status) {
                               if (!status.ok()) ++failures;
                               ++completions;
                             })
                      .ok());
    (*runtime)->Drain();
    ASSERT_TRUE((*runtime)->Shutdown().ok());
  });
  EXPECT_EQ(completions.load(), kIterations);
  EXPECT_EQ(failures.load(), 0);
  const float factor = kBranches * (kBranches + 1) / 2;
  for (int i = 0; i < kIterations; ++i) ASSERT_EQ(out[i], in[i] * factor) << "iteration " << i;
}

// The default worker count for n devices: one per device while each keeps two threads, else
// one for all (the whole budget in each kernel); never more than the budget, never 0.
TEST(Environment, DevicesGetAWorkerEachOnlyWithTwoThreadsEach) {
  struct Case {
    int budget, devices, workers;
  };
  for (const Case& c : std::vector<Case>{{2, 1, 1},   {2, 2, 1},   {2, 4, 1},  {1, 2, 1},  {3, 2, 1},
                                         {4, 2, 2},   {4, 3, 2},   {4, 8, 2},  {16, 2, 2}, {16, 4, 4},
                                         {16, 16, 8}, {16, 1, 1},  {0, 2, 1}})
    EXPECT_EQ(DefaultWorkerCount(c.budget, c.devices), c.workers) << c.budget << " threads, " << c.devices << " devices";
}

}  // namespace
}  // namespace actorflow

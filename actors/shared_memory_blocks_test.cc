// Registers in a plan-wide shared memory block (plan.proto Plan.memory_blocks,
// RegisterDesc.shared_memory): the runtime places them at their offsets in one allocation,
// and rejects layouts it cannot serve, naming the register.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "actors/runtime.h"
#include "actors/runtime_testing.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace {

using testing_support::FinishesWithin;

using testing_support::AddRegister;
using testing_support::AddTask;

void Share(plan::RegisterDesc* r, int block, int64_t offset) {
  r->mutable_shared_memory()->set_block(block);
  r->mutable_shared_memory()->set_byte_offset(offset);
}

// x -> first (x + 1) -> second (+ 1) -> third (+ 1) -> output. `first` and `third` share block
// 0 at offset 0 (second sits at 64 in it): safe only because the test runs one iteration at a
// time (the compiler proves such orders from the plan, graph/memory_plan.h; the runtime trusts it).
plan::Plan ChainPlan() {
  plan::Plan plan;
  plan.set_job_name("shared");
  AddRegister(AddTask(plan, "x", plan::SOURCE), 4, 2);
  for (const char* name : {"first", "second", "third"}) {
    plan::Task* t = AddTask(plan, name, plan::COMPUTE, "add_one");
    t->add_inputs()->set_producer_task_id(t->id() - 1);
    AddRegister(t, 4, 1);
  }
  plan::Task* sink = AddTask(plan, "output", plan::SINK);
  sink->add_inputs()->set_producer_task_id(3);
  plan.add_memory_blocks()->set_byte_size(128);
  Share(plan.mutable_tasks(1)->mutable_registers(0), 0, 0);
  Share(plan.mutable_tasks(2)->mutable_registers(0), 0, 64);
  Share(plan.mutable_tasks(3)->mutable_registers(0), 0, 0);
  for (const plan::Task& t : plan.tasks())
    for (const plan::InputDesc& in : t.inputs())
      plan.mutable_tasks(in.producer_task_id())->mutable_registers(in.producer_register())->add_consumer_task_ids(t.id());
  return plan;
}

TEST(SharedMemoryBlocks, RegistersLiveAtTheirOffsetsInOneBlock) {
  std::mutex mu;
  std::map<std::string, std::set<const char*>> written;  // task -> where it wrote
  RuntimeHooks hooks;
  hooks.make_kernel = [&](const plan::Task& t) -> StatusOr<KernelFn> {
    const std::string name = t.name();
    return KernelFn([&, name](KernelContext& c) {
      for (int k = 0; k < 4; ++k) c.output(0).as<float>()[k] = c.input(0).as<float>()[k] + 1;
      std::lock_guard<std::mutex> lock(mu);
      written[name].insert(static_cast<const char*>(c.output(0).data));
      return Status::Ok();
    });
  };
  FinishesWithin(std::chrono::seconds(60), "shared block plan", [&] {
    auto runtime = Runtime::Create(ChainPlan(), hooks);
    ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
    for (int i = 0; i < 20; ++i) {
      float x[4] = {float(i), float(i) + 0.5f, -float(i), 7}, y[4] = {};
      Status s = (*runtime)->Run({{x, {{4}, DType::kFloat32}}}, {{y, {{4}, DType::kFloat32}}});
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (int k = 0; k < 4; ++k) ASSERT_EQ(y[k], x[k] + 3) << "iteration " << i;
    }
  });
  ASSERT_EQ(written["first"].size(), 1u);
  ASSERT_EQ(written["second"].size(), 1u);
  EXPECT_EQ(written["first"], written["third"]);  // the same bytes, one allocation
  EXPECT_EQ(*written["second"].begin(), *written["first"].begin() + 64);
}

// With serial_iterations the same plan is safe under many asynchronous calls: each waits for
// the previous one, so no act of iteration i + 1 starts before every act of iteration i ended.
TEST(SharedMemoryBlocks, SerialIterationsNeverOverlap) {
  plan::Plan plan = ChainPlan();
  plan.set_serial_iterations(true);  // without it this fails: `third` overwrites `first`'s next value
  std::atomic<int> running{0}, most_running{0};
  RuntimeHooks hooks;
  hooks.make_kernel = [&](const plan::Task&) -> StatusOr<KernelFn> {
    return KernelFn([&](KernelContext& c) {
      const int now = running.fetch_add(1) + 1;
      int seen = most_running.load();
      while (now > seen && !most_running.compare_exchange_weak(seen, now)) {}
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      for (int k = 0; k < 4; ++k) c.output(0).as<float>()[k] = c.input(0).as<float>()[k] + 1;
      running.fetch_sub(1);
      return Status::Ok();
    });
  };
  constexpr int kIterations = 40;
  std::vector<float> xs(kIterations * 4), ys(kIterations * 4, -1);
  FinishesWithin(std::chrono::seconds(60), "serial plan", [&] {
    RuntimeOptions options;
    options.num_threads = 4;  // the three tasks on separate workers: they could overlap
    options.num_workers = 4;
    auto runtime = Runtime::Create(plan, hooks, options);
    ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
    for (int i = 0; i < kIterations; ++i) {
      for (int k = 0; k < 4; ++k) xs[i * 4 + k] = static_cast<float>(i * 10 + k);
      auto pushed = (*runtime)->Push({{&xs[i * 4], {{4}, DType::kFloat32}}}, {{&ys[i * 4], {{4}, DType::kFloat32}}},
                                     [](int64_t, const Status& s) { EXPECT_TRUE(s.ok()) << s.ToString(); });
      ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
    }
    (*runtime)->Drain();
  });
  for (int i = 0; i < kIterations * 4; ++i) ASSERT_EQ(ys[i], xs[i] + 3) << "element " << i;
  EXPECT_EQ(most_running.load(), 1);  // a chain of one call at a time: one act at a time
}

TEST(SharedMemoryBlocks, BadLayoutsAreRejectedNamingTheRegister) {
  RuntimeHooks hooks;
  hooks.make_kernel = [](const plan::Task&) -> StatusOr<KernelFn> { return KernelFn([](KernelContext&) { return Status::Ok(); }); };
  auto rejected = [&](plan::Plan plan, const std::string& expected) {
    auto runtime = Runtime::Create(plan, hooks);
    ASSERT_FALSE(runtime.ok()) << "expected: " << expected;
    EXPECT_NE(runtime.status().message().find(expected), std::string::npos) << runtime.status().message();
  };
  {
    plan::Plan plan = ChainPlan();
    Share(plan.mutable_tasks(2)->mutable_registers(0), 0, 96);  // 16 bytes past the block's 128
    rejected(plan, "register 'out' of task 'second' shares memory block 0 at bytes [96, 160), which is not an 64-aligned");
  }
  {
    plan::Plan plan = ChainPlan();
    Share(plan.mutable_tasks(2)->mutable_registers(0), 0, 32);
    rejected(plan, "at bytes [32, 96)");
  }
  {
    plan::Plan plan = ChainPlan();
    Share(plan.mutable_tasks(2)->mutable_registers(0), 1, 0);
    rejected(plan, "task 'second' shares memory block 1, but the plan has 1 blocks");
  }
  {
    plan::Plan plan = ChainPlan();
    plan.mutable_tasks(2)->mutable_registers(0)->set_register_num(2);
    rejected(plan, "only one register (register_num 1, here 2) of a compute task");
  }
  {
    plan::Plan plan = ChainPlan();
    plan.mutable_memory_blocks(0)->set_byte_size(0);
    rejected(plan, "shared memory block 0 has 0 bytes");
  }
}

}  // namespace
}  // namespace actorflow

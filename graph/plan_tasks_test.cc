// PlanTasks: the flat arrays read from a plan's tasks (ids resolved to positions, flags per
// task, input and register, register sizes) against the plan they were read from.
#include "graph/plan_tasks.h"

#include <gtest/gtest.h>

#include <string>

#include "graph/memory_plan.h"
#include "graph/passes.h"
#include "graph/test_util.h"

namespace actorflow {
namespace graph {
namespace {

plan::Task* AddTask(plan::Plan& plan, int64_t id, const std::string& name, plan::TaskKind kind) {
  plan::Task* t = plan.add_tasks();
  t->set_id(id);
  t->set_name(name);
  t->set_kind(kind);
  t->set_device_type("cpu");
  return t;
}

plan::RegisterDesc* AddRegister(plan::Task* t, std::initializer_list<int64_t> shape, int register_num) {
  plan::RegisterDesc* r = t->add_registers();
  r->set_name("out");
  r->set_register_num(register_num);
  plan::BlobDesc* b = r->add_blobs();
  for (int64_t d : shape) b->add_shape(d);
  b->set_dtype(plan::DT_FLOAT32);
  return r;
}

plan::InputDesc* Read(plan::Task* t, int64_t producer, int reg = 0) {
  plan::InputDesc* in = t->add_inputs();
  in->set_producer_task_id(producer);
  in->set_producer_register(reg);
  return in;
}

// Ids far apart (not positions, past a dense array's range): found through the map.
TEST(PlanTasksTest, ReadsEveryFieldTheChecksAndThePlannerUse) {
  plan::Plan plan;
  plan::Task* x = AddTask(plan, 1000, "x", plan::SOURCE);
  AddRegister(x, {3}, 2);  // 12 bytes: one aligned blob of 64
  plan::Task* w = AddTask(plan, 7, "w", plan::VARIABLE);
  w->set_read_only(true);
  AddRegister(w, {2, 40}, 1);  // 320 bytes
  plan::Task* a = AddTask(plan, 500000, "a", plan::COMPUTE);
  Read(a, 1000);
  Read(a, 7)->set_whole(true);
  plan::RegisterDesc* a_out = AddRegister(a, {1}, 2);
  a_out->add_blobs()->set_byte_size(100);  // two blobs: 64 + 128
  a->add_registers()->set_reserved_byte_size(4096);  // reserved: more than its blobs, not plain
  plan::Task* gpu = AddTask(plan, 3, "gpu", plan::COMPUTE);
  gpu->set_device_type("gpu");
  gpu->set_machine_id(1);
  Read(gpu, 500000, 1)->set_control(true);
  Read(gpu, 12345);  // no task has it
  Read(gpu, 1000)->set_part(true);
  gpu->add_mutable_inputs(2);
  gpu->add_mutable_inputs(9);  // out of range: listed, flags nothing
  plan::RegisterDesc* shared = AddRegister(gpu, {4}, 1);
  shared->mutable_shared_memory()->set_block(0);
  shared->mutable_memory_case()->set_kind(plan::MEMORY_DEVICE);
  plan::Task* async = AddTask(plan, 4, "async", plan::COMPUTE);
  async->set_asynchronous(true);

  const PlanTasks tasks = PlanTasks::Of(plan).value();
  ASSERT_EQ(tasks.size(), 5);
  EXPECT_FALSE(tasks.all_on_machine_zero());
  EXPECT_EQ(tasks.task_flags(0), PlanTasks::kShareableKind);
  EXPECT_EQ(tasks.task_flags(1), PlanTasks::kVariable | PlanTasks::kReadOnly);
  EXPECT_TRUE(tasks.read_only_variable(1));
  EXPECT_EQ(tasks.task_flags(2), PlanTasks::kShareableKind);
  EXPECT_EQ(tasks.task_flags(3), 0);  // on a GPU
  EXPECT_EQ(tasks.task_flags(4), 0);  // asynchronous

  EXPECT_EQ(tasks.inputs(0), 0);
  ASSERT_EQ(tasks.inputs(2), 2);
  const int a_in = tasks.input_begin(2);
  EXPECT_EQ(tasks.producer(a_in), 0);
  EXPECT_EQ(tasks.producer(a_in + 1), 1);
  EXPECT_EQ(tasks.input_flags(a_in), 0);
  EXPECT_EQ(tasks.input_flags(a_in + 1), PlanTasks::kWhole);
  ASSERT_EQ(tasks.inputs(3), 3);
  const int g_in = tasks.input_begin(3);
  EXPECT_EQ(tasks.producer(g_in), 2);
  EXPECT_EQ(tasks.producer_register(g_in), 1);
  EXPECT_EQ(tasks.input_flags(g_in), PlanTasks::kControl);
  EXPECT_EQ(tasks.producer(g_in + 1), -1);
  EXPECT_EQ(tasks.input_flags(g_in + 2), PlanTasks::kPart | PlanTasks::kWritten);
  ASSERT_EQ(tasks.written_begin(4) - tasks.written_begin(3), 2);
  EXPECT_EQ(tasks.written(tasks.written_begin(3)), 2);
  EXPECT_EQ(tasks.written(tasks.written_begin(3) + 1), 9);
  EXPECT_EQ(tasks.written_begin(3), 0);  // no task before it writes

  EXPECT_EQ(tasks.register_count(), 5);
  EXPECT_EQ(tasks.registers(2), 2);
  EXPECT_EQ(tasks.registers(4), 0);
  const int a_reg = tasks.register_begin(2);
  EXPECT_EQ(tasks.register_bytes(tasks.register_begin(0)), 64);
  EXPECT_EQ(tasks.register_bytes(tasks.register_begin(1)), 320);
  EXPECT_EQ(tasks.register_bytes(a_reg), 64 + 128);
  EXPECT_EQ(tasks.register_bytes(a_reg + 1), 4096);
  EXPECT_EQ(tasks.register_num(a_reg), 2);
  EXPECT_EQ(tasks.register_flags(a_reg), PlanTasks::kHostPlain);
  EXPECT_EQ(tasks.register_flags(a_reg + 1), 0);
  EXPECT_EQ(tasks.register_flags(tasks.register_begin(3)), PlanTasks::kSharedMemory);
  for (int t = 0; t < tasks.size(); ++t)
    for (int r = 0; r < tasks.registers(t); ++r)
      EXPECT_EQ(tasks.register_bytes(tasks.register_begin(t) + r), RegisterBytes(plan.tasks(t).registers(r)));
}

TEST(PlanTasksTest, TwoTasksOfOneIdAreRefused) {
  plan::Plan plan;
  AddTask(plan, 5, "a", plan::COMPUTE);
  AddTask(plan, 5, "b", plan::COMPUTE);
  const auto tasks = PlanTasks::Of(plan);
  ASSERT_FALSE(tasks.ok());
  EXPECT_NE(tasks.status().message().find("duplicate task id 5"), std::string::npos) << tasks.status().message();
}

// The checks read from PlanTasks answer as they do from the plan: an unordered in-place reader
// is found, and the memory plan of a plan is the same either way.
TEST(PlanTasksTest, TheChecksAndThePlannerAnswerTheSameFromIt) {
  plan::Plan plan;
  plan.set_job_name("step");
  AddRegister(AddTask(plan, 0, "x", plan::SOURCE), {100}, 2);
  AddRegister(AddTask(plan, 1, "w", plan::VARIABLE), {100}, 1);
  plan::Task* a = AddTask(plan, 2, "a", plan::COMPUTE);
  Read(a, 0);
  Read(a, 1);
  AddRegister(a, {1000}, 2);
  plan::Task* b = AddTask(plan, 3, "b", plan::COMPUTE);
  Read(b, 2);
  AddRegister(b, {800}, 2);
  plan::Task* c = AddTask(plan, 4, "c", plan::COMPUTE);
  Read(c, 3);
  AddRegister(c, {500}, 2);
  plan::Task* update = AddTask(plan, 5, "update", plan::COMPUTE);
  Read(update, 1);
  Read(update, 4);
  update->add_mutable_inputs(0);
  AddRegister(update, {1}, 2);
  plan::Task* late = AddTask(plan, 6, "late", plan::COMPUTE);  // reads w after its writer, unordered
  Read(late, 1);
  AddRegister(late, {1}, 2);
  Read(AddTask(plan, 7, "output", plan::SINK), 5)->set_control(true);
  // `late` comes after the writer, not before it: an error either way, naming it.
  const Status from_plan = VerifyInPlaceOrder(plan);
  const Status from_tasks = VerifyInPlaceOrder(plan, PlanTasks::Of(plan).value());
  ASSERT_FALSE(from_plan.ok());
  EXPECT_EQ(from_tasks.message(), from_plan.message());
  EXPECT_NE(from_tasks.message().find("'late'"), std::string::npos) << from_tasks.message();

  plan.mutable_tasks()->DeleteSubrange(6, 1);  // without `late`, ids stay positions: sink is #6
  plan.mutable_tasks(6)->set_id(6);
  AF_ASSERT_OK(VerifyInPlaceOrder(plan, PlanTasks::Of(plan).value()));
  plan::Plan planned = plan;
  AF_ASSERT_OK(PlanRegisterMemory(planned));
  plan::Plan planned_from_tasks = plan;
  AF_ASSERT_OK(PlanRegisterMemory(planned_from_tasks, PlanTasks::Of(plan).value()));
  EXPECT_EQ(planned_from_tasks.DebugString(), planned.DebugString());
  // a and c share bytes: a's reader b runs before c, c's reader (the update, reading w) before
  // a's next act.
  ASSERT_EQ(planned.memory_blocks_size(), 1);
  EXPECT_TRUE(planned.tasks(2).registers(0).has_shared_memory());
  EXPECT_TRUE(planned.tasks(4).registers(0).has_shared_memory());
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

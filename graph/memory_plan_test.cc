// The register memory planner on hand-made plans: which lifetimes the plan's order separates
// (within an iteration and across iterations through back edges), the offsets it assigns, the
// register counts it lowers, the verifier and the report.
#include "graph/memory_plan.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace actorflow {
namespace graph {
namespace {

plan::Task* AddTask(plan::Plan& plan, const std::string& name, plan::TaskKind kind) {
  plan::Task* t = plan.add_tasks();
  t->set_id(plan.tasks_size() - 1);
  t->set_name(name);
  t->set_kind(kind);
  t->set_device_type("cpu");
  if (kind == plan::COMPUTE) t->set_op_type("op");
  return t;
}

void AddRegister(plan::Task* t, int64_t floats, int register_num) {
  plan::RegisterDesc* r = t->add_registers();
  r->set_name(floats == 0 ? "done" : "out");
  r->set_register_num(register_num);
  if (floats == 0) return;
  plan::BlobDesc* b = r->add_blobs();
  b->add_shape(floats);
  b->set_dtype(plan::DT_FLOAT32);
  b->set_byte_size(floats * 4);
}

void Read(plan::Task* t, int64_t producer, bool control = false) {
  plan::InputDesc* in = t->add_inputs();
  in->set_producer_task_id(producer);
  in->set_control(control);
}

// A train step in miniature:
//   #0 x (source) ─┐
//   #1 w (variable)┴▶ #2 a ─▶ #3 b ─▶ #4 c ─▶ #5 update (writes w in place; reads w, c) ─▶ #6 sink
// `a`, `b`, `c` have `register_num` registers of 1000, 800, 500 floats. The sink waits for the
// update (control) and reads nothing else, as lowering makes it wait for registers nobody reads.
// With `updated` false the variable is read-only and the update only reads it.
plan::Plan TrainStep(int register_num, bool updated = true) {
  plan::Plan plan;
  plan.set_job_name("step");
  AddRegister(AddTask(plan, "x", plan::SOURCE), 100, 2);
  plan::Task* w = AddTask(plan, "w", plan::VARIABLE);
  w->set_read_only(!updated);
  AddRegister(w, 100, 1);
  plan::Task* a = AddTask(plan, "a", plan::COMPUTE);
  Read(a, 0);
  Read(a, 1);
  AddRegister(a, 1000, register_num);
  plan::Task* b = AddTask(plan, "b", plan::COMPUTE);
  Read(b, 2);
  AddRegister(b, 800, register_num);
  plan::Task* c = AddTask(plan, "c", plan::COMPUTE);
  Read(c, 3);
  AddRegister(c, 500, register_num);
  plan::Task* update = AddTask(plan, "update", plan::COMPUTE);
  Read(update, 1);
  Read(update, 4);
  if (updated) update->add_mutable_inputs(0);
  AddRegister(update, 0, register_num);
  Read(AddTask(plan, "output", plan::SINK), 5, /*control=*/true);
  return plan;
}

bool MayShare(const plan::Plan& plan, int64_t first, int64_t second) {
  auto answer = RegistersMayShareInOrder(plan, first, 0, second, 0);
  EXPECT_TRUE(answer.ok()) << answer.status().ToString();
  return answer.ok() && answer.value();
}

TEST(MemoryPlan, TheVariablesUpdateSeparatesIterations) {
  const plan::Plan plan = TrainStep(1);
  // a is read (by b) before c is written, and c is read (by the update) before the variable is
  // announced again, hence before a's next act: a then c, every iteration.
  EXPECT_TRUE(MayShare(plan, 2, 4));
  EXPECT_FALSE(MayShare(plan, 4, 2));  // c is written after a's reader: not the other order
  // b reads a while writing its own register; c reads b while writing: live together.
  EXPECT_FALSE(MayShare(plan, 2, 3));
  EXPECT_FALSE(MayShare(plan, 3, 2));
  EXPECT_FALSE(MayShare(plan, 3, 4));
}

TEST(MemoryPlan, APipelineThatMayRunAheadSharesNothing) {
  // Without the update writing w, nothing stops a from computing iteration i + 1 while the
  // update still reads c of iteration i: sharing a's and c's bytes would be a race.
  EXPECT_FALSE(MayShare(TrainStep(1, /*updated=*/false), 2, 4));
  // With two registers each, a may run ahead of its readers even with the update in place.
  EXPECT_FALSE(MayShare(TrainStep(2), 2, 4));
}

TEST(MemoryPlan, ConcurrentBranchesDoNotShare) {
  // a -> (left, right) -> join: left and right run in either order or together.
  plan::Plan plan = TrainStep(1);
  plan::Task* left = plan.mutable_tasks(3);  // b reads a
  plan::Task* right = plan.mutable_tasks(4);  // c reads a instead of b
  right->mutable_inputs(0)->set_producer_task_id(2);
  plan.mutable_tasks(5)->add_inputs()->set_producer_task_id(3);  // the update joins both
  (void)left;
  EXPECT_FALSE(MayShare(plan, 3, 4));
  EXPECT_FALSE(MayShare(plan, 4, 3));
}

TEST(MemoryPlan, LowersRegistersAndPlacesOrderedOnesTogether) {
  plan::Plan plan = TrainStep(2);
  ASSERT_TRUE(PlanRegisterMemory(plan).ok());
  // a, b, c wait for the update of the previous step through w: one register each. The source
  // and the update's control register keep two.
  for (int t : {2, 3, 4}) EXPECT_EQ(plan.tasks(t).registers(0).register_num(), 1) << plan.tasks(t).name();
  EXPECT_EQ(plan.tasks(0).registers(0).register_num(), 2);
  EXPECT_EQ(plan.tasks(5).registers(0).register_num(), 2);
  // Largest first: a (4000 B) at 0, b (3200 B) clear of a at 4032 (64-byte aligned), c (2000 B)
  // only clear of b: back to 0, over a's bytes.
  ASSERT_EQ(plan.memory_blocks_size(), 1);
  EXPECT_EQ(plan.tasks(2).registers(0).shared_memory().byte_offset(), 0);
  EXPECT_EQ(plan.tasks(3).registers(0).shared_memory().byte_offset(), 4032);
  EXPECT_EQ(plan.tasks(4).registers(0).shared_memory().byte_offset(), 0);
  EXPECT_EQ(plan.memory_blocks(0).byte_size(), 4032 + 3200);
  // Nothing holds the host back from filling the source ahead: two registers, its own memory.
  EXPECT_FALSE(plan.tasks(0).registers(0).has_shared_memory());
  EXPECT_TRUE(VerifySharedMemory(plan).ok());
  // Planning twice changes nothing.
  plan::Plan again = plan;
  ASSERT_TRUE(PlanRegisterMemory(again).ok());
  EXPECT_EQ(again.SerializeAsString(), plan.SerializeAsString());

  const MemoryReport report = PlanMemoryReport(plan);
  EXPECT_EQ(report.register_bytes, 4032 + 3200 + 2 * 448);  // the block and the source's two
  EXPECT_EQ(report.unshared_register_bytes, 4032 + 3200 + 2048 + 2 * 448);
  EXPECT_EQ(report.shared_registers, 3);
  EXPECT_EQ(report.variable_bytes, 448);
  // Live together at most: the source with a (x read by a), then a and b, then b and c.
  EXPECT_EQ(report.largest_live_bytes, 4032 + 3200);
  EXPECT_LE(report.largest_live_bytes, report.register_bytes);
}

TEST(MemoryPlan, LeavesPipelinesAndReadOnlyChainsAlone) {
  plan::Plan plan = TrainStep(2, /*updated=*/false);
  const std::string before = plan.SerializeAsString();
  ASSERT_TRUE(PlanRegisterMemory(plan).ok());
  EXPECT_EQ(plan.SerializeAsString(), before);
  // One register each, still nothing to share: a may compute i + 1 while c is read for i.
  plan = TrainStep(1, /*updated=*/false);
  ASSERT_TRUE(PlanRegisterMemory(plan).ok());
  EXPECT_EQ(plan.memory_blocks_size(), 0);
}

TEST(MemoryPlan, SerialPlansShareEvenPipelines) {
  // Calls one at a time: a pipeline that could run ahead no longer can.
  plan::Plan plan = TrainStep(2, /*updated=*/false);
  plan.set_serial_iterations(true);
  ASSERT_TRUE(PlanRegisterMemory(plan).ok());
  for (int t : {0, 2, 3, 4}) EXPECT_EQ(plan.tasks(t).registers(0).register_num(), 1) << plan.tasks(t).name();
  EXPECT_TRUE(MayShare(plan, 2, 4));
  EXPECT_TRUE(MayShare(plan, 0, 3));   // x is read by a before b writes
  EXPECT_FALSE(MayShare(plan, 3, 0));  // but the source is always first in an iteration
  EXPECT_FALSE(MayShare(plan, 0, 2));  // a reads x while it writes
  // a at 0, b at 4032, c at 0 (only b is live with it), x (448 B, live with a only) at 4032.
  ASSERT_EQ(plan.memory_blocks_size(), 1);
  EXPECT_EQ(plan.tasks(0).registers(0).shared_memory().byte_offset(), 4032);
  EXPECT_EQ(plan.tasks(4).registers(0).shared_memory().byte_offset(), 0);
  EXPECT_EQ(plan.memory_blocks(0).byte_size(), 4032 + 3200);
  EXPECT_TRUE(VerifySharedMemory(plan).ok());
  // The same plan without the flag: the verifier refuses what is now a race.
  plan.set_serial_iterations(false);
  EXPECT_FALSE(VerifySharedMemory(plan).ok());
}

TEST(MemoryPlan, VerifierNamesRegistersThatOverlapUnordered) {
  plan::Plan plan = TrainStep(2);
  ASSERT_TRUE(PlanRegisterMemory(plan).ok());
  plan.mutable_tasks(3)->mutable_registers(0)->mutable_shared_memory()->set_byte_offset(1024);  // b over a
  Status status = VerifySharedMemory(plan);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("register 'out' of task 'a' and register 'out' of task 'b' share bytes"),
            std::string::npos)
      << status.message();
  // A register with two registers cannot be in a block at all.
  plan = TrainStep(2);
  ASSERT_TRUE(PlanRegisterMemory(plan).ok());
  plan.mutable_tasks(4)->mutable_registers(0)->set_register_num(2);
  status = VerifySharedMemory(plan);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("register 'out' of task 'c' shares memory but has register_num 2"),
            std::string::npos)
      << status.message();
}

// A long train chain (more registers than pairwise placement takes: placed in slots in plan
// order): x, w -> t0 -> t1 -> ... -> t999 -> update (writes w). Each register is read only by
// the next task, so two slots alternate, and every overlap is in order.
TEST(MemoryPlan, LongChainsAlternateBetweenTwoSlots) {
  plan::Plan plan;
  plan.set_job_name("chain");
  AddRegister(AddTask(plan, "x", plan::SOURCE), 16, 2);
  AddRegister(AddTask(plan, "w", plan::VARIABLE), 16, 1);
  constexpr int kLength = 1000;
  for (int k = 0; k < kLength; ++k) {
    plan::Task* t = AddTask(plan, "t" + std::to_string(k), plan::COMPUTE);
    Read(t, k == 0 ? 0 : t->id() - 1);
    Read(t, 1);
    AddRegister(t, 16 * (1 + k % 3), 2);  // 64, 128 and 192 bytes
  }
  plan::Task* update = AddTask(plan, "update", plan::COMPUTE);
  Read(update, 1);
  Read(update, update->id() - 1);
  update->add_mutable_inputs(0);
  AddRegister(update, 0, 2);
  Read(AddTask(plan, "output", plan::SINK), update->id(), /*control=*/true);
  ASSERT_TRUE(PlanRegisterMemory(plan).ok());
  ASSERT_EQ(plan.memory_blocks_size(), 1);
  std::set<int64_t> offsets;
  for (int k = 0; k < kLength; ++k) {
    const plan::RegisterDesc& reg = plan.tasks(2 + k).registers(0);
    ASSERT_EQ(reg.register_num(), 1);
    ASSERT_TRUE(reg.has_shared_memory()) << k;
    offsets.insert(reg.shared_memory().byte_offset());
  }
  EXPECT_EQ(offsets.size(), 2u);
  EXPECT_EQ(plan.memory_blocks(0).byte_size(), 2 * 192);  // each slot grew to the largest
  EXPECT_TRUE(VerifySharedMemory(plan).ok());
  // Without the update the chain may run ahead: nothing lowered, nothing shared.
  plan::Plan free_running = plan;
  free_running.clear_memory_blocks();
  for (plan::Task& t : *free_running.mutable_tasks())
    for (plan::RegisterDesc& r : *t.mutable_registers()) {
      r.clear_shared_memory();
      if (t.kind() == plan::COMPUTE) r.set_register_num(2);
    }
  free_running.mutable_tasks(1)->set_read_only(true);
  free_running.mutable_tasks(kLength + 2)->clear_mutable_inputs();
  ASSERT_TRUE(PlanRegisterMemory(free_running).ok());
  EXPECT_EQ(free_running.memory_blocks_size(), 0);
}

TEST(MemoryPlan, LargePlansArePlannedInLinearSpace) {
  // 30000 tasks: exact ordering facts would take 225 MB (a bit per pair and relation); the
  // planner's take a few ints per task. A chain of 30000 registers still alternates two slots.
  plan::Plan plan;
  plan.set_job_name("long");
  AddRegister(AddTask(plan, "x", plan::SOURCE), 16, 2);
  AddRegister(AddTask(plan, "w", plan::VARIABLE), 16, 1);
  constexpr int kLength = 30000;
  for (int k = 0; k < kLength; ++k) {
    plan::Task* t = AddTask(plan, "t" + std::to_string(k), plan::COMPUTE);
    Read(t, k == 0 ? 0 : t->id() - 1);
    Read(t, 1);
    AddRegister(t, 16, 2);
  }
  plan::Task* update = AddTask(plan, "update", plan::COMPUTE);
  Read(update, 1);
  Read(update, update->id() - 1);
  update->add_mutable_inputs(0);
  AddRegister(update, 0, 2);
  ASSERT_TRUE(PlanRegisterMemory(plan).ok());
  ASSERT_EQ(plan.memory_blocks_size(), 1);
  EXPECT_EQ(plan.memory_blocks(0).byte_size(), 2 * 64);
  EXPECT_TRUE(VerifySharedMemory(plan).ok());
}

TEST(MemoryPlan, InPlaceWrittenAndReservedRegistersKeepTheirMemory) {
  plan::Plan plan = TrainStep(1);
  plan.mutable_tasks(4)->mutable_registers(0)->set_reserved_byte_size(4096);  // c reserves a block
  ASSERT_TRUE(PlanRegisterMemory(plan).ok());
  EXPECT_FALSE(plan.tasks(4).registers(0).has_shared_memory());
  plan = TrainStep(1);
  plan.mutable_tasks(5)->add_mutable_inputs(1);  // the update also writes c in place
  ASSERT_TRUE(PlanRegisterMemory(plan).ok());
  EXPECT_FALSE(plan.tasks(4).registers(0).has_shared_memory());
  EXPECT_EQ(plan.memory_blocks_size(), 0);  // a and b alone cannot share
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

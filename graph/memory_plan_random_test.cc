// The register memory planner on random plans, checked by brute force: every two registers whose
// bytes overlap in a shared block must be ordered by the exact happens-before relation
// (memory_plan.h), computed here from its definition with a set of ancestors per task, with
// nothing of the planner's own (linear, approximate) ordering facts. Also: the verifier refuses
// a placement that puts two unordered registers over each other.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "graph/memory_plan.h"

namespace actorflow {
namespace graph {
namespace {

bool ReadOnlyVariable(const plan::Task& task) { return task.kind() == plan::VARIABLE && task.read_only(); }

// The definition, pair by pair: ancestors (u(i) before t(i)) and before_next (c(i) before t(i+1)),
// a bit per pair (rows of 64-bit words).
struct ExactOrder {
  explicit ExactOrder(const plan::Plan& plan) : n(plan.tasks_size()), words((n + 63) / 64) {
    ancestors.assign(n, std::vector<uint64_t>(words, 0));
    before_next.assign(n, std::vector<uint64_t>(words, plan.serial_iterations() ? ~uint64_t{0} : 0));
    readers.resize(n);
    for (int t = 0; t < n; ++t) readers[t].resize(plan.tasks(t).registers_size());
    auto set = [](std::vector<uint64_t>& row, int column) { row[column / 64] |= uint64_t{1} << (column % 64); };
    auto merge = [&](std::vector<uint64_t>& into, const std::vector<uint64_t>& from) {
      for (size_t w = 0; w < words; ++w) into[w] |= from[w];
    };
    for (int t = 0; t < n; ++t)
      for (const plan::InputDesc& in : plan.tasks(t).inputs()) {
        const int p = static_cast<int>(in.producer_task_id());
        if (ReadOnlyVariable(plan.tasks(p))) continue;
        std::vector<int>& list = readers[p][in.producer_register()];
        if (list.empty() || list.back() != t) list.push_back(t);
        merge(ancestors[t], ancestors[p]);
        set(ancestors[t], p);
      }
    if (plan.serial_iterations()) return;
    for (int p = 0; p < n; ++p) {
      const plan::Task& task = plan.tasks(p);
      if (ReadOnlyVariable(task)) continue;
      for (int r = 0; r < task.registers_size(); ++r) {
        if (task.kind() != plan::VARIABLE && task.registers(r).register_num() > 1) continue;
        for (int c : readers[p][r]) {
          set(before_next[p], c);
          merge(before_next[p], ancestors[c]);
        }
      }
    }
    // Whatever comes before p's next act comes before its descendants' next acts.
    for (int t = 0; t < n; ++t)
      for (int p = 0; p < t; ++p)
        if (Has(ancestors[t], p)) merge(before_next[t], before_next[p]);
  }
  static bool Has(const std::vector<uint64_t>& row, int column) { return (row[column / 64] >> (column % 64) & 1) != 0; }
  bool InOrder(int a, int first, int b, int second) const {
    if (readers[a][first].empty() || readers[b][second].empty()) return false;
    for (int c : readers[a][first])
      if (!Has(ancestors[b], c)) return false;
    for (int c : readers[b][second])
      if (!Has(before_next[a], c)) return false;
    return true;
  }
  int n;
  size_t words;
  std::vector<std::vector<uint64_t>> ancestors, before_next;
  std::vector<std::vector<std::vector<int>>> readers;
};

// A random plan: a source, `variables` variables (each updated in place by a random later task,
// or read-only), compute tasks each reading 1-3 earlier tasks (mostly recent ones, sometimes
// any), some control edges, register_num 1 or 2, sizes from 64 B to 4 KiB; a sink at the end.
plan::Plan RandomPlan(std::mt19937& random, int tasks, int variables, bool serial) {
  plan::Plan plan;
  plan.set_job_name("random");
  plan.set_serial_iterations(serial);
  auto add = [&](const std::string& name, plan::TaskKind kind) {
    plan::Task* t = plan.add_tasks();
    t->set_id(plan.tasks_size() - 1);
    t->set_name(name);
    t->set_kind(kind);
    t->set_device_type("cpu");
    if (kind == plan::COMPUTE) t->set_op_type("op");
    return t;
  };
  auto add_register = [&](plan::Task* t, int64_t bytes, int register_num) {
    plan::RegisterDesc* r = t->add_registers();
    r->set_name("out" + std::to_string(t->registers_size()));
    r->set_register_num(register_num);
    plan::BlobDesc* b = r->add_blobs();
    b->add_shape(bytes / 4);
    b->set_dtype(plan::DT_FLOAT32);
    b->set_byte_size(bytes);
  };
  std::uniform_int_distribution<int> size_of(1, 64);
  add_register(add("x", plan::SOURCE), 64 * size_of(random), 2);
  std::vector<bool> read_only(variables);
  for (int v = 0; v < variables; ++v) {
    plan::Task* t = add("w" + std::to_string(v), plan::VARIABLE);
    read_only[v] = random() % 4 == 0;
    t->set_read_only(read_only[v]);
    add_register(t, 256, 1);
  }
  const int first_compute = plan.tasks_size();
  std::vector<int> writer(variables, -1);  // the task updating each variable in place
  for (int v = 0; v < variables; ++v)
    if (!read_only[v]) writer[v] = first_compute + static_cast<int>(random() % tasks);
  for (int k = 0; k < tasks; ++k) {
    const int id = plan.tasks_size();
    plan::Task* t = add("t" + std::to_string(k), plan::COMPUTE);
    const int inputs = 1 + static_cast<int>(random() % 3);
    for (int i = 0; i < inputs; ++i) {
      int producer;
      if (random() % 3 == 0) producer = static_cast<int>(random() % id);                 // anything earlier
      else producer = std::max(0, id - 1 - static_cast<int>(random() % 4));               // a recent one
      if (producer >= 1 && producer < first_compute && random() % 2 == 0) producer = 0;  // variables less often
      plan::InputDesc* in = t->add_inputs();
      in->set_producer_task_id(producer);
      const int registers = plan.tasks(producer).registers_size();
      in->set_producer_register(registers > 1 ? static_cast<int>(random() % registers) : 0);
      if (random() % 8 == 0) in->set_control(true);
    }
    for (int v = 0; v < variables; ++v)
      if (writer[v] == id) {  // the update reads the variable and writes it in place
        t->add_mutable_inputs(t->inputs_size());
        t->add_inputs()->set_producer_task_id(1 + v);
      }
    const int outputs = random() % 5 == 0 ? 2 : 1;
    for (int o = 0; o < outputs; ++o) add_register(t, 64 * size_of(random), random() % 3 == 0 ? 2 : 1);
  }
  plan::Task* sink = add("output", plan::SINK);
  sink->add_inputs()->set_producer_task_id(plan.tasks_size() - 2);
  return plan;
}

struct Shared {
  int task, reg;
  int64_t begin, end;
};

std::vector<Shared> SharedRegisters(const plan::Plan& plan) {
  std::vector<Shared> shared;
  for (int t = 0; t < plan.tasks_size(); ++t)
    for (int r = 0; r < plan.tasks(t).registers_size(); ++r) {
      const plan::RegisterDesc& reg = plan.tasks(t).registers(r);
      if (!reg.has_shared_memory()) continue;
      int64_t bytes = 0;
      for (const plan::BlobDesc& b : reg.blobs()) bytes += (b.byte_size() + 63) / 64 * 64;
      shared.push_back(Shared{t, r, reg.shared_memory().byte_offset(), reg.shared_memory().byte_offset() + bytes});
    }
  return shared;
}

// Plans `count` random plans of `tasks` tasks and checks every overlapping pair by brute force.
// Returns how many registers were shared in all (so a test sees the planner did share).
int CheckRandomPlans(uint32_t seed, int count, int tasks) {
  std::mt19937 random(seed);
  int shared_in_all = 0;
  for (int round = 0; round < count; ++round) {
    const bool serial = random() % 4 == 0;
    plan::Plan plan = RandomPlan(random, tasks, 1 + static_cast<int>(random() % 6), serial);
    const Status status = PlanRegisterMemory(plan);
    EXPECT_TRUE(status.ok()) << "seed " << seed << " round " << round << ": " << status.ToString();
    if (!status.ok()) return shared_in_all;
    const ExactOrder exact(plan);
    const std::vector<Shared> shared = SharedRegisters(plan);
    shared_in_all += static_cast<int>(shared.size());
    for (size_t i = 0; i < shared.size(); ++i) {
      const Shared& a = shared[i];
      EXPECT_EQ(plan.tasks(a.task).registers(a.reg).register_num(), 1);
      EXPECT_LE(a.end, plan.memory_blocks(0).byte_size());
      for (size_t j = i + 1; j < shared.size(); ++j) {
        const Shared& b = shared[j];
        if (a.end <= b.begin || b.end <= a.begin) continue;
        const bool ordered = exact.InOrder(a.task, a.reg, b.task, b.reg) || exact.InOrder(b.task, b.reg, a.task, a.reg);
        EXPECT_TRUE(ordered) << "seed " << seed << " round " << round << ": tasks " << a.task << " and " << b.task
                             << " overlap in bytes but their lifetimes are not ordered";
        if (!ordered) return shared_in_all;
      }
    }
  }
  return shared_in_all;
}

TEST(MemoryPlanRandom, SmallPlansPlacedLargestFirstNeverOverlapLiveRegisters) {
  EXPECT_GT(CheckRandomPlans(1, 300, 30), 100);
  EXPECT_GT(CheckRandomPlans(2, 100, 120), 100);
}

TEST(MemoryPlanRandom, LargePlansPlacedInSlotsNeverOverlapLiveRegisters) {
  // More than 512 candidates: the slot placement.
  EXPECT_GT(CheckRandomPlans(3, 6, 1500), 500);
}

TEST(MemoryPlanRandom, TheVerifierRefusesUnorderedRegistersOverEachOther) {
  std::mt19937 random(4);
  int refused = 0;
  for (int round = 0; round < 200 && refused < 50; ++round) {
    plan::Plan plan = RandomPlan(random, 40, 3, false);
    ASSERT_TRUE(PlanRegisterMemory(plan).ok());
    const std::vector<Shared> shared = SharedRegisters(plan);
    const ExactOrder exact(plan);
    for (size_t i = 0; i < shared.size(); ++i)
      for (size_t j = i + 1; j < shared.size(); ++j) {
        const Shared& a = shared[i];
        const Shared& b = shared[j];
        if (exact.InOrder(a.task, a.reg, b.task, b.reg) || exact.InOrder(b.task, b.reg, a.task, a.reg)) continue;
        plan::Plan wrong = plan;
        wrong.mutable_tasks(b.task)->mutable_registers(b.reg)->mutable_shared_memory()->set_byte_offset(a.begin);
        EXPECT_FALSE(VerifySharedMemory(wrong).ok()) << "round " << round;
        ++refused;
        i = j = shared.size();  // one pair per plan
      }
  }
  EXPECT_GE(refused, 50);
}

}  // namespace
}  // namespace graph
}  // namespace actorflow

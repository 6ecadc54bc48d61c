// Registers that are slices of another task's register (plan.proto RegisterDesc.slice_of) and
// a reader taking the block whole (InputDesc.whole): the bytes meet in one block without a
// copy, and backpressure still holds every slice until the whole reader acked. And the other
// direction: tasks reading and writing parts of one register in place (InputDesc.part).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <cstring>
#include <set>
#include <thread>

#include "actors/runtime.h"
#include "actors/runtime_testing.h"
#include "actors/proto/plan.pb.h"

namespace actorflow {
namespace {

using testing_support::FinishesWithin;

using testing_support::AddRegister;
using testing_support::AddTask;

plan::InputDesc* Connect(plan::Task* consumer, int64_t producer, bool control = false) {
  plan::InputDesc* in = consumer->add_inputs();
  in->set_producer_task_id(producer);
  in->set_control(control);
  return in;
}

void FillConsumers(plan::Plan& plan) {
  for (const plan::Task& t : plan.tasks()) {
    std::set<std::pair<int64_t, int>> seen;
    for (const plan::InputDesc& in : t.inputs())
      if (seen.insert({in.producer_task_id(), in.producer_register()}).second)
        plan.mutable_tasks(in.producer_task_id())->mutable_registers(in.producer_register())->add_consumer_task_ids(t.id());
  }
}

// x -> writer@d (d < 3, rows 3/2/2, each a slice of writer@0's block) -> `whole` reads the
// block (7 rows) and copies it out; `slice_reader` reads writer@1's slice alone, slowly, so
// writer@1's registers come back on another schedule than the others'. Main sink: both.
constexpr int kWriters = 3;
const int64_t kRows[kWriters] = {3, 2, 2};
constexpr int64_t kTotal = 7;

plan::Plan SlicePlan(int register_num) {
  plan::Plan plan;
  plan.set_job_name("slices");
  AddRegister(AddTask(plan, "x", plan::SOURCE), 1, register_num);
  int64_t offset = 0;
  for (int d = 0; d < kWriters; ++d) {
    plan::Task* w = AddTask(plan, "writer@" + std::to_string(d), plan::COMPUTE, "write");
    (*w->mutable_attrs())["device"].set_i(d);
    (*w->mutable_attrs())["offset"].set_i(offset);
    Connect(w, 0);
    plan::RegisterDesc* r = AddRegister(w, kRows[d], register_num);
    if (d == 0) {
      r->set_reserved_byte_size(kTotal * 4);
    } else {
      r->mutable_slice_of()->set_task_id(1);
      r->mutable_slice_of()->set_register_index(0);
      r->mutable_slice_of()->set_byte_offset(offset * 4);
    }
    offset += kRows[d];
  }
  plan::Task* whole = AddTask(plan, "whole", plan::COMPUTE, "copy_slowly");
  plan::InputDesc* in = Connect(whole, 1);
  in->set_whole(true);
  in->set_has_view(true);
  in->add_view_shape(kTotal);
  for (int d = 1; d < kWriters; ++d) Connect(whole, 1 + d, /*control=*/true);
  AddRegister(whole, kTotal, register_num);
  plan::Task* slice_reader = AddTask(plan, "slice_reader", plan::COMPUTE, "copy_slowly");
  Connect(slice_reader, 2);
  AddRegister(slice_reader, kRows[1], register_num);
  plan::Task* sink = AddTask(plan, "output", plan::SINK);
  Connect(sink, whole->id());
  Connect(sink, slice_reader->id());
  FillConsumers(plan);
  return plan;
}

// What writer d writes for input x at logical row r.
float Value(float x, int64_t row) { return x * 100.0f + static_cast<float>(row); }

struct Observed {
  std::mutex mu;
  std::vector<const char*> writer_base[kWriters];  // per act, where the writer wrote
  std::vector<const char*> whole_base;             // per act, where the reader read
  std::atomic<int64_t> written[kWriters] = {}, read{0};
  std::atomic<int64_t> max_lead{0};
};

RuntimeHooks SliceHooks(Observed* seen) {
  RuntimeHooks hooks;
  hooks.make_kernel = [seen](const plan::Task& t) -> StatusOr<KernelFn> {
    if (t.op_type() == "write") {
      const int d = static_cast<int>(t.attrs().at("device").i());
      const int64_t offset = t.attrs().at("offset").i();
      return KernelFn([seen, d, offset](KernelContext& c) {
        // Writers race ahead at different paces; the whole reader must still see each
        // iteration's rows, never a later iteration's.
        if (d == 2) std::this_thread::sleep_for(std::chrono::microseconds(30));
        const float x = *c.input(0).as<float>();
        float* out = c.output(0).as<float>();
        for (int64_t r = 0; r < c.output(0).desc.shape[0]; ++r) out[r] = Value(x, offset + r);
        const int64_t lead = seen->written[d].fetch_add(1) + 1 - seen->read.load();
        int64_t prev = seen->max_lead.load();
        while (lead > prev && !seen->max_lead.compare_exchange_weak(prev, lead)) {}
        std::lock_guard<std::mutex> lock(seen->mu);
        seen->writer_base[d].push_back(static_cast<const char*>(c.output(0).data));
        return Status::Ok();
      });
    }
    const bool whole = t.name() == "whole";
    return KernelFn([seen, whole](KernelContext& c) {
      std::this_thread::sleep_for(std::chrono::microseconds(whole ? 200 : 350));
      std::memcpy(c.output(0).data, c.input(0).data, c.input(0).byte_size());
      if (whole) {
        seen->read.fetch_add(1);
        std::lock_guard<std::mutex> lock(seen->mu);
        seen->whole_base.push_back(static_cast<const char*>(c.input(0).data));
      }
      return Status::Ok();
    });
  };
  return hooks;
}

TEST(RegisterSlices, WholeReaderSeesEverySliceOfItsIterationInOneBlock) {
  for (int register_num : {1, 2, 3}) {
    SCOPED_TRACE("register_num " + std::to_string(register_num));
    const plan::Plan plan = SlicePlan(register_num);
    Observed seen;
    constexpr int kIterations = 60;
    std::vector<float> xs(kIterations), whole(kIterations * kTotal, -1), slice(kIterations * kRows[1], -1);
    FinishesWithin(std::chrono::seconds(60), "slice plan", [&] {
      RuntimeOptions options;
      options.num_threads = 4;  // writers, readers and the sink on separate workers
      auto runtime = Runtime::Create(plan, SliceHooks(&seen), options);
      ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
      for (int i = 0; i < kIterations; ++i) {
        xs[i] = static_cast<float>(i);
        auto pushed = (*runtime)->Push({{&xs[i], {{1}, DType::kFloat32}}},
                                       {{&whole[i * kTotal], {{kTotal}, DType::kFloat32}},
                                        {&slice[i * kRows[1]], {{kRows[1]}, DType::kFloat32}}},
                                       [](int64_t, const Status& s) { EXPECT_TRUE(s.ok()) << s.ToString(); });
        ASSERT_TRUE(pushed.ok()) << pushed.status().ToString();
      }
      (*runtime)->Drain();
    });
    for (int i = 0; i < kIterations; ++i) {
      for (int64_t r = 0; r < kTotal; ++r) ASSERT_EQ(whole[i * kTotal + r], Value(i, r)) << "iteration " << i << " row " << r;
      for (int64_t r = 0; r < kRows[1]; ++r) ASSERT_EQ(slice[i * kRows[1] + r], Value(i, kRows[0] + r)) << "iteration " << i;
    }
    // No copy: each writer wrote its rows straight into the block the reader read, at its offset.
    ASSERT_EQ(seen.whole_base.size(), static_cast<size_t>(kIterations));
    for (int i = 0; i < kIterations; ++i) {
      int64_t offset = 0;
      for (int d = 0; d < kWriters; ++d) {
        EXPECT_EQ(seen.writer_base[d][i], seen.whole_base[i] + offset * 4) << "iteration " << i << " writer " << d;
        offset += kRows[d];
      }
    }
    // A writer is never more than register_num iterations ahead of the whole reader's acks.
    EXPECT_LE(seen.max_lead.load(), register_num);
  }
}

TEST(RegisterSlices, BadGroupsAreRejectedNamingTheRegisters) {
  RuntimeHooks hooks;
  hooks.make_kernel = [](const plan::Task&) -> StatusOr<KernelFn> { return KernelFn([](KernelContext&) { return Status::Ok(); }); };
  auto rejected = [&](plan::Plan plan, const std::string& expected) {
    auto runtime = Runtime::Create(plan, hooks);
    ASSERT_FALSE(runtime.ok()) << "expected: " << expected;
    EXPECT_NE(runtime.status().message().find(expected), std::string::npos) << runtime.status().message();
  };
  {
    plan::Plan plan = SlicePlan(2);
    plan.mutable_tasks(1)->mutable_registers(0)->set_reserved_byte_size(0);
    rejected(plan, "register 'out' of task 'writer@1' is a slice of register 'out' of task 'writer@0', which reserves no block");
  }
  {
    plan::Plan plan = SlicePlan(2);
    plan.mutable_tasks(3)->mutable_registers(0)->mutable_slice_of()->set_byte_offset(4 * 4);  // into writer@1's rows
    rejected(plan, "overlaps");
  }
  {
    plan::Plan plan = SlicePlan(2);
    plan.mutable_tasks(3)->mutable_registers(0)->mutable_slice_of()->set_byte_offset(6 * 4);  // past the block
    rejected(plan, "outside its 28 reserved bytes");
  }
  {
    plan::Plan plan = SlicePlan(2);
    plan.mutable_tasks(2)->mutable_registers(0)->set_register_num(3);
    rejected(plan, "has 3 registers, not 2");
  }
  {
    plan::Plan plan = SlicePlan(2);
    plan.mutable_tasks(4)->mutable_inputs()->RemoveLast();  // the whole reader forgets writer@2
    rejected(plan, "task 'whole' reads register 'out' of task 'writer@0' whole but not register 'out' of task 'writer@2'");
  }
  {
    plan::Plan plan = SlicePlan(2);
    plan.mutable_tasks(4)->mutable_inputs(0)->set_view_shape(0, 6);
    rejected(plan, "views the block of 'writer@0' (28 bytes) as float32(6,)");
  }
  {
    plan::Plan plan = SlicePlan(2);
    plan.mutable_tasks(5)->mutable_inputs(0)->set_whole(true);  // writer@1 reserves nothing
    rejected(plan, "task 'slice_reader' reads register 0 of 'writer@1' whole");
  }
}

// A variable of 7 floats stored split over three devices (rows 3/2/2): reader@d copies its
// shard through a part view (InputDesc.part), update@d increments the same shard in place after
// it. Each reader sees its rows as of its iteration, each kernel's pointer is the buffer plus
// its shard's offset, and no update touches another shard.
plan::Plan PartViewPlan() {
  plan::Plan plan;
  plan.set_job_name("parts");
  plan::Task* w = AddTask(plan, "w", plan::VARIABLE);
  w->set_variable_name("w");
  AddRegister(w, kTotal, 1);
  int64_t offset = 0;
  auto part = [&](plan::Task* t, int d) {
    plan::InputDesc* in = Connect(t, 0);
    in->set_has_view(true);
    in->add_view_shape(kRows[d]);
    in->set_part(true);
    in->set_byte_offset(offset * 4);
  };
  for (int d = 0; d < kWriters; ++d) {
    plan::Task* reader = AddTask(plan, "reader@" + std::to_string(d), plan::COMPUTE, "copy");
    part(reader, d);
    AddRegister(reader, kRows[d], 2);
    plan::Task* update = AddTask(plan, "update@" + std::to_string(d), plan::COMPUTE, "increment");
    (*update->mutable_attrs())["offset"].set_i(offset);
    part(update, d);
    update->add_mutable_inputs(0);
    Connect(update, reader->id(), /*control=*/true);
    update->add_registers()->set_register_num(2);  // "done": a control register
    offset += kRows[d];
  }
  plan::Task* sink = AddTask(plan, "output", plan::SINK);
  for (int d = 0; d < kWriters; ++d) Connect(sink, 1 + 2 * d);
  for (int d = 0; d < kWriters; ++d) Connect(sink, 2 + 2 * d, /*control=*/true);
  FillConsumers(plan);
  return plan;
}

TEST(PartViews, EachDeviceReadsAndUpdatesItsShardOfOneBufferInPlace) {
  std::vector<float> w(kTotal);
  for (int64_t r = 0; r < kTotal; ++r) w[r] = static_cast<float>(100 * r);
  std::atomic<int> misplaced{0};
  RuntimeHooks hooks;
  hooks.variable_buffer = [&](const plan::Task&) -> StatusOr<void*> { return static_cast<void*>(w.data()); };
  hooks.make_kernel = [&](const plan::Task& t) -> StatusOr<KernelFn> {
    if (t.op_type() == "copy")
      return KernelFn([](KernelContext& c) {
        std::memcpy(c.output(0).data, c.input(0).data, c.input(0).byte_size());
        return Status::Ok();
      });
    const int64_t offset = t.attrs().at("offset").i();
    return KernelFn([&w, &misplaced, offset](KernelContext& c) {
      if (c.input(0).as<float>() != w.data() + offset) ++misplaced;
      for (int64_t r = 0; r < c.input(0).num_elements(); ++r) c.input(0).as<float>()[r] += 1;
      return Status::Ok();
    });
  };
  auto runtime = Runtime::Create(PartViewPlan(), hooks);
  ASSERT_TRUE(runtime.ok()) << runtime.status().ToString();
  constexpr int kIterations = 20;
  std::vector<std::vector<float>> seen(kIterations, std::vector<float>(kTotal));
  FinishesWithin(std::chrono::seconds(60), "part view plan", [&] {
    for (int i = 0; i < kIterations; ++i) {
      std::vector<TensorView> outputs;
      int64_t offset = 0;
      for (int d = 0; d < kWriters; ++d) {
        outputs.push_back(TensorView{seen[i].data() + offset, TensorDesc{{kRows[d]}, DType::kFloat32}});
        offset += kRows[d];
      }
      ASSERT_TRUE((*runtime)->Push({}, outputs, nullptr).ok());
    }
    (*runtime)->Drain();
  });
  EXPECT_EQ(misplaced.load(), 0);
  for (int i = 0; i < kIterations; ++i)
    for (int64_t r = 0; r < kTotal; ++r) EXPECT_EQ(seen[i][r], 100.0f * r + i) << "iteration " << i << " row " << r;
  for (int64_t r = 0; r < kTotal; ++r) EXPECT_EQ(w[r], 100.0f * r + kIterations) << "row " << r;
}

TEST(PartViews, PartsOutsideTheBlobOrBetweenElementsAreRejected) {
  RuntimeHooks hooks;
  std::vector<float> w(kTotal);
  hooks.variable_buffer = [&](const plan::Task&) -> StatusOr<void*> { return static_cast<void*>(w.data()); };
  hooks.make_kernel = [](const plan::Task&) -> StatusOr<KernelFn> {
    return KernelFn([](KernelContext&) { return Status::Ok(); });
  };
  auto rejected = [&](const plan::Plan& plan, const std::string& words) {
    auto runtime = Runtime::Create(plan, hooks);
    ASSERT_FALSE(runtime.ok());
    EXPECT_NE(runtime.status().message().find(words), std::string::npos) << runtime.status().message();
  };
  {
    plan::Plan plan = PartViewPlan();
    plan.mutable_tasks(5)->mutable_inputs(0)->set_byte_offset(6 * 4);  // 2 rows from row 6 of 7
    rejected(plan, "task 'reader@2' views part of float32(7,) of 'w' as float32(2,) at byte 24");
  }
  {
    plan::Plan plan = PartViewPlan();
    plan.mutable_tasks(1)->mutable_inputs(0)->set_byte_offset(2);  // inside an element
    rejected(plan, "at a multiple of the element size");
  }
}

}  // namespace
}  // namespace actorflow

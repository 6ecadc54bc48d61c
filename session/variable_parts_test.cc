// LayoutInPlan and CopyPart (session/variable_parts.h).
#include "session/variable_parts.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace actorflow {
namespace {

plan::Task* AddVariable(plan::Plan& plan, const std::string& name, int machine, std::vector<int64_t> shape,
                        int64_t index = -1, int64_t parts = 0, int64_t axis = 0) {
  plan::Task* task = plan.add_tasks();
  task->set_id(plan.tasks_size() - 1);
  task->set_name(name + "@" + std::to_string(plan.tasks_size()));
  task->set_kind(plan::VARIABLE);
  task->set_variable_name(name);
  task->set_machine_id(machine);
  plan::BlobDesc* blob = task->add_registers()->add_blobs();
  for (int64_t d : shape) blob->add_shape(d);
  blob->set_dtype(plan::DT_FLOAT32);
  if (index >= 0) {
    (*task->mutable_attrs())["shard_index"].set_i(index);
    (*task->mutable_attrs())["shard_parts"].set_i(parts);
    (*task->mutable_attrs())["shard_axis"].set_i(axis);
  }
  return task;
}

TEST(VariablePartsTest, ShardsOnAxisOneCutAndRestoreTheLogicalTensor) {
  plan::Plan plan;
  plan.set_job_name("job");
  // 3 parts of a (2, 5) tensor on axis 1: columns 0-1 (machine 0), 2-3 and 4 (machine 1),
  // listed out of order.
  AddVariable(plan, "w", 1, {2, 1}, 2, 3, 1);
  AddVariable(plan, "w", 0, {2, 2}, 0, 3, 1);
  AddVariable(plan, "w", 1, {2, 2}, 1, 3, 1);
  const TensorDesc desc{{2, 5}, DType::kFloat32};
  StatusOr<VariableLayout> layout = LayoutInPlan(plan, "w", desc);
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  EXPECT_EQ(layout.value().axis, 1);
  EXPECT_EQ(layout.value().machines, (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(layout.value().starts, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(layout.value().PartsOn(1), (std::vector<int>{1, 2}));
  EXPECT_FALSE(layout.value().HeldWholeOn(0));
  EXPECT_EQ(layout.value().ToString(), "split on axis 1 over machines [0, 1, 1]");
  std::vector<float> whole(10);
  std::iota(whole.begin(), whole.end(), 0.f);
  std::vector<float> part(4);
  CopyPart(desc, layout.value(), 1, whole.data(), part.data(), /*into_part=*/true);
  EXPECT_EQ(part, (std::vector<float>{2, 3, 7, 8}));
  std::vector<float> last(2);
  CopyPart(desc, layout.value(), 2, whole.data(), last.data(), true);
  EXPECT_EQ(last, (std::vector<float>{4, 9}));
  std::vector<float> restored(10, -1.f);
  for (size_t index = 0; index < 3; ++index) {
    std::vector<float> piece(layout.value().parts[index].num_elements());
    CopyPart(desc, layout.value(), index, whole.data(), piece.data(), true);
    CopyPart(desc, layout.value(), index, restored.data(), piece.data(), /*into_part=*/false);
  }
  EXPECT_EQ(restored, whole);
}

TEST(VariablePartsTest, WholeCopiesAndBrokenLayouts) {
  plan::Plan plan;
  plan.set_job_name("job");
  AddVariable(plan, "b", 1, {3});
  const TensorDesc desc{{3}, DType::kFloat32};
  StatusOr<VariableLayout> whole = LayoutInPlan(plan, "b", desc);
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(whole.value().HeldWholeOn(1));
  EXPECT_FALSE(whole.value().HeldWholeOn(0));
  EXPECT_EQ(whole.value().ToString(), "whole on machines [1]");
  EXPECT_EQ(LayoutInPlan(plan, "missing", desc).status().code(), StatusCode::kNotFound);
  // One part of two: the shards do not cover the tensor.
  AddVariable(plan, "w", 0, {2, 2}, 0, 2, 1);
  StatusOr<VariableLayout> broken = LayoutInPlan(plan, "w", TensorDesc{{2, 4}, DType::kFloat32});
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("1 shards of 2"), std::string::npos) << broken.status().message();
}

}  // namespace
}  // namespace actorflow

// Actor kinds as policies (actors/task_state.h): what each plan task becomes.
#include <gtest/gtest.h>

#include "actors/task_state.h"

namespace actorflow {
namespace {

plan::Task TaskOf(plan::TaskKind kind, bool asynchronous = false) {
  plan::Task task;
  task.set_name("t");
  task.set_kind(kind);
  task.set_asynchronous(asynchronous);
  return task;
}

std::string PoliciesOf(const plan::Task& task, bool has_in_edges) {
  auto policies = TaskPolicies::For(task, has_in_edges);
  return policies.ok() ? policies.value().ToString() : "error: " + policies.status().message();
}

TEST(TaskPolicies, EachTaskKindIsAComposition) {
  EXPECT_EQ(PoliciesOf(TaskOf(plan::SOURCE), false), "input=none output=host act=none");
  EXPECT_EQ(PoliciesOf(TaskOf(plan::COMPUTE), true), "input=ring output=own act=kernel");
  EXPECT_EQ(PoliciesOf(TaskOf(plan::COMPUTE), false), "input=tick output=own act=kernel");
  EXPECT_EQ(PoliciesOf(TaskOf(plan::COMPUTE, true), true), "input=ring output=own act=async_kernel");
  EXPECT_EQ(PoliciesOf(TaskOf(plan::SINK), true), "input=ring output=own act=deliver");
  EXPECT_EQ(PoliciesOf(TaskOf(plan::VARIABLE), false), "input=tick output=external act=none");
  EXPECT_EQ(PoliciesOf(TaskOf(plan::VARIABLE), true), "input=ring output=external act=none");
}

TEST(TaskPolicies, CombinationsWithoutAnActorAreRejected) {
  EXPECT_EQ(PoliciesOf(TaskOf(plan::TASK_KIND_UNSPECIFIED), true), "error: plan: task 't' has no kind");
  EXPECT_EQ(PoliciesOf(TaskOf(plan::VARIABLE, true), false),
            "error: plan: task 't' is asynchronous, but only compute tasks can be (it is a VARIABLE)");
  EXPECT_EQ(PoliciesOf(TaskOf(plan::SOURCE, true), false),
            "error: plan: task 't' is asynchronous, but only compute tasks can be (it is a SOURCE)");
}

}  // namespace
}  // namespace actorflow

// The runtime's task states by task index (actors/task_state.h), named here for headers that
// only pass them on.
#pragma once

#include <memory>
#include <vector>

namespace actorflow {

class TaskState;
struct EndTaskState;  // a state lives in its runtime's arena: deleting it only ends it
using TaskStatePtr = std::unique_ptr<TaskState, EndTaskState>;
using TaskStates = std::vector<TaskStatePtr>;

}  // namespace actorflow

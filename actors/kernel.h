// What the runtime knows of a kernel: a callable over tensor views. Nothing of ops.
#pragma once

#include <functional>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"

namespace actorflow {

// Filled by the owning actor before each act. The vectors are owned by the actor and
// reused across iterations (only data pointers change), so acting never allocates.
struct KernelContext {
  const std::vector<TensorView>* inputs = nullptr;   // data inputs, in InputDesc order (control inputs excluded)
  const std::vector<TensorView>* outputs = nullptr;  // blobs of the task's free output registers, in register/blob order
  int64_t iteration = 0;

  const TensorView& input(size_t i) const { return (*inputs)[i]; }
  const TensorView& output(size_t i) const { return (*outputs)[i]; }
  size_t num_inputs() const { return inputs->size(); }
  size_t num_outputs() const { return outputs->size(); }
};

// A kernel may keep state in its closure (RNG, moving statistics); it is only ever
// called from its owning actor, one act at a time.
using KernelFn = std::function<Status(KernelContext&)>;

}  // namespace actorflow

// Eager autograd: what an op records when grad mode is on and an input requires grad, and
// backward(), which walks the record in reverse topological order and runs each op's
// OpDef::grad through an eager GradBuilder (its AddOp executes at once) — the compiler's
// gradient rules, not a second copy.
//
// Rules (PyTorch's): a tensor made by the user is a leaf; an op output with a recorded node is
// not. backward() accumulates into the .grad of leaves that require grad (and of non-leaves
// that asked for retain_grad()); a gradient that arrives at a leaf is added to what .grad
// holds. Without retain_graph the saved tensors are freed after the pass, and a second
// backward through the same nodes is a FailedPrecondition saying so. Saved tensors share
// storage with the tensors they came from; a node records their versions, and backward refuses
// (FailedPrecondition naming the op) to let a gradient rule read a saved tensor written in
// place since (tensors the rule does not read may change: add's inputs, batch norm's moving
// statistics).
//
// Thread-safety: recording is per op call; one backward at a time may walk a given graph (two
// threads backpropagating through shared nodes must be ordered by the caller, as in PyTorch).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "session/eager.h"

namespace actorflow {

// Where an input's gradient goes: the node that produced the input (and which of its outputs),
// or a leaf that requires grad. Neither: no gradient is needed there.
struct GradEdge {
  std::shared_ptr<GradNode> node;
  int output_index = 0;
  EagerTensorPtr leaf;
  bool valid() const { return node != nullptr || leaf != nullptr; }
};

struct GradNode {
  const OpDef* def = nullptr;
  Attrs attrs;
  std::vector<EagerTensorPtr> inputs;           // the inputs' data (shares storage)
  std::vector<EagerTensorPtr> outputs;          // the outputs' data, without history (no cycle)
  std::vector<std::weak_ptr<EagerTensor>> output_tensors;  // for retain_grad()
  std::vector<TensorDesc> input_descs, output_descs;
  std::vector<int64_t> input_versions, output_versions;  // of the saved tensors when recorded
  std::vector<GradEdge> edges;  // one per input
  int64_t sequence = 0;         // creation order: later nodes run first among the ready ones
  bool released = false;        // saved tensors freed by a backward without retain_graph
  const std::string& type() const { return def->type; }
};

// Records `outputs` as made by `op` from `inputs` when grad mode is on, the op is
// differentiable and some input requires grad; otherwise does nothing.
void RecordGradNode(const OpDef& def, const Attrs& attrs, const std::vector<EagerTensorPtr>& inputs,
                    const std::vector<EagerTensorPtr>& outputs);

// backward() of `root` with `gradient` (nullptr: ones, allowed only for a one-element root).
// Errors: root does not require grad; gradient's desc differs from root's; a node was freed by
// an earlier backward without retain_graph; a gradient rule failed (naming the op).
Status Backward(const EagerTensorPtr& root, const EagerTensorPtr& gradient, bool retain_graph);

}  // namespace actorflow

// Building blocks of the ops' SBP functions (OpDef::sbp). Every function here returns concrete
// signatures: one Sbp per actual input and output, explicit axes valid for the instance's ranks.
//
// A split is offered only on an axis whose extent is at least the number of devices, so that
// no device gets an empty share (kernels and the boxing never see zero-sized registers).
#pragma once

#include <vector>

#include "kernels/op_registry.h"

namespace actorflow {

inline bool CanSplit(int64_t extent, int64_t parts) { return parts > 0 && extent >= parts; }

inline SbpSignature MakeSignature(std::vector<Sbp> inputs, std::vector<Sbp> outputs) {
  SbpSignature s;
  s.inputs = std::move(inputs);
  s.outputs = std::move(outputs);
  return s;
}

// Every input and every output laid out as `sbp`.
inline SbpSignature UniformSignature(size_t num_inputs, size_t num_outputs, Sbp sbp) {
  return MakeSignature(std::vector<Sbp>(num_inputs, sbp), std::vector<Sbp>(num_outputs, sbp));
}

inline SbpSignature AllBroadcast(const SbpContext& ctx) {
  return UniformSignature(ctx.inputs.size(), ctx.outputs.size(), Sbp::Broadcast());
}

// Ops whose inputs and outputs all have one shape and whose every output element depends only
// on the input elements at its own position (activations, scalar ops, updates, add_n):
// S(i) everywhere for each splittable axis i, then B everywhere, then P everywhere when `linear`
// (the outputs are a linear function of all inputs together: identity, negation, add_n).
inline std::vector<SbpSignature> ElementwiseSbp(const SbpContext& ctx, bool linear) {
  std::vector<SbpSignature> out;
  const Shape& shape = !ctx.inputs.empty() ? ctx.inputs[0].shape : ctx.outputs[0].shape;
  for (size_t axis = 0; axis < shape.size(); ++axis)
    if (CanSplit(shape[axis], ctx.parts))
      out.push_back(UniformSignature(ctx.inputs.size(), ctx.outputs.size(), Sbp::Split(static_cast<int64_t>(axis))));
  out.push_back(AllBroadcast(ctx));
  if (linear) out.push_back(UniformSignature(ctx.inputs.size(), ctx.outputs.size(), Sbp::PartialSum()));
  return out;
}

// The output axis that input axis `axis` becomes under a reshape from `in` to `out`, or -1.
// Splitting input axis i into contiguous ranges equals splitting output axis j into the same
// ranges when the axes before them hold the same number of elements and the extents match
// (then the axes after them do too): each range is the same run of memory in both.
inline int64_t ReshapedAxis(const Shape& in, const Shape& out, int64_t axis) {
  int64_t before = 1;
  for (int64_t d = 0; d < axis; ++d) before *= in[d];
  int64_t out_before = 1;
  for (size_t j = 0; j < out.size(); ++j) {
    if (out_before == before && out[j] == in[axis]) return static_cast<int64_t>(j);
    if (out_before > before) return -1;
    out_before *= out[j];
  }
  return -1;
}

}  // namespace actorflow

#include "kernels/conv_sbp.h"

#include <map>

#include "kernels/sbp_util.h"

namespace actorflow {

StatusOr<std::vector<SbpSignature>> ConvSbp(const SbpContext& ctx, std::vector<ConvRole> inputs, ConvRole output) {
  std::map<ConvRole, Shape> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) shapes[inputs[i]] = ctx.inputs[i].shape;
  shapes[output] = ctx.outputs[0].shape;
  const bool grouped = ctx.attrs.GetIntOr("groups", 1) != 1;
  const Sbp B = Sbp::Broadcast(), P = Sbp::PartialSum();
  // The layout of each role under one way of splitting; the role that lacks the split axis
  // (the reduced one) is whole as an input and partial as the output.
  auto add = [&](std::map<ConvRole, Sbp> split, std::vector<SbpSignature>* out) {
    SbpSignature s;
    for (ConvRole r : inputs) s.inputs.push_back(split.count(r) ? split[r] : B);
    s.outputs.push_back(split.count(output) ? split[output] : P);
    out->push_back(s);
  };
  std::vector<SbpSignature> out = {AllBroadcast(ctx)};
  // A fused epilogue or bias gradient (one device: graph/conv_fusion.cc) runs whole.
  if (ctx.inputs.size() != inputs.size() || ctx.outputs.size() != 1) return out;
  const bool channels_last = ctx.attrs.GetStringOr("data_format", "NCHW") == "NHWC" ||
                             ctx.attrs.GetStringOr("data_format", "NCHW") == "channels_last";
  const int64_t channel_axis = channels_last ? 3 : 1;
  const int64_t n = shapes[ConvRole::kX][0], c = shapes[ConvRole::kX][channel_axis], o = shapes[ConvRole::kFilter][0];
  if (CanSplit(n, ctx.parts)) add({{ConvRole::kX, Sbp::Split(0)}, {ConvRole::kY, Sbp::Split(0)}}, &out);
  if (!grouped && CanSplit(o, ctx.parts))
    add({{ConvRole::kFilter, Sbp::Split(0)}, {ConvRole::kY, Sbp::Split(channel_axis)}}, &out);
  if (!grouped && CanSplit(c, ctx.parts))
    add({{ConvRole::kX, Sbp::Split(channel_axis)}, {ConvRole::kFilter, Sbp::Split(1)}}, &out);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == output) continue;  // the "like" input: only its shape is read
    SbpSignature partial = AllBroadcast(ctx);
    partial.inputs[i] = partial.outputs[0] = P;
    out.push_back(partial);
  }
  return out;
}


}  // namespace actorflow

// SBP signatures of the convolution passes (conv2d, conv2d_grad_data, conv2d_grad_filter).
#pragma once

#include <vector>

#include "kernels/op_registry.h"
#include "kernels/sbp.h"

namespace actorflow {

// The three convolution passes share one structure over x (N,C,H,W), filter (O,C/g,KH,KW) and
// y (N,O,OH,OW): a sample split of x and y (the filter whole; its gradient then partial), an
// out-channel split of the filter and y (x whole; x's gradient then partial), an in-channel
// split of x and the filter (y partial), and a partial sum through any one input with the others
// whole (each pass is linear in each input). Channel splits need groups=1: with groups a
// device's share of the channels would not hold whole groups.
enum class ConvRole { kX, kFilter, kY };

// The signatures of a pass whose inputs play `inputs` and whose output plays `output`.
StatusOr<std::vector<SbpSignature>> ConvSbp(const SbpContext& ctx, std::vector<ConvRole> inputs, ConvRole output);

}  // namespace actorflow

// 2-D window geometry shared by conv2d and the pools (NCHW): reading strides, dilation, kernel
// size and padding attributes, and the output size. Padding is "SAME" (TensorFlow's: output
// = ceil(in / stride), the odd pixel of padding at the bottom/right), "VALID", or explicit ints:
// 2 [h, w] (both sides), 4 [top, bottom, left, right], or 8 (OneFlow's per-dimension pairs
// [[0,0],[0,0],[top,bottom],[left,right]] flattened).
#pragma once

#include <string>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"
#include "kernels/op_registry.h"

namespace actorflow {

struct Window2d {
  int64_t n = 0, c = 0, h = 0, w = 0;       // input
  int64_t kh = 1, kw = 1;                   // window (filter) size
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;   // strides, dilation
  int64_t top = 0, bottom = 0, left = 0, right = 0;
  int64_t oh = 0, ow = 0;                   // output
};

// `kernel_hw` comes from the filter (conv) or attr ksize (pools); `what` prefixes errors.
StatusOr<Window2d> ReadWindow(const Shape& x, int64_t kh, int64_t kw, const Attrs& attrs, const std::string& what,
                              bool allow_dilation);

// An int or a list of 2 ints (h, w) under `name`, defaulting to `fallback`.
StatusOr<std::pair<int64_t, int64_t>> ReadPair(const Attrs& attrs, const std::string& name, int64_t fallback);

// data_format must be NCHW ("channels_first" accepted); anything else is a clear error.
Status CheckNchw(const Attrs& attrs);

}  // namespace actorflow

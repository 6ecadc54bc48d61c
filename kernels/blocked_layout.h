// The blocked channel layout of oneDNN's CPU convolutions, nChw{B}c: a (N,C,H,W) tensor stored as
// (N, C/B, H, W, B), element (n, c, h, w) at ((n * C/B + c/B) * H + h) * W + w) * B + c % B. Its
// convolutions compute in it whatever their registers hold, so between convolutions, pools and
// relus of one chain a plain NCHW register costs a reorder pass at each end of each convolution
// (graph/blocked_layout.cc keeps such tensors blocked instead). C must be a multiple of B: the
// blocked tensor then has the plain one's size, and its logical shape stays (N,C,H,W).
//
// The compiler marks the blocked tensors of an op with attributes (never set by users):
//   channel_block (int, 8 or 16), blocked_inputs / blocked_outputs (int lists: slot indices).
// Ops reading them: conv2d (x; out), conv2d_grad_data (dy; dx), conv2d_grad_filter (dy, x),
// max_pool2d / avg_pool2d (x; out), max_pool2d_grad (x, dy; dx), avg_pool2d_grad (dy; dx).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/op_registry.h"

namespace actorflow {

struct BlockedLayout {
  int64_t block = 0;                 // 0: every tensor plain
  std::vector<bool> inputs, outputs;  // per slot: stored blocked
  bool input(size_t i) const { return block > 0 && i < inputs.size() && inputs[i]; }
  bool output(size_t i) const { return block > 0 && i < outputs.size() && outputs[i]; }
};

// The channel block oneDNN's convolutions use on this CPU: 16 with AVX-512, 8 with AVX2, 0 (no
// blocked layout worth keeping) otherwise.
int64_t NativeChannelBlock();

// Reads the attributes above for an op with these input and output descriptions. Errors name
// the op and the slot: a block other than 8 or 16, a slot out of range, a slot listed for a
// tensor that is not float32 (N,C,H,W) with C a multiple of the block, a slot the op cannot
// read or write blocked (`allowed_inputs` / `allowed_outputs`).
StatusOr<BlockedLayout> ReadBlockedLayout(const std::string& op, const Attrs& attrs, const std::vector<TensorDesc>& inputs,
                                          const std::vector<TensorDesc>& outputs, const std::vector<int>& allowed_inputs,
                                          const std::vector<int>& allowed_outputs);

// Plain (N,C,H,W) <-> nChw{block}c copies (tests and reference code; C % block == 0).
void PlainToBlocked(const float* plain, float* blocked, int64_t n, int64_t c, int64_t plane, int64_t block);
void BlockedToPlain(const float* blocked, float* plain, int64_t n, int64_t c, int64_t plane, int64_t block);

}  // namespace actorflow

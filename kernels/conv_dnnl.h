// The oneDNN state of one convolution kernel (conv_kernel.cc's acts, conv_chunked.cc's batch
// chunks): the primitive of one pass, its tensors bound to the registers, prebuilt reorders
// between the registers' plain layouts and the blocked ones oneDNN computes in, the scratchpad.
// Everything is allocated when built, so an act never allocates. Owned by one kernel; used by
// its acting thread only.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/conv_kernel.h"

namespace actorflow {

// One tensor of a oneDNN convolution: `user` wraps the register (plain nchw/nhwc/oihw, handle
// set each act); when the primitive prefers a blocked layout, `internal` (allocated at build
// time) holds that layout and a prebuilt reorder copies in (inputs) or out (the output).
struct BoundTensor {
  dnnl::memory user, internal;
  std::optional<dnnl::reorder> reorder;
  std::vector<dnnl_exec_arg_t> reorder_args;
  bool is_output = false;
  const dnnl::memory& used() const { return reorder ? internal : user; }
};

struct DnnlConv {
  dnnl::primitive primitive;
  dnnl::stream stream;
  BoundTensor tensors[3];  // x, w, y
  dnnl::memory scratchpad;
  std::vector<dnnl_exec_arg_t> args;
  int threads = 1;
  // Forward epilogue: the bias register (fuse_bias alone) or the per-channel scale and shift
  // (fuse_batch_norm: binary post-ops, recomputed each act from the statistics' registers).
  ConvEpilogue epilogue;
  dnnl::memory bias, scale, shift;
  // Forward weights in a blocked layout: the reorder is skipped while the plain weights equal
  // `weights_seen` (the bytes of the last reorder; inference reads the same weights call after
  // call). Weights found changed on two acts in a row (training) end the caching for good.
  bool cache_weights = false, weights_seen_valid = false;
  int weights_changed_streak = 0;
  std::vector<char> weights_seen;
  std::string implementation;  // oneDNN's name for the kernel it chose (backward filter only)
  // The weights' reorder (in, or out for the filter gradient) is left to the caller: batch
  // chunks share one blocked copy of the weights, and sum their blocked filter gradients
  // before one reorder out (MakeBatchChunkedConv).
  bool weights_by_caller = false;
};

// Whether the forward weights must be reordered this act (see DnnlConv::cache_weights).
bool WeightsNeedReorder(DnnlConv& state, const void* weights);

// The primitive of `pass` for this geometry, made for `threads` OpenMP threads.
StatusOr<std::shared_ptr<DnnlConv>> BuildDnnlConv(ConvPass pass, const ConvGeometry& g, const ConvEpilogue& epilogue, int threads);

}  // namespace actorflow

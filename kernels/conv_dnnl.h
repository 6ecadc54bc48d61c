// The oneDNN state of one convolution kernel (conv_kernel.cc's acts, conv_chunked.cc's batch
// chunks): the primitive of one pass, its tensors bound to the registers, prebuilt reorders
// between the registers' plain layouts and the blocked ones oneDNN computes in, the scratchpad.
// Everything is allocated when built, so an act never allocates. Owned by one kernel; used by
// its acting thread only.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <atomic>
#include <cstdint>
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

// When the weights' blocked copy must be made again. With a version counter (the kernel's
// KernelInit::input_versions for the filter: a variable its job only reads, a saved model's
// weights): exactly when the counter's value or the weights' address differs from the last
// reorder's; the weights are not read to decide. Without one (train jobs, outside memory without
// a counter), forward only: while the plain weights equal `seen` (the bytes of the last reorder;
// inference reads the same weights call after call) the reorder is skipped; weights found
// changed on two acts in a row (training) end the caching for good.
struct ConvWeightsCache {
  bool enabled = false;  // false: reorder on every act
  std::shared_ptr<const std::atomic<int64_t>> version;
  bool valid = false;  // the blocked copy holds the weights as last seen (a failed act clears it)
  const void* from = nullptr;  // with a version: the address and value at the last reorder
  int64_t version_seen = 0;
  int changed_streak = 0;  // without: acts in a row that found the bytes changed
  std::vector<char> seen;
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
  // The weights' blocked copy (tensors[1].internal) as an input: made again only when the
  // weights may have changed (ConvWeightsCache, WeightsNeedReorder).
  ConvWeightsCache weights;
  std::string implementation;  // oneDNN's name for the kernel it chose (backward filter only)
  // The weights' reorder (in, or out for the filter gradient) is left to the caller: batch
  // chunks share one blocked copy of the weights, and sum their blocked filter gradients
  // before one reorder out (MakeBatchChunkedConv).
  bool weights_by_caller = false;
};

// Whether the weights (plain, at `weights`) must be reordered into the blocked copy this act
// (ConvWeightsCache); on true the caller reorders, and clears `valid` if that fails.
bool WeightsNeedReorder(DnnlConv& state, const void* weights);
// Counts one reorder of weights into a blocked copy (ConvWeightsReorders).
void CountWeightsReorder();

// The primitive of `pass` for this geometry, made for `threads` OpenMP threads. The weights'
// blocked copy is kept between acts (ConvWeightsCache) in the forward pass, and in the data
// gradient pass when `weights_version` is given.
StatusOr<std::shared_ptr<DnnlConv>> BuildDnnlConv(ConvPass pass, const ConvGeometry& g, const ConvEpilogue& epilogue, int threads,
                                                  std::shared_ptr<const std::atomic<int64_t>> weights_version);

}  // namespace actorflow

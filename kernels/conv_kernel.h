// The CPU kernels of the convolution passes (conv.cc defines the ops: inputs, attrs, epilogues).
// float32 runs oneDNN convolution primitives built once per kernel (conv_dnnl.h); float64 runs
// direct loops (gradient checks); a channels-last 1x1 forward convolution is one GEMM. With
// several threads a pass may be split over the batch (MakeBatchChunkedConv, conv_chunked.cc).
// Kernels are owned by one actor: an act at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "kernels/op_registry.h"
#include "kernels/window.h"

namespace actorflow {

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

struct ConvGeometry {
  Window2d win;
  int64_t out_channels = 0, groups = 1;
  bool channels_last = false;  // x and out are (N,H,W,C) in memory and in their shapes
  // Channel block of x's and y's storage (kernels/blocked_layout.h; 0: plain), NCHW float32 only.
  int64_t x_block = 0, y_block = 0;
};

// The forward pass's epilogue (conv.cc's header comment): which extra inputs follow x and filter.
struct ConvEpilogue {
  bool bias = false, batch_norm = false;
  double epsilon = 1e-5;
  enum class Activation { kNone, kRelu, kClip } activation = Activation::kNone;
  float low = 0, high = 0;
  bool any() const { return bias || batch_norm || activation != Activation::kNone; }
  int extra_inputs() const { return (bias ? 1 : 0) + (batch_norm ? 4 : 0); }
};

struct DnnlConv;  // conv_dnnl.h

// A 1x1 convolution with stride 1 and no padding over channels-last tensors (one GEMM).
bool IsPointwiseChannelsLast(const ConvGeometry& g);

// Its forward kernel (float32): y (N*H*W, O) = x (N*H*W, C) * filter (O, C)^T, then the
// epilogue. A filter with a version counter (`weights_version`: a predict job's weights) is kept
// in oneDNN's packed layout from 16 rows on and packed again only when the version or the
// filter's address changes (kernels/matmul_packed.h, PackedGemm: dnnl_sgemm packs it inside
// every call), the rows split over the threads; packed_weights=false (attr, as matmul's) keeps
// dnnl_sgemm over the filter where it lies.
KernelFn MakePointwiseGemm(const ConvGeometry& g, const ConvEpilogue& epilogue, int threads,
                           std::shared_ptr<const std::atomic<int64_t>> weights_version, bool packed_weights);

// Builds the kernel of one pass; x, w, y come from the inputs/outputs named by index (>= 100:
// output index - 100). `weights_version`: the filter input's version counter
// (KernelInit::input_versions; null: none), which keys the blocked copy of the weights
// (conv_dnnl.h, ConvWeightsCache). `built` (optional): receives the oneDNN state when the kernel
// runs one (null otherwise).
StatusOr<KernelFn> MakeConvKernel(ConvPass pass, const ConvGeometry& g, const ConvEpilogue& epilogue, DType dtype, int threads,
                                  int x_at, int w_at, int y_at,
                                  std::shared_ptr<const std::atomic<int64_t>> weights_version = nullptr,
                                  std::shared_ptr<DnnlConv>* built = nullptr);

// The version counter of input `at` (KernelInit::input_versions), null for none or an output
// (at >= 100).
inline std::shared_ptr<const std::atomic<int64_t>> ConvInputVersion(const KernelInit& init, int at) {
  return at >= 0 && at < static_cast<int>(init.input_versions.size()) ? init.input_versions[at] : nullptr;
}

// Reorders of a filter into oneDNN's blocked layout (forward and data gradient passes) by every
// conv kernel of the process so far (tests: which acts reordered).
int64_t ConvWeightsReorders();

// The pass split over the batch into single-threaded chunks (conv_chunked.cc); float32, at
// least one sample per chunk.
StatusOr<KernelFn> MakeBatchChunkedConv(const KernelInit& init, ConvPass pass, const ConvGeometry& g,
                                        const ConvEpilogue& epilogue, int x_at, int w_at, int y_at);

}  // namespace actorflow

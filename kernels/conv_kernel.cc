// The acts of one convolution pass (conv_kernel.h): oneDNN's primitive with its reorders and the
// forward epilogue, the float64 loops, the channels-last 1x1 GEMM.
#include "kernels/conv_kernel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>

#include "kernels/conv_depthwise.h"
#include "kernels/conv_dnnl.h"
#include "kernels/matmul_packed.h"

namespace actorflow {
namespace {

// Element offset of (n, c, h, w) in a (N,C,H,W) tensor stored NCHW or NHWC.
inline int64_t Offset(bool channels_last, int64_t channels, int64_t height, int64_t width, int64_t n, int64_t c, int64_t h,
                      int64_t w) {
  return channels_last ? ((n * height + h) * width + w) * channels + c : ((n * channels + c) * height + h) * width + w;
}

// Direct convolution loops; `pass` picks which of x, w, y is accumulated (after zeroing).
template <typename T>
void ConvLoops(ConvPass pass, const ConvGeometry& g, T* x, T* w, T* y) {
  const Window2d& s = g.win;
  const bool last = g.channels_last;
  int64_t cg = s.c / g.groups, og = g.out_channels / g.groups;
  if (pass == ConvPass::kForward) std::memset(y, 0, sizeof(T) * s.n * g.out_channels * s.oh * s.ow);
  if (pass == ConvPass::kBackwardData) std::memset(x, 0, sizeof(T) * s.n * s.c * s.h * s.w);
  if (pass == ConvPass::kBackwardFilter) std::memset(w, 0, sizeof(T) * g.out_channels * cg * s.kh * s.kw);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o) {
      int64_t group = o / og;
      for (int64_t oh = 0; oh < s.oh; ++oh)
        for (int64_t ow = 0; ow < s.ow; ++ow) {
          T* yp = y + Offset(last, g.out_channels, s.oh, s.ow, n, o, oh, ow);
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t kh = 0; kh < s.kh; ++kh) {
              int64_t ih = oh * s.sh - s.top + kh * s.dh;
              if (ih < 0 || ih >= s.h) continue;
              for (int64_t kw = 0; kw < s.kw; ++kw) {
                int64_t iw = ow * s.sw - s.left + kw * s.dw;
                if (iw < 0 || iw >= s.w) continue;
                T* xp = x + Offset(last, s.c, s.h, s.w, n, group * cg + ic, ih, iw);
                T* wp = w + ((o * cg + ic) * s.kh + kh) * s.kw + kw;
                switch (pass) {
                  case ConvPass::kForward: *yp += *xp * *wp; break;
                  case ConvPass::kBackwardData: *xp += *yp * *wp; break;
                  case ConvPass::kBackwardFilter: *wp += *yp * *xp; break;
                }
              }
            }
        }
    }
}

// scale = gamma * inv_std and shift = beta + (bias - mean) * scale per output channel, in the
// batch_normalization kernel's precision (inv_std from the double 1 / sqrt(var + eps)).
void BatchNormScaleShift(const ConvEpilogue& e, KernelContext& c, int64_t channels, float* scale, float* shift) {
  const int first = e.bias ? 3 : 2;
  const float* bias = e.bias ? c.input(2).as<float>() : nullptr;
  const float* gamma = c.input(first).as<float>();
  const float* beta = c.input(first + 1).as<float>();
  const float* mean = c.input(first + 2).as<float>();
  const float* var = c.input(first + 3).as<float>();
  for (int64_t o = 0; o < channels; ++o) {
    const float inv_std = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[o]) + e.epsilon));
    scale[o] = gamma[o] * inv_std;
    shift[o] = beta[o] - mean[o] * scale[o];
    if (bias != nullptr) shift[o] += bias[o] * scale[o];
  }
}

// y = activation(y * scale[o] + shift[o]) over `rows` rows of `channels` (scale, shift may be
// null), in parallel when large. NaN stays NaN through both activations (every comparison with
// it is false), as the relu and clamp kernels keep it.
void ApplyEpilogue(float* y, int64_t rows, int64_t channels, const float* scale, const float* shift, const ConvEpilogue& e,
                   int threads) {
  const bool relu = e.activation == ConvEpilogue::Activation::kRelu;
  const bool clip = e.activation == ConvEpilogue::Activation::kClip;
  const float low = e.low, high = e.high;
#pragma omp parallel for num_threads(threads) if (rows * channels >= (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict row = y + r * channels;
    for (int64_t o = 0; o < channels; ++o) {
      float v = row[o];
      if (scale != nullptr) v *= scale[o];
      if (shift != nullptr) v += shift[o];
      if (relu) v = v < 0.0f ? 0.0f : v;
      if (clip) v = v < low ? low : (v > high ? high : v);
      row[o] = v;
    }
  }
}

// Depthwise over NCHW: one filter per channel.
bool IsDepthwiseChannelsFirst(const ConvGeometry& g) {
  return !g.channels_last && g.x_block == 0 && g.y_block == 0 && g.groups == g.win.c && g.out_channels == g.win.c;
}

// The packed filter of a 1x1 convolution from this many rows on, at least this many per piece (as
// matmul's: fewer rows read the filter about once anyway).
constexpr int64_t kPackedMinRows = 16, kPackedMinPartRows = 8;

}  // namespace

// A 1x1 convolution with stride 1 and no padding over channels-last tensors is one GEMM,
// y (N*H*W, O) = x (N*H*W, C) * filter (O, C)^T: oneDNN's sgemm reads the registers as they are
// (no weight reorder) and beats its 1x1 convolution kernels on these shapes, most on the small
// spatial sizes of late layers where N*H*W is just the batch.
bool IsPointwiseChannelsLast(const ConvGeometry& g) {
  const Window2d& s = g.win;
  return g.channels_last && g.groups == 1 && s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.top == 0 && s.bottom == 0 &&
         s.left == 0 && s.right == 0;
}

KernelFn MakePointwiseGemm(const ConvGeometry& g, const ConvEpilogue& epilogue, int threads,
                           std::shared_ptr<const std::atomic<int64_t>> weights_version, bool packed_weights) {
  const int64_t rows = g.win.n * g.win.h * g.win.w, in = g.win.c, out = g.out_channels;
  struct State {
    std::vector<float> scale, shift;
  };
  auto state = std::make_shared<State>();
  if (epilogue.batch_norm) state->scale.resize(out), state->shift.resize(out);
  threads = std::max(1, threads);
  // Per act: the scale and shift the epilogue applies (null: none).
  auto epilogue_terms = [=](KernelContext& c, const float*& scale, const float*& shift) {
    scale = shift = nullptr;
    if (epilogue.batch_norm) {
      BatchNormScaleShift(epilogue, c, out, state->scale.data(), state->shift.data());
      scale = state->scale.data(), shift = state->shift.data();
    } else if (epilogue.bias) {
      shift = c.input(2).as<float>();
    }
  };
  std::shared_ptr<PackedGemm> packed;
  if (weights_version != nullptr && packed_weights && rows >= kPackedMinRows)
    packed = PackedGemm::Make(false, true, rows, out, in, static_cast<int>(std::min<int64_t>(threads, rows / kPackedMinPartRows)),
                              std::move(weights_version));
  if (packed)
    return [=](KernelContext& c) {
      float* y = c.output(0).as<float>();
      const float *scale, *shift;
      epilogue_terms(c, scale, shift);
      auto after_part = [&](int64_t begin, int64_t end) {
        if (epilogue.any()) ApplyEpilogue(y + begin * out, end - begin, out, scale, shift, epilogue, 1);
      };
      omp_set_num_threads(1);
      return packed->Run(c.input(1).as<float>(), c.input(0).as<float>(), y, after_part,
                         "oneDNN matmul (1x1 convolution over packed weights)");
    };
  return [=](KernelContext& c) {
    omp_set_num_threads(threads);
    const float* x = c.input(0).as<float>();
    const float* w = c.input(1).as<float>();
    float* y = c.output(0).as<float>();
    dnnl_status_t status = dnnl_sgemm('N', 'T', rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
    if (status != dnnl_success) return Internal("dnnl_sgemm (1x1 convolution) failed with status " + std::to_string(status));
    if (!epilogue.any()) return Status::Ok();
    const float *scale, *shift;
    epilogue_terms(c, scale, shift);
    ApplyEpilogue(y, rows, out, scale, shift, epilogue, threads);
    return Status::Ok();
  };
}

StatusOr<KernelFn> MakeConvKernel(ConvPass pass, const ConvGeometry& g, const ConvEpilogue& epilogue, DType dtype, int threads,
                                  int x_at, int w_at, int y_at,
                                  std::shared_ptr<const std::atomic<int64_t>> weights_version,
                                  std::shared_ptr<DnnlConv>* built) {
  // Index >= 100 names output (index - 100).
  auto pick = [](KernelContext& c, int at) { return at >= 100 ? c.output(at - 100).data : c.input(at).data; };
  if (dtype == DType::kFloat64)
    return KernelFn([=](KernelContext& c) {
      ConvLoops<double>(pass, g, static_cast<double*>(pick(c, x_at)), static_cast<double*>(pick(c, w_at)),
                        static_cast<double*>(pick(c, y_at)));
      return Status::Ok();
    });
  AF_ASSIGN_OR_RETURN(std::shared_ptr<DnnlConv> state, BuildDnnlConv(pass, g, epilogue, threads, std::move(weights_version)));
  if (pass == ConvPass::kBackwardFilter && !epilogue.bias && IsDepthwiseChannelsFirst(g) &&
      state->implementation.find("gemm") != std::string::npos)
    return MakeDepthwiseFilterGrad(g.win, threads);
  if (built != nullptr) *built = state;
  const int64_t channels = g.out_channels;
  return KernelFn([=](KernelContext& c) {
    omp_set_num_threads(state->threads);
    // The C API executes from prebuilt argument arrays (the C++ overload builds a vector per call).
    auto run = [&](const dnnl::primitive& p, const std::vector<dnnl_exec_arg_t>& args) {
      return dnnl_primitive_execute(p.get(), state->stream.get(), static_cast<int>(args.size()), args.data());
    };
    const int at[3] = {x_at, w_at, y_at};
    for (int i = 0; i < 3; ++i)
      if (dnnl_memory_set_data_handle(state->tensors[i].user.get(), pick(c, at[i])) != dnnl_success)
        return Internal("oneDNN rejected a tensor pointer");
    // Only with a bias: a conv without one has no third input nor second output to look at.
    if (state->bias && dnnl_memory_set_data_handle(state->bias.get(), pass == ConvPass::kBackwardFilter
                                                                          ? c.output(1).data
                                                                          : c.input(2).data) != dnnl_success)
      return Internal("oneDNN rejected the bias pointer");
    if (state->epilogue.batch_norm)
      BatchNormScaleShift(state->epilogue, c, channels, static_cast<float*>(state->scale.get_data_handle()),
                          static_cast<float*>(state->shift.get_data_handle()));
    const bool reorder_weights = !state->weights_by_caller && WeightsNeedReorder(*state, pick(c, w_at));
    dnnl_status_t status = dnnl_success;
    for (int i = 0; i < 3; ++i) {
      BoundTensor& t = state->tensors[i];
      if (!t.reorder || t.is_output || (i == 1 && !reorder_weights) || status != dnnl_success) continue;
      status = run(*t.reorder, t.reorder_args);
      if (i == 1) CountWeightsReorder();
    }
    if (status == dnnl_success) status = run(state->primitive, state->args);
    for (int i = 0; i < 3; ++i) {
      BoundTensor& t = state->tensors[i];
      if (t.reorder && t.is_output && (i != 1 || !state->weights_by_caller) && status == dnnl_success)
        status = run(*t.reorder, t.reorder_args);
    }
    if (status == dnnl_success) status = dnnl_stream_wait(state->stream.get());
    if (status != dnnl_success) {
      state->weights.valid = false;  // the blocked weights may be partly written
      return Internal("oneDNN convolution failed with status " + std::to_string(status));
    }
    if (state->epilogue.activation != ConvEpilogue::Activation::kNone) {
      // Elementwise: the layout (NCHW or NHWC) does not matter, one "row" of all elements.
      const int64_t elements = c.output(0).num_elements();
      ApplyEpilogue(c.output(0).as<float>(), elements / channels, channels, nullptr, nullptr, state->epilogue, state->threads);
    }
    return Status::Ok();
  });
}

}  // namespace actorflow

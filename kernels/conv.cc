// conv2d: x (N,C,H,W), filter (O, C/groups, KH, KW) -> out (N,O,OH,OW); attrs strides,
// dilation_rate, groups, padding (window.h), data_format "NCHW" or "NHWC" (channels last: x
// (N,H,W,C) -> out (N,OH,OW,O), the filter still (O, C/groups, KH, KW)). Backward ops:
// conv2d_grad_data (dy, filter, like=x) -> dx and conv2d_grad_filter (dy, x, like=filter) -> dfilter.
// Epilogues, set by the compiler's conv fusions (graph/conv_fusion.cc), never by users; forward
// only (a fused conv2d has no gradient rule: fusions run after autodiff):
//   fuse_bias: a third input bias (O): out += bias[o];
//   fuse_batch_norm (attr batch_norm_epsilon): four more inputs gamma, beta, moving_mean,
//     moving_variance (O each): out = out * scale[o] + shift[o] with inv_std = 1/sqrt(var + eps),
//     scale = gamma * inv_std, shift = beta - mean * scale (inference batch norm, the same
//     formula as the batch_normalization kernel), computed each act from the current values;
//   activation "relu" or "clip" (attrs activation_min, activation_max), applied last.
// conv2d_grad_filter's fused bias gradient (attr fuse_bias_grad, graph/conv_fusion.cc's
// "conv_bias_grad", float32): a second output dbias (O) = dy summed over N, H, W, which oneDNN's
// filter-gradient kernel accumulates as it reads dy, instead of a bias_add_grad op reading dy
// once more.
// float32 runs oneDNN convolution primitives built once per kernel: oneDNN picks its layouts
// (blocked nChw16c on AVX-512, several times faster than its gemm path on plain nchw here) and
// prebuilt reorders bridge to the plain registers; every buffer and the scratchpad are
// allocated at build time, so an act never allocates. float64 runs the direct loops below
// (gradient checks). The compiler's blocked layout (kernels/blocked_layout.h, attrs
// channel_block, blocked_inputs/outputs) hands x and y (out, dy, dx) over in oneDNN's own
// nChw{B}c: the primitive is made for that layout and reads or writes the register directly.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <cstring>
#include <memory>
#include <optional>
#include <map>
#include <unordered_map>

#include "kernels/blocked_layout.h"
#include "kernels/conv_depthwise.h"
#include "kernels/conv_sbp.h"
#include "kernels/kernel_util.h"
#include "kernels/parallel_chunks.h"
#include "kernels/sbp_util.h"
#include "kernels/window.h"

namespace actorflow {
namespace {

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

struct ConvGeometry {
  Window2d win;
  int64_t out_channels = 0, groups = 1;
  bool channels_last = false;  // x and out are (N,H,W,C) in memory and in their shapes
  // Channel block of x's and y's storage (kernels/blocked_layout.h; 0: plain), NCHW float32 only.
  int64_t x_block = 0, y_block = 0;
};

StatusOr<bool> ReadChannelsLast(const Attrs& attrs) {
  const std::string format = attrs.GetStringOr("data_format", "NCHW");
  if (format == "NCHW" || format == "channels_first") return false;
  if (format == "NHWC" || format == "channels_last") return true;
  return BadChoice("data_format", format, "NCHW (channels_first) or NHWC (channels_last)");
}

StatusOr<ConvGeometry> ReadConv(const TensorDesc& x, const TensorDesc& filter, const Attrs& attrs) {
  AF_RETURN_IF_ERROR(ExpectFloat(x, "x"));
  AF_RETURN_IF_ERROR(ExpectSameDType(x, filter, "x", "filter"));
  if (filter.shape.size() != 4)
    return InvalidArgument("conv2d: filter must have rank 4 (O, C/groups, KH, KW), got shape " + ShapeToString(filter.shape));
  ConvGeometry g;
  AF_ASSIGN_OR_RETURN(g.channels_last, ReadChannelsLast(attrs));
  Shape nchw = x.shape;
  Attrs window_attrs = attrs;
  if (g.channels_last) {
    if (x.shape.size() != 4)
      return InvalidArgument("conv2d: x must have rank 4 (N, H, W, C with data_format NHWC), got shape " + ShapeToString(x.shape));
    nchw = {x.shape[0], x.shape[3], x.shape[1], x.shape[2]};
    window_attrs.Set("data_format", std::string("NCHW"));  // the window reads the logical NCHW geometry
  }
  AF_ASSIGN_OR_RETURN(g.win, ReadWindow(nchw, filter.shape[2], filter.shape[3], window_attrs, "conv2d", true));
  g.groups = attrs.GetIntOr("groups", 1);
  g.out_channels = filter.shape[0];
  if (g.groups <= 0 || g.win.c % g.groups != 0 || g.out_channels % g.groups != 0)
    return InvalidArgument("conv2d: groups=" + std::to_string(g.groups) + " must divide both the input channels (" +
                           std::to_string(g.win.c) + ") and the filters (" + std::to_string(g.out_channels) + ")");
  if (filter.shape[1] * g.groups != g.win.c)
    return InvalidArgument("conv2d: x has shape " + ShapeToString(x.shape) + " (" + std::to_string(g.win.c) +
                           " channels) but filter has shape " + ShapeToString(filter.shape) + "; with groups=" +
                           std::to_string(g.groups) + " filter dimension 1 must be " + std::to_string(g.win.c / g.groups));
  return g;
}

Shape OutShape(const ConvGeometry& g) {
  if (g.channels_last) return {g.win.n, g.win.oh, g.win.ow, g.out_channels};
  return {g.win.n, g.out_channels, g.win.oh, g.win.ow};
}

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

dnnl::engine& CpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The forward pass's epilogue (see the header comment): which extra inputs follow x and filter.
struct ConvEpilogue {
  bool bias = false, batch_norm = false;
  double epsilon = 1e-5;
  enum class Activation { kNone, kRelu, kClip } activation = Activation::kNone;
  float low = 0, high = 0;
  bool any() const { return bias || batch_norm || activation != Activation::kNone; }
  int extra_inputs() const { return (bias ? 1 : 0) + (batch_norm ? 4 : 0); }
};

// Reads the epilogue attributes and checks the extra inputs (O each, x's dtype, float32 only:
// the float64 loops have no epilogue).
StatusOr<ConvEpilogue> ReadEpilogue(const std::vector<TensorDesc>& inputs, const Attrs& attrs, int64_t out_channels) {
  ConvEpilogue e;
  e.bias = attrs.GetBoolOr("fuse_bias", false);
  e.batch_norm = attrs.GetBoolOr("fuse_batch_norm", false);
  e.epsilon = attrs.GetFloatOr("batch_norm_epsilon", 1e-5);
  const std::string activation = attrs.GetStringOr("activation", "");
  if (activation == "relu") {
    e.activation = ConvEpilogue::Activation::kRelu;
  } else if (activation == "clip") {
    e.activation = ConvEpilogue::Activation::kClip;
    AF_ASSIGN_OR_RETURN(double low, attrs.GetFloat("activation_min"));
    AF_ASSIGN_OR_RETURN(double high, attrs.GetFloat("activation_max"));
    if (!(low <= high)) return InvalidArgument("conv2d: activation_min must not exceed activation_max");
    e.low = static_cast<float>(low), e.high = static_cast<float>(high);
  } else if (!activation.empty()) {
    return BadChoice("activation", activation, "\"relu\" or \"clip\" (a fused epilogue)");
  }
  const size_t expected = 2 + static_cast<size_t>(e.extra_inputs());
  if (inputs.size() != expected)
    return InvalidArgument("conv2d: expected " + std::to_string(expected) + " inputs (x, filter" + (e.bias ? ", bias" : "") +
                           (e.batch_norm ? ", gamma, beta, moving_mean, moving_variance" : "") + "), got " +
                           std::to_string(inputs.size()));
  if (e.any() && inputs[0].dtype != DType::kFloat32)
    return InvalidArgument("conv2d: fused epilogues are float32 only, x is " + inputs[0].ToString());
  for (size_t i = 2; i < inputs.size(); ++i)
    if (inputs[i].shape != Shape{out_channels} || inputs[i].dtype != inputs[0].dtype)
      return InvalidArgument("conv2d: epilogue input " + std::to_string(i) + " must be " + DTypeName(inputs[0].dtype) + "(" +
                             std::to_string(out_channels) + ",), got " + inputs[i].ToString());
  return e;
}

// conv2d_grad_filter's fuse_bias_grad, as the epilogue's bias flag the filter pass reads (float32
// only: the float64 loops compute no bias gradient).
StatusOr<ConvEpilogue> ReadBiasGradient(const TensorDesc& dy, const Attrs& attrs) {
  ConvEpilogue e;
  e.bias = attrs.GetBoolOr("fuse_bias_grad", false);
  if (e.bias && dy.dtype != DType::kFloat32)
    return InvalidArgument("conv2d_grad_filter: fuse_bias_grad is float32 only, dy is " + dy.ToString());
  return e;
}

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
bool WeightsNeedReorder(DnnlConv& state, const void* weights) {
  if (!state.cache_weights) return true;
  const size_t bytes = state.weights_seen.size();
  if (state.weights_seen_valid && std::memcmp(weights, state.weights_seen.data(), bytes) == 0) {
    state.weights_changed_streak = 0;
    return false;
  }
  if (state.weights_seen_valid && ++state.weights_changed_streak >= 2) {
    state.cache_weights = false;
    std::vector<char>().swap(state.weights_seen);
  } else {
    std::memcpy(state.weights_seen.data(), weights, bytes);
    state.weights_seen_valid = true;
  }
  return true;
}

void Bind(BoundTensor& t, const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen, bool is_output) {
  dnnl::engine& engine = CpuEngine();
  t.is_output = is_output;
  t.user = dnnl::memory(plain, engine, nullptr);
  if (chosen == plain) return;
  t.internal = dnnl::memory(chosen, engine);
  t.reorder = is_output ? dnnl::reorder(t.internal, t.user) : dnnl::reorder(t.user, t.internal);
  t.reorder_args = {{DNNL_ARG_FROM, (is_output ? t.internal : t.user).get()}, {DNNL_ARG_TO, (is_output ? t.user : t.internal).get()}};
}

StatusOr<std::shared_ptr<DnnlConv>> BuildDnnlConv(ConvPass pass, const ConvGeometry& g, const ConvEpilogue& epilogue, int threads) {
  using dnnl::memory;
  const Window2d& s = g.win;
  auto state = std::make_shared<DnnlConv>();
  state->threads = std::max(1, threads);
  state->epilogue = epilogue;
  // oneDNN sizes a primitive's work split by the creating thread's OpenMP team and runs that
  // many threads whatever the executing thread's setting: a batch chunk's primitive made under
  // the default team of 2 ran two OpenMP threads inside each single-threaded chunk (LeNet's
  // conv1 filter gradient took 14 ms of CPU in 8 chunks on 2 threads, 2 ms in one call).
  const int previous_threads = omp_get_max_threads();
  omp_set_num_threads(state->threads);
  struct RestoreThreads {
    int threads;
    ~RestoreThreads() { omp_set_num_threads(threads); }
  } restore{previous_threads};
  try {
    dnnl::engine& engine = CpuEngine();
    auto f32 = memory::data_type::f32;
    memory::dims x_dims = {s.n, s.c, s.h, s.w}, y_dims = {s.n, g.out_channels, s.oh, s.ow};
    memory::dims w_dims = g.groups == 1 ? memory::dims{g.out_channels, s.c, s.kh, s.kw}
                                        : memory::dims{g.groups, g.out_channels / g.groups, s.c / g.groups, s.kh, s.kw};
    const memory::format_tag activation_tag = g.channels_last ? memory::format_tag::nhwc : memory::format_tag::nchw;
    // A blocked register is given to oneDNN as it is: the primitive is made for that layout
    // (its own choice on this CPU, kernels/blocked_layout.h), so no reorder bridges it.
    auto blocked_tag = [](int64_t block) { return block == 8 ? memory::format_tag::nChw8c : memory::format_tag::nChw16c; };
    memory::desc x_plain(x_dims, f32, g.x_block ? blocked_tag(g.x_block) : activation_tag);
    memory::desc y_plain(y_dims, f32, g.y_block ? blocked_tag(g.y_block) : activation_tag);
    memory::desc w_plain(w_dims, f32, g.groups == 1 ? memory::format_tag::oihw : memory::format_tag::goihw);
    // NCHW: "any" lets oneDNN pick its fastest (blocked) layouts and reorders bridge to the
    // registers. NHWC: oneDNN's channels-last kernels read and write the registers directly,
    // about as fast as the blocked ones, with no reorder.
    memory::desc x_any = g.channels_last || g.x_block ? x_plain : memory::desc(x_dims, f32, memory::format_tag::any);
    memory::desc y_any = g.channels_last || g.y_block ? y_plain : memory::desc(y_dims, f32, memory::format_tag::any);
    memory::desc w_any(w_dims, f32, memory::format_tag::any);
    memory::dims strides = {s.sh, s.sw}, dilates = {s.dh - 1, s.dw - 1}, pad_l = {s.top, s.left}, pad_r = {s.bottom, s.right};
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::convolution_forward::desc fwd_desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x_any,
                                             w_any, y_any, strides, dilates, pad_l, pad_r);
    dnnl::convolution_forward::primitive_desc fwd_pd(fwd_desc, attr, engine);
    memory::desc scratch_md, x_md, w_md, y_md;
    switch (pass) {
      case ConvPass::kForward: {
        // The kind steers oneDNN's choice of implementation: for NCHW its direct kernels
        // (training kind; the inference kind picks brgemm kernels over channels-last internal
        // layouts, ~10% more CPU on LeNet's 5x5 convolutions), for NHWC the brgemm ones
        // (inference kind). No backward primitive reads this one (they build their own hint).
        const auto kind = g.channels_last ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
        memory::desc channel_md({1, g.out_channels, 1, 1}, f32, memory::format_tag::nchw);
        dnnl::post_ops post_ops;
        if (epilogue.batch_norm) {
          post_ops.append_binary(dnnl::algorithm::binary_mul, channel_md);
          post_ops.append_binary(dnnl::algorithm::binary_add, channel_md);
        }
        // The activation is not a oneDNN post-op: its relu and clip turn NaN into a bound
        // (max/min instructions), where the relu and clamp ops keep NaN. ApplyActivation runs
        // it on the output instead.
        dnnl::primitive_attr forward_attr;
        forward_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        forward_attr.set_post_ops(post_ops);
        // With batch norm the conv's own bias is unused: the shift post-op carries it.
        const bool conv_bias = epilogue.bias && !epilogue.batch_norm;
        memory::desc bias_md({g.out_channels}, f32, memory::format_tag::x);
        auto desc = conv_bias ? dnnl::convolution_forward::desc(kind, dnnl::algorithm::convolution_direct, x_any, w_any, bias_md, y_any,
                                                                strides, dilates, pad_l, pad_r)
                              : dnnl::convolution_forward::desc(kind, dnnl::algorithm::convolution_direct, x_any, w_any, y_any, strides,
                                                                dilates, pad_l, pad_r);
        dnnl::convolution_forward::primitive_desc pd(desc, forward_attr, engine);
        state->primitive = dnnl::convolution_forward(pd);
        scratch_md = pd.scratchpad_desc();
        x_md = pd.src_desc(), w_md = pd.weights_desc(), y_md = pd.dst_desc();
        if (conv_bias) state->bias = memory(bias_md, engine, nullptr);
        if (epilogue.batch_norm) state->scale = memory(channel_md, engine), state->shift = memory(channel_md, engine);
        break;
      }
      case ConvPass::kBackwardData: {
        dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, x_any, w_any, y_any, strides, dilates, pad_l, pad_r);
        dnnl::convolution_backward_data::primitive_desc pd(d, attr, engine, fwd_pd);
        state->primitive = dnnl::convolution_backward_data(pd);
        scratch_md = pd.scratchpad_desc();
        x_md = pd.diff_src_desc(), w_md = pd.weights_desc(), y_md = pd.diff_dst_desc();
        break;
      }
      case ConvPass::kBackwardFilter: {
        // epilogue.bias: also the bias gradient (fuse_bias_grad).
        memory::desc bias_md({g.out_channels}, f32, memory::format_tag::x);
        auto d = epilogue.bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_any, w_any, bias_md,
                                                                          y_any, strides, dilates, pad_l, pad_r)
                               : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_any, w_any, y_any,
                                                                          strides, dilates, pad_l, pad_r);
        if (epilogue.bias) state->bias = memory(bias_md, engine, nullptr);
        dnnl::convolution_backward_weights::primitive_desc pd(d, attr, engine, fwd_pd);
        state->primitive = dnnl::convolution_backward_weights(pd);
        state->implementation = pd.impl_info_str();
        scratch_md = pd.scratchpad_desc();
        x_md = pd.src_desc(), w_md = pd.diff_weights_desc(), y_md = pd.diff_dst_desc();
        break;
      }
    }
    state->stream = dnnl::stream(engine);
    Bind(state->tensors[0], x_plain, x_md, pass == ConvPass::kBackwardData);
    Bind(state->tensors[1], w_plain, w_md, pass == ConvPass::kBackwardFilter);
    Bind(state->tensors[2], y_plain, y_md, pass == ConvPass::kForward);
    state->scratchpad = memory(scratch_md, engine);
    int x_arg = pass == ConvPass::kBackwardData ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC;
    int w_arg = pass == ConvPass::kBackwardFilter ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS;
    int y_arg = pass == ConvPass::kForward ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST;
    state->args = {{x_arg, state->tensors[0].used().get()}, {w_arg, state->tensors[1].used().get()},
                   {y_arg, state->tensors[2].used().get()}, {DNNL_ARG_SCRATCHPAD, state->scratchpad.get()}};
    if (state->bias) state->args.push_back({pass == ConvPass::kBackwardFilter ? DNNL_ARG_DIFF_BIAS : DNNL_ARG_BIAS, state->bias.get()});
    if (pass == ConvPass::kForward && state->tensors[1].reorder) {
      state->cache_weights = true;
      state->weights_seen.resize(w_plain.get_size());
    }
    if (epilogue.batch_norm) {
      state->args.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, state->scale.get()});
      state->args.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, state->shift.get()});
    }
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN could not build the convolution: ") + e.what());
  }
  return state;
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

// A 1x1 convolution with stride 1 and no padding over channels-last tensors is one GEMM,
// y (N*H*W, O) = x (N*H*W, C) * filter (O, C)^T: oneDNN's sgemm reads the registers as they are
// (no weight reorder) and beats its 1x1 convolution kernels on these shapes, most on the small
// spatial sizes of late layers where N*H*W is just the batch. The epilogue is one pass over y.
bool IsPointwiseChannelsLast(const ConvGeometry& g) {
  const Window2d& s = g.win;
  return g.channels_last && g.groups == 1 && s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.top == 0 && s.bottom == 0 &&
         s.left == 0 && s.right == 0;
}

KernelFn MakePointwiseGemm(const ConvGeometry& g, const ConvEpilogue& epilogue, int threads) {
  const int64_t rows = g.win.n * g.win.h * g.win.w, in = g.win.c, out = g.out_channels;
  struct State {
    std::vector<float> scale, shift;
  };
  auto state = std::make_shared<State>();
  if (epilogue.batch_norm) state->scale.resize(out), state->shift.resize(out);
  threads = std::max(1, threads);
  return [=](KernelContext& c) {
    omp_set_num_threads(threads);
    const float* x = c.input(0).as<float>();
    const float* w = c.input(1).as<float>();
    float* y = c.output(0).as<float>();
    dnnl_status_t status = dnnl_sgemm('N', 'T', rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
    if (status != dnnl_success) return Internal("dnnl_sgemm (1x1 convolution) failed with status " + std::to_string(status));
    if (!epilogue.any()) return Status::Ok();
    const float* scale = nullptr;
    const float* shift = nullptr;
    if (epilogue.batch_norm) {
      BatchNormScaleShift(epilogue, c, out, state->scale.data(), state->shift.data());
      scale = state->scale.data(), shift = state->shift.data();
    } else if (epilogue.bias) {
      shift = c.input(2).as<float>();
    }
    ApplyEpilogue(y, rows, out, scale, shift, epilogue, threads);
    return Status::Ok();
  };
}

// Builds the kernel of one pass; x, w, y pointers come from the inputs/outputs named by index.
bool IsDepthwiseChannelsFirst(const ConvGeometry& g) {
  return !g.channels_last && g.x_block == 0 && g.y_block == 0 && g.groups == g.win.c && g.out_channels == g.win.c;
}

// `built` (optional): receives the oneDNN state when the kernel runs one (null otherwise).
StatusOr<KernelFn> MakeConvKernel(ConvPass pass, const ConvGeometry& g, const ConvEpilogue& epilogue, DType dtype, int threads,
                                  int x_at, int w_at, int y_at, std::shared_ptr<DnnlConv>* built = nullptr) {
  // Index >= 100 names output (index - 100).
  auto pick = [](KernelContext& c, int at) { return at >= 100 ? c.output(at - 100).data : c.input(at).data; };
  if (dtype == DType::kFloat64)
    return KernelFn([=](KernelContext& c) {
      ConvLoops<double>(pass, g, static_cast<double*>(pick(c, x_at)), static_cast<double*>(pick(c, w_at)),
                        static_cast<double*>(pick(c, y_at)));
      return Status::Ok();
    });
  if (pass == ConvPass::kForward && IsPointwiseChannelsLast(g)) return MakePointwiseGemm(g, epilogue, threads);
  AF_ASSIGN_OR_RETURN(std::shared_ptr<DnnlConv> state, BuildDnnlConv(pass, g, epilogue, threads));
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
      if (t.reorder && !t.is_output && (i != 1 || reorder_weights) && status == dnnl_success) status = run(*t.reorder, t.reorder_args);
    }
    if (status == dnnl_success) status = run(state->primitive, state->args);
    for (int i = 0; i < 3; ++i) {
      BoundTensor& t = state->tensors[i];
      if (t.reorder && t.is_output && (i != 1 || !state->weights_by_caller) && status == dnnl_success)
        status = run(*t.reorder, t.reorder_args);
    }
    if (status == dnnl_success) status = dnnl_stream_wait(state->stream.get());
    if (status != dnnl_success) {
      state->weights_seen_valid = false;  // the blocked weights may be partly written
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


// The three passes split over the batch: samples are independent in the forward and data
// gradient passes, and the filter gradient is a sum over samples (each chunk after the first
// writes its partial sum to its own scratch, added into the output after all ran). Each chunk
// of samples runs as its own single-threaded oneDNN convolution, claimed by the
// kernel helper threads (parallel_chunks.h) instead of one OpenMP team per call, which a busy
// host stalls whenever a member is descheduled. x and y (input or output, by index as in
// MakeConvKernel) are cut along axis 0 (N, in NCHW and NHWC alike); the filter, bias and batch
// norm inputs are read whole by every chunk. Used for float32 with more than one thread and
// at least two samples per thread; omp_team (disable_fusion("gemm_chunks")) keeps one call.
// The filter gradient's partial sums are added in chunk order, so its rounding differs from
// one call's only by that order. Where oneDNN computes in blocked weights, the chunks share one
// blocked copy of the weights (one reorder per act, not one per chunk) and the filter gradient
// is summed in the blocked layout, then reordered out once.
// The blocked registers of one conv op (kernels/blocked_layout.h): x and y by slot (>= 100:
// output slot - 100, as in MakeConvKernel); the filter and `like` stay plain.
Status ReadConvBlocks(const std::string& op, const KernelInit& init, int x_slot, int y_slot, ConvGeometry& g) {
  if (g.channels_last && (init.attrs.Has("blocked_inputs") || init.attrs.Has("blocked_outputs")))
    return InvalidArgument(op + ": a blocked layout (channel_block) needs data_format NCHW");
  std::vector<int> allowed_inputs, allowed_outputs;
  for (int slot : {x_slot, y_slot}) (slot >= 100 ? allowed_outputs : allowed_inputs).push_back(slot >= 100 ? slot - 100 : slot);
  AF_ASSIGN_OR_RETURN(BlockedLayout layout,
                      ReadBlockedLayout(op, init.attrs, init.inputs, init.outputs, allowed_inputs, allowed_outputs));
  if (layout.block == 0) return Status::Ok();
  auto blocked = [&](int slot) { return slot >= 100 ? layout.output(slot - 100) : layout.input(slot); };
  g.x_block = blocked(x_slot) ? layout.block : 0;
  g.y_block = blocked(y_slot) ? layout.block : 0;
  return Status::Ok();
}

bool UseBatchChunks(const KernelInit& init, const ConvGeometry& g) {
  return init.inputs[0].dtype == DType::kFloat32 && init.num_threads > 1 && g.win.n >= 2 * init.num_threads &&
         !init.attrs.GetBoolOr("omp_team", false);
}

StatusOr<KernelFn> MakeBatchChunkedConv(const KernelInit& init, ConvPass pass, const ConvGeometry& g,
                                        const ConvEpilogue& epilogue, int x_at, int w_at, int y_at) {
  const int threads = std::max(1, init.num_threads);
  const int64_t n = g.win.n;
  const int64_t chunks = std::min<int64_t>(n, 4 * threads);
  const int64_t step = (n + chunks - 1) / chunks;
  const int64_t count = (n + step - 1) / step, last = n - (count - 1) * step;
  struct Chunked {
    std::vector<KernelFn> kernels;  // one per chunk (oneDNN state is per kernel: chunks run at once)
    std::vector<std::vector<TensorView>> inputs, outputs;
    int64_t x_stride = 0, y_stride = 0;  // bytes per sample
    std::vector<std::vector<float>> partial_filters;  // filter gradient: chunks 1.. write here
    std::vector<std::vector<float>> partial_biases;   // and their bias gradients (fuse_bias_grad)
    bool prepared = false;
    // Blocked weights shared by the chunks (weights_by_caller): forward and data gradient
    // reorder the plain weights once per act into chunk 0's blocked buffer, which every chunk
    // reads; the filter gradient's chunks each write their own blocked buffer, summed into
    // chunk 0's and reordered out once (instead of partial_filters).
    std::vector<std::shared_ptr<DnnlConv>> convs;
    bool shared_weights = false;
  };
  auto state = std::make_shared<Chunked>();
  const TensorDesc& x_desc = x_at >= 100 ? init.outputs[x_at - 100] : init.inputs[x_at];
  const TensorDesc& y_desc = y_at >= 100 ? init.outputs[y_at - 100] : init.inputs[y_at];
  state->x_stride = static_cast<int64_t>(x_desc.byte_size()) / n;
  state->y_stride = static_cast<int64_t>(y_desc.byte_size()) / n;
  const bool filter_gradient = pass == ConvPass::kBackwardFilter;
  if (filter_gradient)
    state->partial_filters.assign(count - 1, std::vector<float>(init.outputs[0].num_elements()));
  const bool bias_gradient = filter_gradient && epilogue.bias;
  if (bias_gradient) state->partial_biases.assign(count - 1, std::vector<float>(init.outputs[1].num_elements()));
  state->convs.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    ConvGeometry part = g;
    part.win.n = i + 1 < count ? step : last;
    AF_ASSIGN_OR_RETURN(KernelFn kernel,
                        MakeConvKernel(pass, part, epilogue, DType::kFloat32, 1, x_at, w_at, y_at, &state->convs[i]));
    state->kernels.push_back(std::move(kernel));
  }
  bool shared = state->convs[0] && state->convs[0]->tensors[1].reorder;
  for (int64_t i = 1; i < count && shared; ++i)
    shared = state->convs[i] && state->convs[i]->tensors[1].reorder &&
             state->convs[i]->tensors[1].internal.get_desc() == state->convs[0]->tensors[1].internal.get_desc();
  if (shared) {
    for (int64_t i = 0; i < count; ++i) {
      DnnlConv& conv = *state->convs[i];
      conv.weights_by_caller = true;
      if (i > 0 && !filter_gradient) {
        conv.tensors[1].internal.set_data_handle(state->convs[0]->tensors[1].internal.get_data_handle());
        conv.cache_weights = false;
        std::vector<char>().swap(conv.weights_seen);
      }
    }
    std::vector<std::vector<float>>().swap(state->partial_filters);
  } else {
    std::vector<std::shared_ptr<DnnlConv>>().swap(state->convs);
  }
  state->shared_weights = shared;
  return KernelFn([state, count, step, x_at, w_at, y_at, threads, filter_gradient, bias_gradient](KernelContext& c) {
    Chunked& s = *state;
    if (!s.prepared) {  // first call: the views' descriptions, with the chunks' sample counts
      s.inputs.assign(count, *c.inputs);
      s.outputs.assign(count, *c.outputs);
      for (int64_t i = 0; i < count; ++i)
        for (int at : {x_at, y_at}) {
          TensorView& v = at >= 100 ? s.outputs[i][at - 100] : s.inputs[i][at];
          v.desc.shape[0] = std::min(step, v.desc.shape[0] - i * step);
        }
      s.prepared = true;
    }
    for (int64_t i = 0; i < count; ++i) {
      for (size_t k = 0; k < c.inputs->size(); ++k) s.inputs[i][k].data = (*c.inputs)[k].data;
      for (size_t k = 0; k < c.outputs->size(); ++k) s.outputs[i][k].data = (*c.outputs)[k].data;
      for (int at : {x_at, y_at}) {
        TensorView& v = at >= 100 ? s.outputs[i][at - 100] : s.inputs[i][at];
        v.data = static_cast<char*>(v.data) + i * step * (at == x_at ? s.x_stride : s.y_stride);
      }
      if (filter_gradient && i > 0 && !s.shared_weights) s.outputs[i][0].data = s.partial_filters[i - 1].data();
      if (bias_gradient && i > 0) s.outputs[i][1].data = s.partial_biases[i - 1].data();
    }
    auto run_weights_reorder = [&](DnnlConv& conv, void* plain) -> Status {
      BoundTensor& w = conv.tensors[1];
      dnnl_status_t status = dnnl_memory_set_data_handle(w.user.get(), plain);
      if (status == dnnl_success)
        status = dnnl_primitive_execute(w.reorder->get(), conv.stream.get(), static_cast<int>(w.reorder_args.size()),
                                        w.reorder_args.data());
      if (status == dnnl_success) status = dnnl_stream_wait(conv.stream.get());
      if (status == dnnl_success) return Status::Ok();
      conv.weights_seen_valid = false;
      return Internal("oneDNN weight reorder failed with status " + std::to_string(status));
    };
    // The reorders below run on this thread: one OpenMP thread, as each chunk's primitive (a
    // reorder sizes its team by the calling thread's setting).
    if (s.shared_weights) omp_set_num_threads(1);
    if (s.shared_weights && !filter_gradient) {
      void* weights = c.input(w_at).data;
      if (WeightsNeedReorder(*s.convs[0], weights)) AF_RETURN_IF_ERROR(run_weights_reorder(*s.convs[0], weights));
    }
    std::atomic<bool> failed{false};
    Status first_error = Status::Ok();
    std::mutex error_mutex;
    auto run = [&](int i) {
      KernelContext part{&s.inputs[i], &s.outputs[i], c.iteration};
      part.threads = 1;
      Status status = s.kernels[i](part);
      if (!status.ok() && !failed.exchange(true)) {
        std::lock_guard<std::mutex> lock(error_mutex);
        first_error = status;
      }
    };
    ParallelChunks(static_cast<int>(count), c.threads > threads ? c.threads : threads, run);
    if (failed.load()) return first_error;
    if (filter_gradient && s.shared_weights) {
      const dnnl::memory& first = s.convs[0]->tensors[1].internal;
      float* __restrict sum = static_cast<float*>(first.get_data_handle());
      const int64_t elements = static_cast<int64_t>(first.get_desc().get_size() / sizeof(float));
      for (int64_t i = 1; i < count; ++i) {
        const float* __restrict p = static_cast<const float*>(s.convs[i]->tensors[1].internal.get_data_handle());
        for (int64_t e = 0; e < elements; ++e) sum[e] += p[e];
      }
      AF_RETURN_IF_ERROR(run_weights_reorder(*s.convs[0], c.output(0).data));
    } else if (filter_gradient) {
      float* __restrict out = c.output(0).as<float>();
      const int64_t elements = c.output(0).num_elements();
      for (const std::vector<float>& partial : s.partial_filters) {
        const float* __restrict p = partial.data();
        for (int64_t e = 0; e < elements; ++e) out[e] += p[e];
      }
    }
    if (bias_gradient) {
      float* __restrict out = c.output(1).as<float>();
      const int64_t elements = c.output(1).num_elements();
      for (const std::vector<float>& partial : s.partial_biases) {
        const float* __restrict p = partial.data();
        for (int64_t e = 0; e < elements; ++e) out[e] += p[e];
      }
    }
    return Status::Ok();
  });
}

}  // namespace

void RegisterConvOps(OpRegistry& registry) {
  OpDef def;
  def.type = "conv2d";
  def.input_names = {"x", "filter"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(ConvGeometry g, ReadConv(ctx.inputs[0], ctx.inputs[1], ctx.attrs));
    AF_RETURN_IF_ERROR(ReadEpilogue(ctx.inputs, ctx.attrs, g.out_channels).status());
    ctx.outputs = {TensorDesc{OutShape(g), ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(ConvGeometry g, ReadConv(init.inputs[0], init.inputs[1], init.attrs));
    AF_RETURN_IF_ERROR(ReadConvBlocks("conv2d", init, 0, 100, g));
    AF_ASSIGN_OR_RETURN(ConvEpilogue epilogue, ReadEpilogue(init.inputs, init.attrs, g.out_channels));
    if (UseBatchChunks(init, g) && !IsPointwiseChannelsLast(g))
      return MakeBatchChunkedConv(init, ConvPass::kForward, g, epilogue, 0, 1, 100);
    return MakeConvKernel(ConvPass::kForward, g, epilogue, init.inputs[0].dtype, init.num_threads, 0, 1, 100);
  };
  def.grad = [](GradBuilder& g) -> Status {
    if (g.num_inputs() != 2)
      return Internal("conv2d '" + g.op_name() + "' has a fused epilogue, which has no gradient (fusions run after autodiff)");
    if (g.needs_input_grad(0)) {
      AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("conv2d_grad_data", {g.output_grad(0), g.input(1), g.input(0)}, g.attrs()));
      g.SetInputGrad(0, dx);
    }
    if (g.needs_input_grad(1)) {
      AF_ASSIGN_OR_RETURN(std::string dw, g.AddOp1("conv2d_grad_filter", {g.output_grad(0), g.input(0), g.input(1)}, g.attrs()));
      g.SetInputGrad(1, dw);
    }
    return Status::Ok();
  };
  def.sbp = [](const SbpContext& ctx) { return ConvSbp(ctx, {ConvRole::kX, ConvRole::kFilter}, ConvRole::kY); };
  def.doc = "out(N,O,OH,OW) = conv of x(N,C,H,W) with filter(O,C/groups,KH,KW) (NHWC: x(N,H,W,C) -> out(N,OH,OW,O)); attrs "
            "strides, dilation_rate, groups, padding, data_format; compiler epilogues fuse_bias, fuse_batch_norm, activation";
  registry.Register(std::move(def));

  OpDef data;
  data.type = "conv2d_grad_data";
  data.input_names = {"dy", "filter", "like"};
  data.output_names = {"dx"};
  data.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(ConvGeometry g, ReadConv(ctx.inputs[2], ctx.inputs[1], ctx.attrs));
    if (ctx.inputs[0].shape != OutShape(g))
      return InvalidArgument("conv2d_grad_data: dy has shape " + ShapeToString(ctx.inputs[0].shape) + ", expected " + ShapeToString(OutShape(g)));
    ctx.outputs = {ctx.inputs[2]};
    return Status::Ok();
  };
  data.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(ConvGeometry g, ReadConv(init.inputs[2], init.inputs[1], init.attrs));
    AF_RETURN_IF_ERROR(ReadConvBlocks("conv2d_grad_data", init, 100, 0, g));
    if (UseBatchChunks(init, g)) return MakeBatchChunkedConv(init, ConvPass::kBackwardData, g, ConvEpilogue{}, 100, 1, 0);
    return MakeConvKernel(ConvPass::kBackwardData, g, ConvEpilogue{}, init.inputs[0].dtype, init.num_threads, 100, 1, 0);
  };
  data.doc = "dx(N,C,H,W) = transposed conv of dy with filter (same attrs as conv2d); like gives x's shape";
  data.sbp = [](const SbpContext& ctx) {
    return ConvSbp(ctx, {ConvRole::kY, ConvRole::kFilter, ConvRole::kX}, ConvRole::kX);
  };
  registry.Register(std::move(data));

  OpDef filter;
  filter.type = "conv2d_grad_filter";
  filter.input_names = {"dy", "x", "like"};
  filter.output_names = {"dfilter"};
  filter.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(ConvGeometry g, ReadConv(ctx.inputs[1], ctx.inputs[2], ctx.attrs));
    if (ctx.inputs[0].shape != OutShape(g))
      return InvalidArgument("conv2d_grad_filter: dy has shape " + ShapeToString(ctx.inputs[0].shape) + ", expected " + ShapeToString(OutShape(g)));
    AF_ASSIGN_OR_RETURN(ConvEpilogue bias_gradient, ReadBiasGradient(ctx.inputs[0], ctx.attrs));
    ctx.outputs = {ctx.inputs[2]};
    if (bias_gradient.bias) ctx.outputs.push_back(TensorDesc{{g.out_channels}, ctx.inputs[0].dtype});
    return Status::Ok();
  };
  filter.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(ConvGeometry g, ReadConv(init.inputs[1], init.inputs[2], init.attrs));
    AF_RETURN_IF_ERROR(ReadConvBlocks("conv2d_grad_filter", init, 1, 0, g));
    AF_ASSIGN_OR_RETURN(ConvEpilogue bias_gradient, ReadBiasGradient(init.inputs[0], init.attrs));
    if (UseBatchChunks(init, g)) return MakeBatchChunkedConv(init, ConvPass::kBackwardFilter, g, bias_gradient, 1, 100, 0);
    return MakeConvKernel(ConvPass::kBackwardFilter, g, bias_gradient, init.inputs[0].dtype, init.num_threads, 1, 100, 0);
  };
  filter.doc = "dfilter(O,C/groups,KH,KW) = correlation of x with dy (same attrs as conv2d); like gives filter's shape; "
               "compiler attr fuse_bias_grad adds output dbias(O) = dy summed over all but the channel axis";
  filter.sbp = [](const SbpContext& ctx) {
    return ConvSbp(ctx, {ConvRole::kY, ConvRole::kX, ConvRole::kFilter}, ConvRole::kFilter);
  };
  registry.Register(std::move(filter));
}

}  // namespace actorflow

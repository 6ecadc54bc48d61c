#include "kernels/conv_dnnl.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace actorflow {
namespace {

std::atomic<int64_t> total_weights_reorders{0};

dnnl::engine& CpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
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

}  // namespace

int64_t ConvWeightsReorders() { return total_weights_reorders.load(std::memory_order_relaxed); }

void CountWeightsReorder() { total_weights_reorders.fetch_add(1, std::memory_order_relaxed); }

bool WeightsNeedReorder(DnnlConv& state, const void* weights) {
  ConvWeightsCache& cache = state.weights;
  if (!cache.enabled) return true;
  if (cache.version != nullptr) {
    const int64_t version = cache.version->load(std::memory_order_acquire);
    if (cache.valid && version == cache.version_seen && weights == cache.from) return false;
    cache.version_seen = version;
    cache.from = weights;
    cache.valid = true;
    return true;
  }
  const size_t bytes = cache.seen.size();
  if (cache.valid && std::memcmp(weights, cache.seen.data(), bytes) == 0) {
    cache.changed_streak = 0;
    return false;
  }
  if (cache.valid && ++cache.changed_streak >= 2) {
    cache.enabled = false;
    std::vector<char>().swap(cache.seen);
  } else {
    std::memcpy(cache.seen.data(), weights, bytes);
    cache.valid = true;
  }
  return true;
}

StatusOr<std::shared_ptr<DnnlConv>> BuildDnnlConv(ConvPass pass, const ConvGeometry& g, const ConvEpilogue& epilogue, int threads,
                                                  std::shared_ptr<const std::atomic<int64_t>> weights_version) {
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
    if (state->tensors[1].reorder && (pass == ConvPass::kForward || (pass == ConvPass::kBackwardData && weights_version))) {
      state->weights.enabled = true;
      state->weights.version = std::move(weights_version);
      if (state->weights.version == nullptr) state->weights.seen.resize(w_plain.get_size());
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

}  // namespace actorflow

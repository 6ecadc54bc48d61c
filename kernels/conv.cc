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
// allocated at build time, so an act never allocates. float64 runs direct loops (gradient
// checks). The compiler's blocked layout (kernels/blocked_layout.h, attrs
// channel_block, blocked_inputs/outputs) hands x and y (out, dy, dx) over in oneDNN's own
// nChw{B}c: the primitive is made for that layout and reads or writes the register directly.
// The kernels are in conv_kernel.{h,cc}, conv_dnnl.{h,cc} (oneDNN) and conv_chunked.cc.
#include <string>
#include <vector>

#include "kernels/blocked_layout.h"
#include "kernels/conv_kernel.h"
#include "kernels/conv_sbp.h"
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"
#include "kernels/window.h"

namespace actorflow {
namespace {

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
    if (init.inputs[0].dtype == DType::kFloat32 && IsPointwiseChannelsLast(g))
      return MakePointwiseGemm(g, epilogue, init.num_threads, ConvInputVersion(init, 1), init.attrs.GetBoolOr("packed_weights", true));
    if (UseBatchChunks(init, g)) return MakeBatchChunkedConv(init, ConvPass::kForward, g, epilogue, 0, 1, 100);
    return MakeConvKernel(ConvPass::kForward, g, epilogue, init.inputs[0].dtype, init.num_threads, 0, 1, 100,
                          ConvInputVersion(init, 1));
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
    return MakeConvKernel(ConvPass::kBackwardData, g, ConvEpilogue{}, init.inputs[0].dtype, init.num_threads, 100, 1, 0,
                          ConvInputVersion(init, 1));
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

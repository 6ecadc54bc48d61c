// conv2d over NCHW: x (N,C,H,W), filter (O, C/groups, KH, KW) -> out (N,O,OH,OW); attrs strides,
// dilation_rate, groups, padding (window.h), data_format "NCHW". Backward ops:
// conv2d_grad_data (dy, filter, like=x) -> dx and conv2d_grad_filter (dy, x, like=filter) -> dfilter.
// float32 runs oneDNN convolution primitives built once per kernel (plain nchw/oihw layouts,
// user-managed scratchpad allocated at build time, so an act never allocates); float64 runs the
// direct loops below (gradient checks).
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <cstring>
#include <memory>
#include <unordered_map>

#include "kernels/kernel_util.h"
#include "kernels/window.h"

namespace actorflow {
namespace {

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

struct ConvGeometry {
  Window2d win;
  int64_t out_channels = 0, groups = 1;
};

StatusOr<ConvGeometry> ReadConv(const TensorDesc& x, const TensorDesc& filter, const Attrs& attrs) {
  AF_RETURN_IF_ERROR(ExpectFloat(x, "x"));
  AF_RETURN_IF_ERROR(ExpectSameDType(x, filter, "x", "filter"));
  if (filter.shape.size() != 4)
    return InvalidArgument("conv2d: filter must have rank 4 (O, C/groups, KH, KW), got shape " + ShapeToString(filter.shape));
  ConvGeometry g;
  AF_ASSIGN_OR_RETURN(g.win, ReadWindow(x.shape, filter.shape[2], filter.shape[3], attrs, "conv2d", true));
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

Shape OutShape(const ConvGeometry& g) { return {g.win.n, g.out_channels, g.win.oh, g.win.ow}; }

// Direct convolution loops; `pass` picks which of x, w, y is accumulated (after zeroing).
template <typename T>
void ConvLoops(ConvPass pass, const ConvGeometry& g, T* x, T* w, T* y) {
  const Window2d& s = g.win;
  int64_t cg = s.c / g.groups, og = g.out_channels / g.groups;
  if (pass == ConvPass::kForward) std::memset(y, 0, sizeof(T) * s.n * g.out_channels * s.oh * s.ow);
  if (pass == ConvPass::kBackwardData) std::memset(x, 0, sizeof(T) * s.n * s.c * s.h * s.w);
  if (pass == ConvPass::kBackwardFilter) std::memset(w, 0, sizeof(T) * g.out_channels * cg * s.kh * s.kw);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o) {
      int64_t group = o / og;
      for (int64_t oh = 0; oh < s.oh; ++oh)
        for (int64_t ow = 0; ow < s.ow; ++ow) {
          T* yp = y + ((n * g.out_channels + o) * s.oh + oh) * s.ow + ow;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t kh = 0; kh < s.kh; ++kh) {
              int64_t ih = oh * s.sh - s.top + kh * s.dh;
              if (ih < 0 || ih >= s.h) continue;
              for (int64_t kw = 0; kw < s.kw; ++kw) {
                int64_t iw = ow * s.sw - s.left + kw * s.dw;
                if (iw < 0 || iw >= s.w) continue;
                T* xp = x + ((n * s.c + group * cg + ic) * s.h + ih) * s.w + iw;
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

// One oneDNN primitive with its memories bound to register pointers at each act.
struct DnnlConv {
  dnnl::primitive primitive;
  dnnl::stream stream;
  dnnl::memory x, w, y, scratchpad;
  std::vector<char> scratch;
  std::unordered_map<int, dnnl::memory> args;
  int threads = 1;
};

StatusOr<std::shared_ptr<DnnlConv>> BuildDnnlConv(ConvPass pass, const ConvGeometry& g, int threads) {
  using dnnl::memory;
  const Window2d& s = g.win;
  auto state = std::make_shared<DnnlConv>();
  state->threads = std::max(1, threads);
  try {
    dnnl::engine& engine = CpuEngine();
    memory::desc x_md({s.n, s.c, s.h, s.w}, memory::data_type::f32, memory::format_tag::nchw);
    memory::desc y_md({s.n, g.out_channels, s.oh, s.ow}, memory::data_type::f32, memory::format_tag::nchw);
    memory::desc w_md = g.groups == 1
                            ? memory::desc({g.out_channels, s.c, s.kh, s.kw}, memory::data_type::f32, memory::format_tag::oihw)
                            : memory::desc({g.groups, g.out_channels / g.groups, s.c / g.groups, s.kh, s.kw},
                                           memory::data_type::f32, memory::format_tag::goihw);
    memory::dims strides = {s.sh, s.sw}, dilates = {s.dh - 1, s.dw - 1}, pad_l = {s.top, s.left}, pad_r = {s.bottom, s.right};
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::convolution_forward::desc fwd_desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, x_md,
                                             w_md, y_md, strides, dilates, pad_l, pad_r);
    dnnl::convolution_forward::primitive_desc fwd_pd(fwd_desc, attr, engine);
    memory::desc scratch_md;
    switch (pass) {
      case ConvPass::kForward:
        state->primitive = dnnl::convolution_forward(fwd_pd);
        scratch_md = fwd_pd.scratchpad_desc();
        break;
      case ConvPass::kBackwardData: {
        dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, x_md, w_md, y_md, strides, dilates, pad_l, pad_r);
        dnnl::convolution_backward_data::primitive_desc pd(d, attr, engine, fwd_pd);
        state->primitive = dnnl::convolution_backward_data(pd);
        scratch_md = pd.scratchpad_desc();
        break;
      }
      case ConvPass::kBackwardFilter: {
        dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, x_md, w_md, y_md, strides, dilates, pad_l,
                                                   pad_r);
        dnnl::convolution_backward_weights::primitive_desc pd(d, attr, engine, fwd_pd);
        state->primitive = dnnl::convolution_backward_weights(pd);
        scratch_md = pd.scratchpad_desc();
        break;
      }
    }
    state->stream = dnnl::stream(engine);
    state->x = memory(x_md, engine, nullptr);
    state->w = memory(w_md, engine, nullptr);
    state->y = memory(y_md, engine, nullptr);
    state->scratch.resize(std::max<size_t>(scratch_md.get_size(), 1));
    state->scratchpad = memory(scratch_md, engine, state->scratch.data());
    int x_arg = pass == ConvPass::kBackwardData ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC;
    int w_arg = pass == ConvPass::kBackwardFilter ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS;
    int y_arg = pass == ConvPass::kForward ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST;
    state->args = {{x_arg, state->x}, {w_arg, state->w}, {y_arg, state->y}, {DNNL_ARG_SCRATCHPAD, state->scratchpad}};
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN could not build the convolution: ") + e.what());
  }
  return state;
}

// Builds the kernel of one pass; x, w, y pointers come from the inputs/outputs named by index.
StatusOr<KernelFn> MakeConvKernel(ConvPass pass, const ConvGeometry& g, DType dtype, int threads, int x_at, int w_at, int y_at) {
  // Index >= 100 names output (index - 100).
  auto pick = [](KernelContext& c, int at) { return at >= 100 ? c.output(at - 100).data : c.input(at).data; };
  if (dtype == DType::kFloat64)
    return KernelFn([=](KernelContext& c) {
      ConvLoops<double>(pass, g, static_cast<double*>(pick(c, x_at)), static_cast<double*>(pick(c, w_at)),
                        static_cast<double*>(pick(c, y_at)));
      return Status::Ok();
    });
  AF_ASSIGN_OR_RETURN(std::shared_ptr<DnnlConv> state, BuildDnnlConv(pass, g, threads));
  return KernelFn([=](KernelContext& c) {
    omp_set_num_threads(state->threads);
    try {
      state->x.set_data_handle(pick(c, x_at));
      state->w.set_data_handle(pick(c, w_at));
      state->y.set_data_handle(pick(c, y_at));
      state->primitive.execute(state->stream, state->args);
      state->stream.wait();
    } catch (const dnnl::error& e) {
      return Internal(std::string("oneDNN convolution failed: ") + e.what());
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
    ctx.outputs = {TensorDesc{OutShape(g), ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.make_cpu_kernel = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(ConvGeometry g, ReadConv(init.inputs[0], init.inputs[1], init.attrs));
    return MakeConvKernel(ConvPass::kForward, g, init.inputs[0].dtype, init.num_threads, 0, 1, 100);
  };
  def.grad = [](GradBuilder& g) -> Status {
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
  def.sbp_signatures = {"S(0),B->S(0)", "B,S(0)->S(1)", "S(1),S(1)->P (groups=1)", "B,B->B"};
  def.doc = "out(N,O,OH,OW) = conv of x(N,C,H,W) with filter(O,C/groups,KH,KW); attrs strides, dilation_rate, groups, padding, data_format";
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
  data.make_cpu_kernel = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(ConvGeometry g, ReadConv(init.inputs[2], init.inputs[1], init.attrs));
    return MakeConvKernel(ConvPass::kBackwardData, g, init.inputs[0].dtype, init.num_threads, 100, 1, 0);
  };
  data.doc = "dx(N,C,H,W) = transposed conv of dy with filter (same attrs as conv2d); like gives x's shape";
  registry.Register(std::move(data));

  OpDef filter;
  filter.type = "conv2d_grad_filter";
  filter.input_names = {"dy", "x", "like"};
  filter.output_names = {"dfilter"};
  filter.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(ConvGeometry g, ReadConv(ctx.inputs[1], ctx.inputs[2], ctx.attrs));
    if (ctx.inputs[0].shape != OutShape(g))
      return InvalidArgument("conv2d_grad_filter: dy has shape " + ShapeToString(ctx.inputs[0].shape) + ", expected " + ShapeToString(OutShape(g)));
    ctx.outputs = {ctx.inputs[2]};
    return Status::Ok();
  };
  filter.make_cpu_kernel = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(ConvGeometry g, ReadConv(init.inputs[1], init.inputs[2], init.attrs));
    return MakeConvKernel(ConvPass::kBackwardFilter, g, init.inputs[0].dtype, init.num_threads, 1, 100, 0);
  };
  filter.doc = "dfilter(O,C/groups,KH,KW) = correlation of x with dy (same attrs as conv2d); like gives filter's shape";
  registry.Register(std::move(filter));
}

}  // namespace actorflow

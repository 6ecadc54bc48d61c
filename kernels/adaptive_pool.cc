// adaptive_avg_pool2d: x(N,C,H,W) -> out(N,C,OH,OW) (attr output_size [OH, OW]); output cell
// (i, j) averages rows [floor(i*H/OH), ceil((i+1)*H/OH)) and columns alike, PyTorch's windows,
// which overlap or differ in size when OH does not divide H. The gradient op spreads dy over
// each window divided by its size.
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"
#include "kernels/window.h"

namespace actorflow {
namespace {

struct Adaptive {
  int64_t planes, h, w, oh, ow;
};

int64_t Start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
int64_t End(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

StatusOr<Adaptive> ReadAdaptive(const TensorDesc& x, const Attrs& attrs) {
  if (x.shape.size() != 4)
    return InvalidArgument("adaptive_avg_pool2d: x must have rank 4 (N, C, H, W), got shape " + ShapeToString(x.shape));
  AF_RETURN_IF_ERROR(ExpectFloat(x, "x"));
  AF_ASSIGN_OR_RETURN(auto size, ReadPair(attrs, "output_size", 1));
  if (x.shape[2] == 0 || x.shape[3] == 0)
    return InvalidArgument("adaptive_avg_pool2d: x has an empty spatial axis, shape " + ShapeToString(x.shape));
  return Adaptive{x.shape[0] * x.shape[1], x.shape[2], x.shape[3], size.first, size.second};
}

template <typename T>
KernelFn Forward(Adaptive a) {
  return [a](KernelContext& c) {
    const T* x = c.input(0).as<T>();
    T* y = c.output(0).as<T>();
    for (int64_t p = 0; p < a.planes; ++p, x += a.h * a.w, y += a.oh * a.ow)
      for (int64_t i = 0; i < a.oh; ++i) {
        const int64_t h0 = Start(i, a.h, a.oh), h1 = End(i, a.h, a.oh);
        for (int64_t j = 0; j < a.ow; ++j) {
          const int64_t w0 = Start(j, a.w, a.ow), w1 = End(j, a.w, a.ow);
          T sum = 0;
          for (int64_t r = h0; r < h1; ++r)
            for (int64_t s = w0; s < w1; ++s) sum += x[r * a.w + s];
          y[i * a.ow + j] = sum / static_cast<T>((h1 - h0) * (w1 - w0));
        }
      }
    return Status::Ok();
  };
}

template <typename T>
KernelFn Backward(Adaptive a) {
  return [a](KernelContext& c) {
    const T* dy = c.input(0).as<T>();
    T* dx = c.output(0).as<T>();
    std::fill(dx, dx + a.planes * a.h * a.w, T(0));
    for (int64_t p = 0; p < a.planes; ++p, dx += a.h * a.w, dy += a.oh * a.ow)
      for (int64_t i = 0; i < a.oh; ++i) {
        const int64_t h0 = Start(i, a.h, a.oh), h1 = End(i, a.h, a.oh);
        for (int64_t j = 0; j < a.ow; ++j) {
          const int64_t w0 = Start(j, a.w, a.ow), w1 = End(j, a.w, a.ow);
          const T share = dy[i * a.ow + j] / static_cast<T>((h1 - h0) * (w1 - w0));
          for (int64_t r = h0; r < h1; ++r)
            for (int64_t s = w0; s < w1; ++s) dx[r * a.w + s] += share;
        }
      }
    return Status::Ok();
  };
}

// Windows stay within one (sample, channel) plane: split N or C alike on both sides; both ops
// are linear in their data input, so partial sums pass through.
std::vector<SbpSignature> PlaneSignatures(const SbpContext& ctx, const Shape& x, int linear_input) {
  std::vector<SbpSignature> out = {AllBroadcast(ctx)};
  for (int64_t axis : {0, 1})
    if (CanSplit(x[axis], ctx.parts)) out.push_back(UniformSignature(ctx.inputs.size(), 1, Sbp::Split(axis)));
  SbpSignature partial = AllBroadcast(ctx);
  partial.inputs[linear_input] = partial.outputs[0] = Sbp::PartialSum();
  out.push_back(partial);
  return out;
}

}  // namespace

void RegisterAdaptivePoolOps(OpRegistry& registry) {
  OpDef def;
  def.type = "adaptive_avg_pool2d";
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(Adaptive a, ReadAdaptive(ctx.inputs[0], ctx.attrs));
    const Shape& x = ctx.inputs[0].shape;
    ctx.outputs = {TensorDesc{{x[0], x[1], a.oh, a.ow}, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(Adaptive a, ReadAdaptive(init.inputs[0], init.attrs));
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> { return Forward<T>(a); });
  };
  def.grad = [](GradBuilder& g) -> Status {
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("adaptive_avg_pool2d_grad", {g.output_grad(0), g.input(0)}, g.attrs()));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    return PlaneSignatures(ctx, ctx.inputs[0].shape, 0);
  };
  def.doc = "out(N,C,OH,OW): mean of x(N,C,H,W) over PyTorch's adaptive windows; attr output_size [OH, OW]";
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = "adaptive_avg_pool2d_grad";
  grad.input_names = {"dy", "x"};
  grad.output_names = {"dx"};
  grad.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(Adaptive a, ReadAdaptive(ctx.inputs[1], ctx.attrs));
    const Shape& x = ctx.inputs[1].shape;
    if (ctx.inputs[0] != TensorDesc{{x[0], x[1], a.oh, a.ow}, ctx.inputs[1].dtype})
      return InvalidArgument("adaptive_avg_pool2d_grad: dy " + ctx.inputs[0].ToString() + " does not match the output of x " +
                             ctx.inputs[1].ToString());
    ctx.outputs = {ctx.inputs[1]};
    return Status::Ok();
  };
  grad.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(Adaptive a, ReadAdaptive(init.inputs[1], init.attrs));
    return DispatchFloat(init.inputs[1].dtype, [&]<typename T>() -> StatusOr<KernelFn> { return Backward<T>(a); });
  };
  grad.doc = "dx of adaptive_avg_pool2d (same attrs): dy spread evenly over each window";
  grad.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    return PlaneSignatures(ctx, ctx.inputs[1].shape, 0);
  };
  registry.Register(std::move(grad));
}

}  // namespace actorflow

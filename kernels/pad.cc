// zero_pad2d and reflection_pad2d over NCHW: attr `padding` is an int (all sides) or
// [left, right, top, bottom]. Backward: the padded gradient folded back onto the input
// (reflection adds the mirrored positions to their sources).
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

struct Pads {
  int64_t left, right, top, bottom;
};

StatusOr<Pads> ReadPads(const Attrs& attrs) {
  AF_ASSIGN_OR_RETURN(std::vector<int64_t> p, attrs.GetInts("padding"));
  if (p.size() == 1) return Pads{p[0], p[0], p[0], p[0]};
  if (p.size() != 4) return InvalidArgument("padding must be an int or [left, right, top, bottom], got " + ShapeToString(p));
  for (int64_t v : p)
    if (v < 0) return InvalidArgument("padding must not be negative, got " + ShapeToString(p));
  return Pads{p[0], p[1], p[2], p[3]};
}

// Source row/column of an output position, or -1 for zero padding.
inline int64_t SourceIndex(int64_t o, int64_t pad, int64_t size, bool reflect) {
  int64_t i = o - pad;
  if (i >= 0 && i < size) return i;
  if (!reflect) return -1;
  if (i < 0) return -i;
  return 2 * (size - 1) - i;
}

// Padding works within one (sample, channel) plane: S(0) and S(1) on every tensor. Both pads
// and their backward ops copy or add values: linear in the data input (input 0).
std::vector<SbpSignature> PadSbp(const SbpContext& ctx) {
  const Shape& x = ctx.inputs[0].shape;
  std::vector<SbpSignature> out;
  for (int64_t axis : {0, 1})
    if (CanSplit(x[axis], ctx.parts)) out.push_back(UniformSignature(ctx.inputs.size(), 1, Sbp::Split(axis)));
  out.push_back(AllBroadcast(ctx));
  SbpSignature partial = AllBroadcast(ctx);
  partial.inputs[0] = partial.outputs[0] = Sbp::PartialSum();
  out.push_back(partial);
  return out;
}

void RegisterPad(OpRegistry& registry, const std::string& type, bool reflect) {
  OpDef def;
  def.type = type;
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [reflect](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
    AF_RETURN_IF_ERROR(ExpectRank(ctx.inputs[0], 4, "x (NCHW)"));
    AF_ASSIGN_OR_RETURN(Pads p, ReadPads(ctx.attrs));
    const Shape& s = ctx.inputs[0].shape;
    if (reflect && (p.left >= s[3] || p.right >= s[3] || p.top >= s[2] || p.bottom >= s[2]))
      return InvalidArgument("reflection padding must be smaller than the padded dimension: input " + ShapeToString(s));
    ctx.outputs = {TensorDesc{{s[0], s[1], s[2] + p.top + p.bottom, s[3] + p.left + p.right}, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [reflect](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(Pads p, ReadPads(init.attrs));
    Shape in = init.inputs[0].shape, out = init.outputs[0].shape;
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        const T* x = c.input(0).as<T>();
        T* y = c.output(0).as<T>();
        for (int64_t nc = 0; nc < in[0] * in[1]; ++nc)
          for (int64_t oh = 0; oh < out[2]; ++oh) {
            int64_t ih = SourceIndex(oh, p.top, in[2], reflect);
            for (int64_t ow = 0; ow < out[3]; ++ow) {
              int64_t iw = SourceIndex(ow, p.left, in[3], reflect);
              y[(nc * out[2] + oh) * out[3] + ow] = (ih < 0 || iw < 0) ? T(0) : x[(nc * in[2] + ih) * in[3] + iw];
            }
          }
        return Status::Ok();
      });
    });
  };
  def.grad = [type](GradBuilder& g) -> Status {
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1(type + "_grad", {g.output_grad(0), g.input(0)}, g.attrs()));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return PadSbp(ctx); };
  def.doc = type + ": NCHW padding, attr padding int or [left, right, top, bottom]";
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = type + "_grad";
  grad.input_names = {"dy", "x"};
  grad.output_names = {"dx"};
  grad.infer = [](InferContext& ctx) -> Status {
    ctx.outputs = {ctx.inputs[1]};
    return Status::Ok();
  };
  grad.kernel_factories[kCpuDevice] = [reflect](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(Pads p, ReadPads(init.attrs));
    Shape in = init.inputs[1].shape, out = init.inputs[0].shape;
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        const T* dy = c.input(0).as<T>();
        T* dx = c.output(0).as<T>();
        for (int64_t i = 0; i < NumElements(in); ++i) dx[i] = 0;
        for (int64_t nc = 0; nc < in[0] * in[1]; ++nc)
          for (int64_t oh = 0; oh < out[2]; ++oh) {
            int64_t ih = SourceIndex(oh, p.top, in[2], reflect);
            for (int64_t ow = 0; ow < out[3]; ++ow) {
              int64_t iw = SourceIndex(ow, p.left, in[3], reflect);
              if (ih >= 0 && iw >= 0) dx[(nc * in[2] + ih) * in[3] + iw] += dy[(nc * out[2] + oh) * out[3] + ow];
            }
          }
        return Status::Ok();
      });
    });
  };
  grad.doc = "gradient of " + type;
  grad.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return PadSbp(ctx); };
  registry.Register(std::move(grad));
}

}  // namespace

void RegisterPadOps(OpRegistry& registry) {
  RegisterPad(registry, "zero_pad2d", false);
  RegisterPad(registry, "reflection_pad2d", true);
}

}  // namespace actorflow

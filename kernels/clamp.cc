// clamp: out = min(max(x, min), max) elementwise, either bound optional (attrs "min", "max";
// an absent bound is no bound). NaN stays NaN (both comparisons are false), as torch.clamp.
// The gradient passes dy where x lies within the bounds: inclusive ones (torch.clamp) by
// default, exclusive ones with attr inclusive=false (torch's hardtanh / relu6, whose gradient
// is 0 at the bounds). A NaN x gets no gradient either way.
#include <cmath>
#include <limits>

#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

struct Bounds {
  double low, high;
  bool inclusive;
};

StatusOr<Bounds> ReadBounds(const Attrs& attrs) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Bounds b{attrs.Has("min") ? attrs.GetFloatOr("min", -kInf) : -kInf, attrs.Has("max") ? attrs.GetFloatOr("max", kInf) : kInf,
           attrs.GetBoolOr("inclusive", true)};
  if (std::isnan(b.low) || std::isnan(b.high) || b.low > b.high)
    return InvalidArgument("clamp: min (" + std::to_string(b.low) + ") must not exceed max (" + std::to_string(b.high) + ")");
  return b;
}

Status InferSame(InferContext& ctx, size_t inputs) {
  AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
  if (inputs == 2 && ctx.inputs[1] != ctx.inputs[0])
    return InvalidArgument("clamp_grad: dy " + ctx.inputs[1].ToString() + " does not match x " + ctx.inputs[0].ToString());
  AF_RETURN_IF_ERROR(ReadBounds(ctx.attrs).status());
  ctx.outputs = {ctx.inputs[0]};
  return Status::Ok();
}

}  // namespace

void RegisterClampOps(OpRegistry& registry) {
  OpDef def;
  def.type = "clamp";
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) { return InferSame(ctx, 1); };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(Bounds b, ReadBounds(init.attrs));
    int64_t n = init.inputs[0].num_elements();
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      // float(±inf) bounds are ±inf, so one select pair serves every combination of bounds.
      const T low = static_cast<T>(b.low), high = static_cast<T>(b.high);
      return KernelFn([=](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        T* __restrict y = c.output(0).as<T>();
        for (int64_t i = 0; i < n; ++i) {
          T v = x[i];
          v = v < low ? low : v;
          y[i] = v > high ? high : v;
        }
        return Status::Ok();
      });
    });
  };
  def.grad = [](GradBuilder& g) -> Status {
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("clamp_grad", {g.input(0), g.output_grad(0)}, g.attrs()));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return ElementwiseSbp(ctx, false); };
  def.doc = "out = min(max(x, min), max) elementwise; attrs min, max (optional floats), inclusive (gradient at the bounds)";
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = "clamp_grad";
  grad.input_names = {"x", "dy"};
  grad.output_names = {"dx"};
  grad.infer = [](InferContext& ctx) { return InferSame(ctx, 2); };
  grad.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(Bounds b, ReadBounds(init.attrs));
    int64_t n = init.inputs[0].num_elements();
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      const T low = static_cast<T>(b.low), high = static_cast<T>(b.high);
      const bool inclusive = b.inclusive;
      return KernelFn([=](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        const T* __restrict dy = c.input(1).as<T>();
        T* __restrict dx = c.output(0).as<T>();
        if (inclusive) {
          for (int64_t i = 0; i < n; ++i) {
            T d = dy[i];
            dx[i] = (x[i] >= low && x[i] <= high) ? d : T(0);
          }
        } else {
          for (int64_t i = 0; i < n; ++i) {
            T d = dy[i];
            dx[i] = (x[i] > low && x[i] < high) ? d : T(0);
          }
        }
        return Status::Ok();
      });
    });
  };
  grad.doc = "dx = dy where min <= x <= max (min < x < max if inclusive=false), else 0";
  // Linear in dy: x broadcast with dy partial gives dx partial.
  grad.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = ElementwiseSbp(ctx, false);
    out.push_back(MakeSignature({Sbp::Broadcast(), Sbp::PartialSum()}, {Sbp::PartialSum()}));
    return out;
  };
  registry.Register(std::move(grad));
}

}  // namespace actorflow

// hardtanh: out = min(max(x, min_val), max_val) elementwise (attrs min_val, max_val; relu6 is
// hardtanh(0, 6)), with PyTorch's hardtanh gradient: dy passes where min_val < x < max_val and
// is 0 at the bounds and beyond (clamp, in math_ops.cc, passes it at the bounds, as
// torch.clamp). NaN stays NaN forward and gets no gradient.
#include <cmath>

#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

struct Bounds {
  double low, high;
};

StatusOr<Bounds> ReadBounds(const Attrs& attrs, const std::string& type) {
  Bounds b{attrs.GetFloatOr("min_val", -1.0), attrs.GetFloatOr("max_val", 1.0)};
  if (std::isnan(b.low) || std::isnan(b.high) || !(b.low < b.high))
    return InvalidArgument(type + ": min_val (" + std::to_string(b.low) + ") must be below max_val (" + std::to_string(b.high) + ")");
  return b;
}

Status InferSame(InferContext& ctx, const std::string& type) {
  AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
  if (ctx.inputs.size() == 2 && ctx.inputs[1] != ctx.inputs[0])
    return InvalidArgument(type + ": dy " + ctx.inputs[1].ToString() + " does not match x " + ctx.inputs[0].ToString());
  AF_RETURN_IF_ERROR(ReadBounds(ctx.attrs, type).status());
  ctx.outputs = {ctx.inputs[0]};
  return Status::Ok();
}

}  // namespace

void RegisterHardtanhOps(OpRegistry& registry) {
  OpDef def;
  def.type = "hardtanh";
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) { return InferSame(ctx, "hardtanh"); };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(Bounds b, ReadBounds(init.attrs, "hardtanh"));
    int64_t n = init.inputs[0].num_elements();
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      const T low = static_cast<T>(b.low), high = static_cast<T>(b.high);
      return KernelFn([=](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        T* __restrict y = c.output(0).as<T>();
        for (int64_t i = 0; i < n; ++i) {  // two selects: vectorizes, NaN compares false and passes
          T v = x[i];
          v = v < low ? low : v;
          y[i] = v > high ? high : v;
        }
        return Status::Ok();
      });
    });
  };
  def.grad = [](GradBuilder& g) -> Status {
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("hardtanh_grad", {g.input(0), g.output_grad(0)}, g.attrs()));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return ElementwiseSbp(ctx, false); };
  def.doc = "out = min(max(x, min_val), max_val) elementwise (attrs min_val, max_val); relu6 = hardtanh(0, 6)";
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = "hardtanh_grad";
  grad.input_names = {"x", "dy"};
  grad.output_names = {"dx"};
  grad.infer = [](InferContext& ctx) { return InferSame(ctx, "hardtanh_grad"); };
  grad.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(Bounds b, ReadBounds(init.attrs, "hardtanh_grad"));
    int64_t n = init.inputs[0].num_elements();
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      const T low = static_cast<T>(b.low), high = static_cast<T>(b.high);
      return KernelFn([=](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        const T* __restrict dy = c.input(1).as<T>();
        T* __restrict dx = c.output(0).as<T>();
        for (int64_t i = 0; i < n; ++i) {
          T d = dy[i];  // loaded unconditionally so the select vectorizes
          dx[i] = (x[i] > low && x[i] < high) ? d : T(0);
        }
        return Status::Ok();
      });
    });
  };
  grad.doc = "dx = dy where min_val < x < max_val, else 0 (PyTorch's hardtanh_backward)";
  // Linear in dy: x broadcast with dy partial gives dx partial.
  grad.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = ElementwiseSbp(ctx, false);
    out.push_back(MakeSignature({Sbp::Broadcast(), Sbp::PartialSum()}, {Sbp::PartialSum()}));
    return out;
  };
  registry.Register(std::move(grad));
}

}  // namespace actorflow

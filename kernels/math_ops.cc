// Pointwise math (scalar_pow with attr exponent, abs; each with its `<op>_grad`) and the
// comparisons (equal, not_equal, less, less_equal, greater, greater_equal: NumPy broadcasting,
// int8 results of 0/1, no gradient). The backward ops take x and dy: dx = dy * f'(x).
#include <cmath>

#include "kernels/broadcast.h"
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

enum class Pointwise { kPow, kAbs };

// The parameters a pointwise op reads from its attributes once, at kernel creation.
struct PointwiseParams {
  double exponent = 1;
  static PointwiseParams Of(const Attrs& attrs) { return PointwiseParams{attrs.GetFloatOr("exponent", 1)}; }
};

template <typename T>
inline T Apply(Pointwise f, const PointwiseParams& p, T x) {
  switch (f) {
    case Pointwise::kPow: return static_cast<T>(std::pow(x, static_cast<T>(p.exponent)));
    default: return std::abs(x);
  }
}

// f'(x), as PyTorch defines it: abs has sign(x) (0 at 0 and at NaN).
template <typename T>
inline T Derivative(Pointwise f, const PointwiseParams& p, T x) {
  switch (f) {
    case Pointwise::kPow: return p.exponent == 0 ? T(0) : static_cast<T>(p.exponent * std::pow(x, static_cast<T>(p.exponent - 1)));
    default: return x > T(0) ? T(1) : x < T(0) ? T(-1) : T(0);
  }
}

Status CheckParams(Pointwise f, const Attrs& attrs, const std::string& type) {
  if (f == Pointwise::kPow && !attrs.Has("exponent")) return InvalidArgument(type + ": missing attribute 'exponent'");
  return Status::Ok();
}

void RegisterPointwise(OpRegistry& registry, const std::string& type, Pointwise f, const std::string& doc) {
  OpDef def;
  def.type = type;
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [type, f](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
    AF_RETURN_IF_ERROR(CheckParams(f, ctx.attrs, type));
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [f](const KernelInit& init) -> StatusOr<KernelFn> {
    const int64_t n = init.inputs[0].num_elements();
    const PointwiseParams p = PointwiseParams::Of(init.attrs);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([f, p, n](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        T* __restrict y = c.output(0).as<T>();
        switch (f) {  // one loop per op so each vectorizes
          case Pointwise::kPow: for (int64_t i = 0; i < n; ++i) y[i] = Apply(Pointwise::kPow, p, x[i]); break;
          default: for (int64_t i = 0; i < n; ++i) y[i] = Apply(Pointwise::kAbs, p, x[i]); break;
        }
        return Status::Ok();
      });
    });
  };
  def.grad = [type](GradBuilder& g) -> Status {
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1(type + "_grad", {g.input(0), g.output_grad(0)}, g.attrs()));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return ElementwiseSbp(ctx, false); };
  def.doc = doc;
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = type + "_grad";
  grad.input_names = {"x", "dy"};
  grad.output_names = {"dx"};
  grad.infer = [type, f](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
    if (ctx.inputs[0] != ctx.inputs[1])
      return InvalidArgument("gradient " + ctx.inputs[1].ToString() + " does not match " + ctx.inputs[0].ToString());
    AF_RETURN_IF_ERROR(CheckParams(f, ctx.attrs, type));
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  grad.kernel_factories[kCpuDevice] = [f](const KernelInit& init) -> StatusOr<KernelFn> {
    const int64_t n = init.inputs[0].num_elements();
    const PointwiseParams p = PointwiseParams::Of(init.attrs);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([f, p, n](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        const T* __restrict dy = c.input(1).as<T>();
        T* __restrict dx = c.output(0).as<T>();
        for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * Derivative(f, p, x[i]);
        return Status::Ok();
      });
    });
  };
  // Linear in dy: x broadcast with dy partial gives dx partial.
  grad.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = ElementwiseSbp(ctx, false);
    out.push_back(MakeSignature({Sbp::Broadcast(), Sbp::PartialSum()}, {Sbp::PartialSum()}));
    return out;
  };
  grad.doc = "dx = dy * d" + type + "/dx (same attrs)";
  registry.Register(std::move(grad));
}

enum class Compare { kEqual, kNotEqual, kLess, kLessEqual, kGreater, kGreaterEqual };

template <Compare kOp, typename T>
inline int8_t Test(T x, T y) {
  if constexpr (kOp == Compare::kEqual) return x == y;
  if constexpr (kOp == Compare::kNotEqual) return x != y;
  if constexpr (kOp == Compare::kLess) return x < y;
  if constexpr (kOp == Compare::kLessEqual) return x <= y;
  if constexpr (kOp == Compare::kGreater) return x > y;
  if constexpr (kOp == Compare::kGreaterEqual) return x >= y;
}

template <Compare kOp, typename T>
StatusOr<KernelFn> CompareKernel(const Shape& a, const Shape& b, const Shape& out) {
  AF_ASSIGN_OR_RETURN(StridedLoop loop, MakeLoop(out, BroadcastStrides(a, out), BroadcastStrides(b, out)));
  return KernelFn([loop](KernelContext& c) {
    const T* x = c.input(0).as<T>();
    const T* y = c.input(1).as<T>();
    int8_t* z = c.output(0).as<int8_t>();
    RunLoop(loop, [&](int64_t oa, int64_t ob, int64_t start, int64_t len, int64_t sa, int64_t sb) {
      for (int64_t j = 0; j < len; ++j) z[start + j] = Test<kOp>(x[oa + j * sa], y[ob + j * sb]);
    });
    return Status::Ok();
  });
}

template <Compare kOp>
StatusOr<KernelFn> CompareFor(DType dtype, const Shape& a, const Shape& b, const Shape& out) {
  switch (dtype) {
    case DType::kFloat32: return CompareKernel<kOp, float>(a, b, out);
    case DType::kFloat64: return CompareKernel<kOp, double>(a, b, out);
    case DType::kInt8: return CompareKernel<kOp, int8_t>(a, b, out);
    case DType::kUInt8: return CompareKernel<kOp, uint8_t>(a, b, out);
    case DType::kInt32: return CompareKernel<kOp, int32_t>(a, b, out);
    case DType::kInt64: return CompareKernel<kOp, int64_t>(a, b, out);
    default: return InvalidArgument(std::string("unsupported dtype ") + DTypeName(dtype));
  }
}

void RegisterCompare(OpRegistry& registry, const std::string& type, Compare op, const std::string& symbol) {
  OpDef def;
  def.type = type;
  def.input_names = {"x", "y"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(ExpectSameDType(ctx.inputs[0], ctx.inputs[1], "x", "y"));
    AF_ASSIGN_OR_RETURN(Shape out, BroadcastShape(ctx.inputs[0].shape, ctx.inputs[1].shape));
    ctx.outputs = {TensorDesc{out, DType::kInt8}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [op](const KernelInit& init) -> StatusOr<KernelFn> {
    const Shape &a = init.inputs[0].shape, &b = init.inputs[1].shape, &o = init.outputs[0].shape;
    const DType t = init.inputs[0].dtype;
    switch (op) {
      case Compare::kEqual: return CompareFor<Compare::kEqual>(t, a, b, o);
      case Compare::kNotEqual: return CompareFor<Compare::kNotEqual>(t, a, b, o);
      case Compare::kLess: return CompareFor<Compare::kLess>(t, a, b, o);
      case Compare::kLessEqual: return CompareFor<Compare::kLessEqual>(t, a, b, o);
      case Compare::kGreater: return CompareFor<Compare::kGreater>(t, a, b, o);
      default: return CompareFor<Compare::kGreaterEqual>(t, a, b, o);
    }
  };
  // Output axis i splits where each operand has it at full extent (split alike) or lacks it /
  // has extent 1 (whole). Not linear: no partial sums.
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const Shape &x = ctx.inputs[0].shape, &y = ctx.inputs[1].shape, &o = ctx.outputs[0].shape;
    auto operand = [&](const Shape& s, size_t i) {
      const int64_t d = static_cast<int64_t>(i) - static_cast<int64_t>(o.size() - s.size());
      return d >= 0 && s[d] == o[i] ? Sbp::Split(d) : Sbp::Broadcast();
    };
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    for (size_t i = 0; i < o.size(); ++i)
      if (CanSplit(o[i], ctx.parts))
        out.push_back(MakeSignature({operand(x, i), operand(y, i)}, {Sbp::Split(static_cast<int64_t>(i))}));
    return out;
  };
  def.doc = "out(int8) = 1 where x " + symbol + " y else 0, with NumPy broadcasting";
  registry.Register(std::move(def));
}

}  // namespace

void RegisterMathOps(OpRegistry& registry) {
  RegisterPointwise(registry, "scalar_pow", Pointwise::kPow, "out = x ** exponent (attr exponent, a float)");
  RegisterPointwise(registry, "abs", Pointwise::kAbs, "out = |x| (gradient sign(x), 0 at 0)");
  RegisterCompare(registry, "equal", Compare::kEqual, "==");
  RegisterCompare(registry, "not_equal", Compare::kNotEqual, "!=");
  RegisterCompare(registry, "less", Compare::kLess, "<");
  RegisterCompare(registry, "less_equal", Compare::kLessEqual, "<=");
  RegisterCompare(registry, "greater", Compare::kGreater, ">");
  RegisterCompare(registry, "greater_equal", Compare::kGreaterEqual, ">=");
}

}  // namespace actorflow

// Binary elementwise ops with NumPy broadcasting (add, sub, mul, div), their scalar forms
// (scalar_add, scalar_mul with attr `scalar`; sub/div by a scalar are expressed through them),
// and add_n. Gradients of broadcast operands are summed back with reduce_sum_like (reduce.cc).
#include <cmath>

#include "kernels/broadcast.h"
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

template <BinaryOp kOp, typename T>
inline T Apply(T x, T y) {
  if constexpr (kOp == BinaryOp::kAdd) return x + y;
  if constexpr (kOp == BinaryOp::kSub) return x - y;
  if constexpr (kOp == BinaryOp::kMul) return x * y;
  if constexpr (kOp == BinaryOp::kDiv) return x / y;
}

// The op is a template parameter so each inner loop is a plain vectorizable expression; the
// broadcast walk (broadcast.h) hands out runs whose operand strides are 0 or 1 in practice.
// Integer division by zero would trap (SIGFPE); it becomes an error of the call instead.
template <BinaryOp kOp, typename T>
inline Status CheckDivisor(const TensorView& y) {
  if constexpr (kOp == BinaryOp::kDiv && std::is_integral_v<T>) {
    const T* v = y.as<T>();
    for (int64_t i = 0; i < y.num_elements(); ++i)
      if (v[i] == 0) return InvalidArgument("div: integer division by zero (y[" + std::to_string(i) + "] == 0)");
  }
  return Status::Ok();
}

template <BinaryOp kOp, typename T>
StatusOr<KernelFn> BinaryKernel(const Shape& a, const Shape& b, const Shape& out) {
  if (a == out && b == out) {
    int64_t n = NumElements(out);
    return KernelFn([n](KernelContext& c) {
      const T* __restrict x = c.input(0).as<T>();
      const T* __restrict y = c.input(1).as<T>();
      T* __restrict z = c.output(0).as<T>();
      AF_RETURN_IF_ERROR((CheckDivisor<kOp, T>(c.input(1))));
      for (int64_t i = 0; i < n; ++i) z[i] = Apply<kOp>(x[i], y[i]);
      return Status::Ok();
    });
  }
  // Output is contiguous, so the loop's linear start index is the output offset.
  AF_ASSIGN_OR_RETURN(StridedLoop loop, MakeLoop(out, BroadcastStrides(a, out), BroadcastStrides(b, out)));
  return KernelFn([loop](KernelContext& c) {
    const T* x = c.input(0).as<T>();
    const T* y = c.input(1).as<T>();
    T* z = c.output(0).as<T>();
    AF_RETURN_IF_ERROR((CheckDivisor<kOp, T>(c.input(1))));
    RunLoop(loop, [&](int64_t oa, int64_t ob, int64_t start, int64_t len, int64_t sa, int64_t sb) {
      T* __restrict zr = z + start;
      const T* __restrict xr = x + oa;
      const T* __restrict yr = y + ob;
      if (sa == 1 && sb == 1) {
        for (int64_t j = 0; j < len; ++j) zr[j] = Apply<kOp>(xr[j], yr[j]);
      } else if (sa == 1 && sb == 0) {
        T yv = yr[0];
        for (int64_t j = 0; j < len; ++j) zr[j] = Apply<kOp>(xr[j], yv);
      } else if (sa == 0 && sb == 1) {
        T xv = xr[0];
        for (int64_t j = 0; j < len; ++j) zr[j] = Apply<kOp>(xv, yr[j]);
      } else {
        for (int64_t j = 0; j < len; ++j) zr[j] = Apply<kOp>(xr[j * sa], yr[j * sb]);
      }
    });
    return Status::Ok();
  });
}

template <BinaryOp kOp>
StatusOr<KernelFn> BinaryFor(DType dtype, const Shape& a, const Shape& b, const Shape& out) {
  switch (dtype) {
    case DType::kFloat32: return BinaryKernel<kOp, float>(a, b, out);
    case DType::kFloat64: return BinaryKernel<kOp, double>(a, b, out);
    case DType::kInt32: return BinaryKernel<kOp, int32_t>(a, b, out);
    case DType::kInt64: return BinaryKernel<kOp, int64_t>(a, b, out);
    default: return InvalidArgument(std::string("unsupported dtype ") + DTypeName(dtype) + " (float32, float64, int32, int64)");
  }
}

Status InferBinary(InferContext& ctx) {
  AF_RETURN_IF_ERROR(ExpectSameDType(ctx.inputs[0], ctx.inputs[1], "x", "y"));
  AF_ASSIGN_OR_RETURN(Shape out, BroadcastShape(ctx.inputs[0].shape, ctx.inputs[1].shape));
  ctx.outputs = {TensorDesc{out, ctx.inputs[0].dtype}};
  return Status::Ok();
}

// Sums `dy` (broadcast shape) down to `like`'s shape, or passes it through if equal.
StatusOr<std::string> ReduceToShape(GradBuilder& g, const std::string& dy, const std::string& like, const Shape& dy_shape,
                                    const Shape& like_shape) {
  if (dy_shape == like_shape) return dy;
  return g.AddOp1("reduce_sum_like", {dy, like});
}

Status GradBinary(GradBuilder& g, BinaryOp op) {
  std::string x = g.input(0), y = g.input(1), dz = g.output_grad(0);
  const Shape &xs = g.input_desc(0).shape, &ys = g.input_desc(1).shape, &zs = g.output_desc(0).shape;
  if (g.needs_input_grad(0)) {
    std::string dx = dz;
    if (op == BinaryOp::kMul) { AF_ASSIGN_OR_RETURN(dx, g.AddOp1("mul", {dz, y})); }
    if (op == BinaryOp::kDiv) { AF_ASSIGN_OR_RETURN(dx, g.AddOp1("div", {dz, y})); }
    AF_ASSIGN_OR_RETURN(std::string r, ReduceToShape(g, dx, x, zs, xs));
    g.SetInputGrad(0, r);
  }
  if (g.needs_input_grad(1)) {
    std::string dy;
    switch (op) {
      case BinaryOp::kAdd: dy = dz; break;
      case BinaryOp::kSub: { AF_ASSIGN_OR_RETURN(dy, g.AddOp1("scalar_mul", {dz}, Attrs{{"scalar", -1.0}})); break; }
      case BinaryOp::kMul: { AF_ASSIGN_OR_RETURN(dy, g.AddOp1("mul", {dz, x})); break; }
      case BinaryOp::kDiv: {  // d(x/y)/dy = -z/y
        AF_ASSIGN_OR_RETURN(std::string q, g.AddOp1("div", {g.output(0), y}));
        AF_ASSIGN_OR_RETURN(std::string t, g.AddOp1("mul", {dz, q}));
        AF_ASSIGN_OR_RETURN(dy, g.AddOp1("scalar_mul", {t}, Attrs{{"scalar", -1.0}}));
        break;
      }
    }
    AF_ASSIGN_OR_RETURN(std::string r, ReduceToShape(g, dy, y, zs, ys));
    g.SetInputGrad(1, r);
  }
  return Status::Ok();
}

// With NumPy broadcasting, output axis i splits where each operand either has axis i at the
// full extent (split alike) or lacks it / has extent 1 (read whole: B). add and sub are linear
// in both operands together (P,P->P); mul is linear in each one alone, div in x alone.
StatusOr<std::vector<SbpSignature>> BinarySbp(const SbpContext& ctx, BinaryOp op) {
  const Shape &x = ctx.inputs[0].shape, &y = ctx.inputs[1].shape, &o = ctx.outputs[0].shape;
  auto operand = [&](const Shape& s, size_t i) {
    const int64_t d = static_cast<int64_t>(i) - static_cast<int64_t>(o.size() - s.size());
    return d >= 0 && s[d] == o[i] ? Sbp::Split(d) : Sbp::Broadcast();
  };
  std::vector<SbpSignature> out;
  for (size_t i = 0; i < o.size(); ++i)
    if (CanSplit(o[i], ctx.parts))
      out.push_back(MakeSignature({operand(x, i), operand(y, i)}, {Sbp::Split(static_cast<int64_t>(i))}));
  out.push_back(AllBroadcast(ctx));
  const Sbp b = Sbp::Broadcast(), p = Sbp::PartialSum();
  if (op == BinaryOp::kAdd || op == BinaryOp::kSub) out.push_back(MakeSignature({p, p}, {p}));
  if (op == BinaryOp::kMul || op == BinaryOp::kDiv) out.push_back(MakeSignature({p, b}, {p}));
  if (op == BinaryOp::kMul) out.push_back(MakeSignature({b, p}, {p}));
  return out;
}

void RegisterBinary(OpRegistry& registry, const std::string& type, BinaryOp op) {
  OpDef def;
  def.type = type;
  def.input_names = {"x", "y"};
  def.output_names = {"out"};
  def.infer = InferBinary;
  def.kernel_factories[kCpuDevice] = [op, type](const KernelInit& init) -> StatusOr<KernelFn> {
    const Shape &a = init.inputs[0].shape, &b = init.inputs[1].shape, &o = init.outputs[0].shape;
    DType dtype = init.inputs[0].dtype;
    switch (op) {
      case BinaryOp::kAdd: return BinaryFor<BinaryOp::kAdd>(dtype, a, b, o);
      case BinaryOp::kSub: return BinaryFor<BinaryOp::kSub>(dtype, a, b, o);
      case BinaryOp::kMul: return BinaryFor<BinaryOp::kMul>(dtype, a, b, o);
      default: return BinaryFor<BinaryOp::kDiv>(dtype, a, b, o);
    }
  };
  def.grad = [op](GradBuilder& g) { return GradBinary(g, op); };
  def.sbp = [op](const SbpContext& ctx) { return BinarySbp(ctx, op); };
  def.doc = "out = x " + std::string(op == BinaryOp::kAdd ? "+" : op == BinaryOp::kSub ? "-" : op == BinaryOp::kMul ? "*" : "/") +
            " y with NumPy broadcasting";
  registry.Register(std::move(def));
}

// out = x * scale + offset, one op for the scalar forms of + - * /.
void RegisterScalar(OpRegistry& registry, const std::string& type, bool multiply) {
  OpDef def;
  def.type = type;
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    if (!ctx.attrs.Has("scalar")) return InvalidArgument("missing attribute 'scalar'");
    DType t = ctx.inputs[0].dtype;
    if (t != DType::kInt32 && t != DType::kInt64) AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [multiply](const KernelInit& init) -> StatusOr<KernelFn> {
    double s = init.attrs.GetFloatOr("scalar", 0);
    int64_t n = init.inputs[0].num_elements();
    return DispatchNumeric(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      T v = static_cast<T>(s);
      return KernelFn([=](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        T* __restrict z = c.output(0).as<T>();
        if (multiply) for (int64_t i = 0; i < n; ++i) z[i] = x[i] * v;
        else for (int64_t i = 0; i < n; ++i) z[i] = x[i] + v;
        return Status::Ok();
      });
    });
  };
  def.grad = [multiply](GradBuilder& g) -> Status {
    if (!multiply) {
      g.SetInputGrad(0, g.output_grad(0));
      return Status::Ok();
    }
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("scalar_mul", {g.output_grad(0)}, Attrs{{"scalar", g.attrs().GetFloatOr("scalar", 0)}}));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  // x * scalar is linear; x + scalar is not (each device's part would get the scalar).
  def.sbp = [multiply](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return ElementwiseSbp(ctx, multiply); };
  def.doc = multiply ? "out = x * scalar" : "out = x + scalar";
  registry.Register(std::move(def));
}

}  // namespace

void RegisterElementwiseOps(OpRegistry& registry) {
  RegisterBinary(registry, "add", BinaryOp::kAdd);
  RegisterBinary(registry, "sub", BinaryOp::kSub);
  RegisterBinary(registry, "mul", BinaryOp::kMul);
  RegisterBinary(registry, "div", BinaryOp::kDiv);
  RegisterScalar(registry, "scalar_add", false);
  RegisterScalar(registry, "scalar_mul", true);

  OpDef add_n;
  add_n.type = "add_n";
  add_n.input_names = {"in"};
  add_n.output_names = {"out"};
  add_n.variadic_inputs = true;
  add_n.infer = [](InferContext& ctx) -> Status {
    if (ctx.inputs.empty()) return InvalidArgument("add_n needs at least one input");
    for (size_t i = 1; i < ctx.inputs.size(); ++i)
      if (ctx.inputs[i] != ctx.inputs[0])
        return InvalidArgument("add_n: input " + std::to_string(i) + " is " + ctx.inputs[i].ToString() + ", expected " +
                               ctx.inputs[0].ToString());
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  add_n.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.outputs[0].num_elements();
    return DispatchNumeric(init.outputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([n](KernelContext& c) {
        T* __restrict z = c.output(0).as<T>();
        const T* x0 = c.input(0).as<T>();
        for (int64_t i = 0; i < n; ++i) z[i] = x0[i];
        for (size_t k = 1; k < c.num_inputs(); ++k) {
          const T* __restrict x = c.input(k).as<T>();
          for (int64_t i = 0; i < n; ++i) z[i] += x[i];
        }
        return Status::Ok();
      });
    });
  };
  add_n.grad = [](GradBuilder& g) -> Status {
    for (int i = 0; i < g.num_inputs(); ++i) g.SetInputGrad(i, g.output_grad(0));
    return Status::Ok();
  };
  add_n.doc = "out = sum of inputs (same shape)";
  add_n.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return ElementwiseSbp(ctx, true); };
  registry.Register(std::move(add_n));
}

}  // namespace actorflow

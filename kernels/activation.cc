// Unary elementwise math (relu, sigmoid, tanh, gelu, exp, log, sqrt, square, negative) and
// their backward ops. Backward ops take what makes the derivative cheapest: relu/sigmoid/
// tanh/exp/sqrt use the forward output y, gelu/log/square use the input x.
#include <cmath>

#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

enum class Unary { kRelu, kSigmoid, kTanh, kGelu, kExp, kLog, kSqrt, kSquare, kNegative };

template <typename T>
inline T Forward(Unary f, T x) {
  switch (f) {
    case Unary::kRelu: return NanRelu(x);
    case Unary::kSigmoid: return T(1) / (T(1) + std::exp(-x));
    case Unary::kTanh: return std::tanh(x);
    case Unary::kGelu: return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2)));
    case Unary::kExp: return std::exp(x);
    case Unary::kLog: return std::log(x);
    case Unary::kSqrt: return std::sqrt(x);
    case Unary::kSquare: return x * x;
    default: return -x;
  }
}

// dx = dy * f'(.), where `v` is y or x as documented above.
template <typename T>
inline T Backward(Unary f, T v, T dy) {
  switch (f) {
    case Unary::kRelu: return v > T(0) ? dy : T(0);
    case Unary::kSigmoid: return dy * v * (T(1) - v);
    case Unary::kTanh: return dy * (T(1) - v * v);
    case Unary::kGelu: {
      T cdf = T(0.5) * (T(1) + std::erf(v * T(M_SQRT1_2)));
      T pdf = std::exp(T(-0.5) * v * v) * T(0.3989422804014327);
      return dy * (cdf + v * pdf);
    }
    case Unary::kExp: return dy * v;
    case Unary::kLog: return dy / v;
    case Unary::kSqrt: return dy * T(0.5) / v;
    case Unary::kSquare: return dy * T(2) * v;
    default: return -dy;
  }
}

bool UsesOutput(Unary f) {
  return f == Unary::kRelu || f == Unary::kSigmoid || f == Unary::kTanh || f == Unary::kExp || f == Unary::kSqrt;
}

void RegisterUnary(OpRegistry& registry, const std::string& type, Unary f) {
  OpDef def;
  def.type = type;
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [type](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [f](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[0].num_elements();
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([f, n](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        T* __restrict y = c.output(0).as<T>();
        if (f == Unary::kRelu) {
          for (int64_t i = 0; i < n; ++i) y[i] = NanRelu(x[i]);
        } else {
          for (int64_t i = 0; i < n; ++i) y[i] = Forward(f, x[i]);
        }
        return Status::Ok();
      });
    });
  };
  def.grad = [type, f](GradBuilder& g) -> Status {
    if (f == Unary::kNegative) {
      AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("scalar_mul", {g.output_grad(0)}, Attrs{{"scalar", -1.0}}));
      g.SetInputGrad(0, dx);
      return Status::Ok();
    }
    std::string v = UsesOutput(f) ? g.output(0) : g.input(0);
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1(type + "_grad", {v, g.output_grad(0)}));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  // Negation is linear: partial sums stay partial sums.
  def.sbp = [f](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return ElementwiseSbp(ctx, f == Unary::kNegative); };
  def.doc = "out = " + type + "(x), elementwise";
  registry.Register(std::move(def));

  if (f == Unary::kNegative) return;
  OpDef grad;
  grad.type = type + "_grad";
  grad.input_names = {UsesOutput(f) ? "y" : "x", "dy"};
  grad.output_names = {"dx"};
  grad.infer = [](InferContext& ctx) -> Status {
    if (ctx.inputs[0] != ctx.inputs[1])
      return InvalidArgument("gradient " + ctx.inputs[1].ToString() + " does not match " + ctx.inputs[0].ToString());
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  grad.kernel_factories[kCpuDevice] = [f](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[0].num_elements();
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([f, n](KernelContext& c) {
        const T* __restrict v = c.input(0).as<T>();
        const T* __restrict dy = c.input(1).as<T>();
        T* __restrict dx = c.output(0).as<T>();
        if (f == Unary::kRelu) {
          for (int64_t i = 0; i < n; ++i) {
            T d = dy[i];  // loaded unconditionally so the select vectorizes
            dx[i] = v[i] > T(0) ? d : T(0);
          }
        } else {
          for (int64_t i = 0; i < n; ++i) dx[i] = Backward(f, v[i], dy[i]);
        }
        return Status::Ok();
      });
    });
  };
  grad.doc = "dx = dy * d" + type + "/dx";
  // dx = dy * f'(v) is linear in dy: v broadcast, dy partial gives dx partial.
  grad.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = ElementwiseSbp(ctx, false);
    out.push_back(MakeSignature({Sbp::Broadcast(), Sbp::PartialSum()}, {Sbp::PartialSum()}));
    return out;
  };
  registry.Register(std::move(grad));
}

}  // namespace

void RegisterActivationOps(OpRegistry& registry) {
  RegisterUnary(registry, "relu", Unary::kRelu);
  RegisterUnary(registry, "sigmoid", Unary::kSigmoid);
  RegisterUnary(registry, "tanh", Unary::kTanh);
  RegisterUnary(registry, "gelu", Unary::kGelu);
  RegisterUnary(registry, "exp", Unary::kExp);
  RegisterUnary(registry, "log", Unary::kLog);
  RegisterUnary(registry, "sqrt", Unary::kSqrt);
  RegisterUnary(registry, "square", Unary::kSquare);
  RegisterUnary(registry, "negative", Unary::kNegative);
}

}  // namespace actorflow

// Optimizer updates, in place on the variable (mutable input 0) and its state. They have no
// data outputs; the compiler orders them after every reader of the variable. lr is a (1,)
// float32 feed, so schedules cost no recompilation. Adam's bias correction is folded into lr
// by the caller (lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)).
#include <cmath>

#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

// `rate_sizes`: the element counts the lr input may have ((1,) for most updates).
Status InferUpdate(InferContext& ctx, const std::vector<std::string>& names, const std::vector<int64_t>& rate_sizes) {
  const TensorDesc& var = ctx.inputs[0];
  if (var.dtype != DType::kFloat32) return InvalidArgument(std::string("variable must be float32, got ") + DTypeName(var.dtype));
  for (size_t i = 1; i + 1 < ctx.inputs.size(); ++i)
    if (ctx.inputs[i] != var)
      return InvalidArgument(names[i] + " is " + ctx.inputs[i].ToString() + ", expected " + var.ToString() + " like var");
  const TensorDesc& lr = ctx.inputs.back();
  bool rate_ok = false;
  std::string expected;
  for (int64_t size : rate_sizes) {
    rate_ok |= lr == TensorDesc{{size}, DType::kFloat32};
    expected += (expected.empty() ? "float32(" : " or float32(") + std::to_string(size) + ",)";
  }
  if (!rate_ok) return InvalidArgument("lr must be " + expected + ", got " + lr.ToString());
  ctx.outputs.clear();
  return Status::Ok();
}

void Register(OpRegistry& registry, const std::string& type, std::vector<std::string> inputs, std::vector<int> mutable_inputs,
              std::function<StatusOr<KernelFn>(const KernelInit&)> make, const std::string& doc,
              std::vector<int64_t> rate_sizes = {1}, bool elementwise = true) {
  OpDef def;
  def.type = type;
  def.input_names = std::move(inputs);
  def.mutable_inputs = std::move(mutable_inputs);
  def.infer = [names = def.input_names, rate_sizes](InferContext& ctx) { return InferUpdate(ctx, names, rate_sizes); };
  def.kernel_factories[kCpuDevice] = std::move(make);
  def.doc = doc;
  // Every replica applies the same (all-reduced) gradient to its full copy: all broadcast. An
  // elementwise update also runs on a split variable with its gradient and state split alike
  // (lr whole); an update with a per-tensor norm (LAMB) does not.
  def.sbp = [elementwise](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    const Shape& var = ctx.inputs[0].shape;
    const size_t n = ctx.inputs.size();
    for (int64_t i = 0; elementwise && i < static_cast<int64_t>(var.size()); ++i) {
      if (!CanSplit(var[i], ctx.parts)) continue;
      SbpSignature split = UniformSignature(n, 0, Sbp::Split(i));
      split.inputs[n - 1] = Sbp::Broadcast();  // lr
      out.push_back(split);
    }
    return out;
  };
  registry.Register(std::move(def));
}

// Hyperparameters every update reads once, at kernel creation. grad_scale is 1 / the loss's
// element count (the compiler's OneFlow loss semantics); the effective gradient is
// grad_scale * grad.
struct Hyper {
  float wd, gs, beta, b1, b2, eps, decay;
  explicit Hyper(const Attrs& a, double default_eps = 1e-8)
      : wd(static_cast<float>(a.GetFloatOr("weight_decay", 0))),
        gs(static_cast<float>(a.GetFloatOr("grad_scale", 1.0))),
        beta(static_cast<float>(a.GetFloatOr("beta", 0.9))),
        b1(static_cast<float>(a.GetFloatOr("beta1", 0.9))),
        b2(static_cast<float>(a.GetFloatOr("beta2", 0.999))),
        eps(static_cast<float>(a.GetFloatOr("epsilon", default_eps))),
        decay(static_cast<float>(a.GetFloatOr("decay_rate", 0.99))) {}
};

}  // namespace

void RegisterOptimizerOps(OpRegistry& registry) {
  Register(registry, "sgd_update", {"var", "grad", "lr"}, {0}, [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[0].num_elements();
    Hyper h(init.attrs);
    return KernelFn([=](KernelContext& c) {
      float* __restrict w = c.input(0).as<float>();
      const float* __restrict g = c.input(1).as<float>();
      float lr = *c.input(2).as<float>();
      for (int64_t i = 0; i < n; ++i) w[i] -= lr * (h.gs * g[i] + h.wd * w[i]);
      return Status::Ok();
    });
  }, "var -= lr * (grad + weight_decay * var)");

  Register(registry, "momentum_update", {"var", "grad", "momentum", "lr"}, {0, 2}, [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[0].num_elements();
    Hyper h(init.attrs);
    return KernelFn([=](KernelContext& c) {
      float* __restrict w = c.input(0).as<float>();
      const float* __restrict g = c.input(1).as<float>();
      float* __restrict m = c.input(2).as<float>();
      float lr = *c.input(3).as<float>();
      for (int64_t i = 0; i < n; ++i) {
        m[i] = h.beta * m[i] - lr * (h.gs * g[i] + h.wd * w[i]);
        w[i] += m[i];
      }
      return Status::Ok();
    });
  }, "momentum = beta * momentum - lr * (grad + wd * var); var += momentum");

  // lr (1,) = [lr]: the caller folds the bias corrections into lr (eps then adds to sqrt(v)).
  // lr (3,) = [lr, c1, c2] with c1 = 1/(1-beta1^t), c2 = 1/(1-beta2^t): PyTorch's Adam exactly,
  // m^ = m*c1, v^ = v*c2, var -= lr * m^ / (sqrt(v^) + eps); decoupled decay then subtracts
  // lr * wd * var, PyTorch's AdamW (its var *= 1 - lr*wd first does not change m^ or v^).
  Register(registry, "adam_update", {"var", "grad", "m", "v", "lr"}, {0, 2, 3}, [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[0].num_elements();
    const bool corrected = init.inputs[4].num_elements() == 3;
    Hyper h(init.attrs);
    bool decoupled = init.attrs.GetBoolOr("decoupled_weight_decay", false);
    return KernelFn([=](KernelContext& c) {
      float* __restrict w = c.input(0).as<float>();
      const float* __restrict g = c.input(1).as<float>();
      float* __restrict m = c.input(2).as<float>();
      float* __restrict v = c.input(3).as<float>();
      const float* rate = c.input(4).as<float>();
      const float lr = rate[0], c1 = corrected ? rate[1] : 1.0f, sqrt_c2 = corrected ? std::sqrt(rate[2]) : 1.0f;
      for (int64_t i = 0; i < n; ++i) {
        float gi = decoupled ? h.gs * g[i] : h.gs * g[i] + h.wd * w[i];
        m[i] = h.b1 * m[i] + (1 - h.b1) * gi;
        v[i] = h.b2 * v[i] + (1 - h.b2) * gi * gi;
        float step = m[i] * c1 / (std::sqrt(v[i]) * sqrt_c2 + h.eps);
        if (decoupled) step += h.wd * w[i];
        w[i] -= lr * step;
      }
      return Status::Ok();
    });
  }, "Adam: m, v moments; var -= lr * (m^ / (sqrt(v^) + eps) [+ wd * var if decoupled_weight_decay (AdamW)]); "
     "without decoupling wd * var is added to grad; lr = [lr] (bias correction folded in by the caller, m^ = m, "
     "v^ = v) or [lr, 1/(1-beta1^t), 1/(1-beta2^t)] (m^ = m*c1, v^ = v*c2, PyTorch's formula)", {1, 3});

  Register(registry, "rmsprop_update", {"var", "grad", "mean_square", "lr"}, {0, 2}, [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[0].num_elements();
    Hyper h(init.attrs);
    return KernelFn([=](KernelContext& c) {
      float* __restrict w = c.input(0).as<float>();
      const float* __restrict g = c.input(1).as<float>();
      float* __restrict s = c.input(2).as<float>();
      float lr = *c.input(3).as<float>();
      for (int64_t i = 0; i < n; ++i) {
        float gi = h.gs * g[i] + h.wd * w[i];
        s[i] = h.decay * s[i] + (1 - h.decay) * gi * gi;
        w[i] -= lr * gi / (std::sqrt(s[i]) + h.eps);
      }
      return Status::Ok();
    });
  }, "RMSProp: ms = decay*ms + (1-decay)*g^2; var -= lr * g / (sqrt(ms) + eps)");

  // LAMB: Adam direction r = m^ / (sqrt(v^) + eps) + wd * var with bias-corrected moments
  // m^ = m * c1, v^ = v * c2, scaled per tensor by the trust ratio ||var|| / ||r|| (1 when
  // either norm is 0). lr is (1,) = [lr] (no correction) or (3,) = [lr, c1, c2]. Two passes, no
  // scratch: the first updates m, v and accumulates both norms, the second recomputes r.
  Register(registry, "lamb_update", {"var", "grad", "m", "v", "lr"}, {0, 2, 3}, [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[0].num_elements();
    const int64_t lr_size = init.inputs[4].num_elements();
    if (lr_size != 1 && lr_size != 3)
      return InvalidArgument("lamb_update: lr must have 1 element [lr] or 3 [lr, 1/(1-beta1^t), 1/(1-beta2^t)], got " +
                             init.inputs[4].ToString());
    Hyper h(init.attrs, 1e-6);
    return KernelFn([=](KernelContext& c) {
      float* __restrict w = c.input(0).as<float>();
      const float* __restrict g = c.input(1).as<float>();
      float* __restrict m = c.input(2).as<float>();
      float* __restrict v = c.input(3).as<float>();
      const float* rate = c.input(4).as<float>();
      const float lr = rate[0], c1 = lr_size == 3 ? rate[1] : 1.0f, c2 = lr_size == 3 ? rate[2] : 1.0f;
      const float sqrt_c2 = std::sqrt(c2);
      auto direction = [&](int64_t i) { return m[i] * c1 / (std::sqrt(v[i]) * sqrt_c2 + h.eps) + h.wd * w[i]; };
      double w_norm = 0, r_norm = 0;
      for (int64_t i = 0; i < n; ++i) {
        float gi = h.gs * g[i];
        m[i] = h.b1 * m[i] + (1 - h.b1) * gi;
        v[i] = h.b2 * v[i] + (1 - h.b2) * gi * gi;
        float r = direction(i);
        w_norm += static_cast<double>(w[i]) * w[i];
        r_norm += static_cast<double>(r) * r;
      }
      float trust = (w_norm > 0 && r_norm > 0) ? static_cast<float>(std::sqrt(w_norm / r_norm)) : 1.0f;
      float step = lr * trust;
      for (int64_t i = 0; i < n; ++i) w[i] -= step * direction(i);
      return Status::Ok();
    });
  }, "LAMB: r = m*c1/(sqrt(v*c2)+eps) + wd*var; var -= lr * (||var||/||r||) * r; lr = [lr] or [lr, c1, c2]", {1, 3},
           /*elementwise=*/false);
}

}  // namespace actorflow

// batch_normalization: inputs x (..., C at attr axis (default 1), ...), gamma (C), beta (C),
// moving_mean (C), moving_variance (C); attrs axis, epsilon (1e-5), momentum (0.99), training.
// Outputs: out, mean (C), inv_std (C) (the statistics used, saved for the backward op).
//   training=false: mean/var = the moving statistics, only read.
//   training=true:  mean/var = batch statistics over every axis but `axis` (biased variance);
//                   moving_mean/moving_variance (mutable inputs 3, 4) are updated in place:
//                   moving = momentum * moving + (1 - momentum) * batch, with the unbiased
//                   batch variance for moving_variance (as cuDNN and PyTorch).
// out = (x - mean) * inv_std * gamma + beta,  inv_std = 1 / sqrt(var + epsilon).
// batch_normalization_grad (x, dy, mean, inv_std, gamma) -> dx, dgamma, dbeta, with M = N*H*W:
//   training:  dx = gamma * inv_std / M * (M * dy - sum(dy) - xhat * sum(dy * xhat))
//   inference: dx = gamma * inv_std * dy;   both: dgamma = sum(dy * xhat), dbeta = sum(dy).
#include <cmath>

#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

StatusOr<AxisSplit> ReadBatchNorm(const std::vector<TensorDesc>& in, const Attrs& attrs, int first_channel_input) {
  const TensorDesc& x = in[0];
  AF_RETURN_IF_ERROR(ExpectFloat(x, "x"));
  AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(attrs.GetIntOr("axis", 1), x.shape.size(), "axis"));
  int64_t channels = x.shape[axis];
  static const char* kNames[] = {"x", "gamma", "beta", "moving_mean", "moving_variance"};
  for (size_t i = first_channel_input; i < in.size(); ++i)
    if (in[i].shape != Shape{channels} || in[i].dtype != x.dtype)
      return InvalidArgument(std::string(first_channel_input == 1 ? kNames[i] : "statistics") + " must be " + DTypeName(x.dtype) +
                             "(" + std::to_string(channels) + ",) to match x " + ShapeToString(x.shape) + " on axis " +
                             std::to_string(axis) + ", got " + in[i].ToString());
  return SplitAt(x.shape, axis);
}

template <typename T>
KernelFn ForwardKernel(AxisSplit s, bool training, double epsilon, double momentum) {
  return [=](KernelContext& c) {
    const T* x = c.input(0).as<T>();
    const T* gamma = c.input(1).as<T>();
    const T* beta = c.input(2).as<T>();
    T* moving_mean = c.input(3).as<T>();
    T* moving_var = c.input(4).as<T>();
    T* y = c.output(0).as<T>();
    T* mean_out = c.output(1).as<T>();
    T* inv_std_out = c.output(2).as<T>();
    int64_t m = s.outer * s.inner;
    for (int64_t ch = 0; ch < s.channels; ++ch) {
      double mean, var;
      if (training) {
        double sum = 0, sq = 0;
        for (int64_t o = 0; o < s.outer; ++o) {
          const T* row = x + (o * s.channels + ch) * s.inner;
          #pragma omp simd reduction(+ : sum)
          for (int64_t i = 0; i < s.inner; ++i) sum += row[i];
        }
        mean = sum / static_cast<double>(m);
        for (int64_t o = 0; o < s.outer; ++o) {
          const T* row = x + (o * s.channels + ch) * s.inner;
          #pragma omp simd reduction(+ : sq)
          for (int64_t i = 0; i < s.inner; ++i) sq += (row[i] - mean) * (row[i] - mean);
        }
        var = sq / static_cast<double>(m);
        double unbiased = m > 1 ? sq / static_cast<double>(m - 1) : var;
        moving_mean[ch] = static_cast<T>(momentum * moving_mean[ch] + (1 - momentum) * mean);
        moving_var[ch] = static_cast<T>(momentum * moving_var[ch] + (1 - momentum) * unbiased);
      } else {
        mean = moving_mean[ch];
        var = moving_var[ch];
      }
      T inv_std = static_cast<T>(1.0 / std::sqrt(var + epsilon));
      T scale = gamma[ch] * inv_std, shift = beta[ch] - static_cast<T>(mean) * scale;
      mean_out[ch] = static_cast<T>(mean);
      inv_std_out[ch] = inv_std;
      for (int64_t o = 0; o < s.outer; ++o) {
        const T* __restrict row = x + (o * s.channels + ch) * s.inner;
        T* __restrict out = y + (o * s.channels + ch) * s.inner;
        for (int64_t i = 0; i < s.inner; ++i) out[i] = row[i] * scale + shift;
      }
    }
    return Status::Ok();
  };
}

template <typename T>
KernelFn BackwardKernel(AxisSplit s, bool training) {
  return [=](KernelContext& c) {
    const T* x = c.input(0).as<T>();
    const T* dy = c.input(1).as<T>();
    const T* mean = c.input(2).as<T>();
    const T* inv_std = c.input(3).as<T>();
    const T* gamma = c.input(4).as<T>();
    T* dx = c.output(0).as<T>();
    T* dgamma = c.output(1).as<T>();
    T* dbeta = c.output(2).as<T>();
    T m = static_cast<T>(s.outer * s.inner);
    for (int64_t ch = 0; ch < s.channels; ++ch) {
      T sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t o = 0; o < s.outer; ++o) {
        int64_t base = (o * s.channels + ch) * s.inner;
        #pragma omp simd reduction(+ : sum_dy, sum_dy_xhat)
        for (int64_t i = 0; i < s.inner; ++i) {
          sum_dy += dy[base + i];
          sum_dy_xhat += dy[base + i] * (x[base + i] - mean[ch]) * inv_std[ch];
        }
      }
      dgamma[ch] = sum_dy_xhat;
      dbeta[ch] = sum_dy;
      T k = gamma[ch] * inv_std[ch];
      for (int64_t o = 0; o < s.outer; ++o) {
        int64_t base = (o * s.channels + ch) * s.inner;
        if (training) {
          for (int64_t i = 0; i < s.inner; ++i) {
            T xhat = (x[base + i] - mean[ch]) * inv_std[ch];
            dx[base + i] = k / m * (m * dy[base + i] - sum_dy - xhat * sum_dy_xhat);
          }
        } else {
          for (int64_t i = 0; i < s.inner; ++i) dx[base + i] = k * dy[base + i];
        }
      }
    }
    return Status::Ok();
  };
}

// Channels are independent: a split of x's channel axis with every per-channel tensor split
// alike is right in training and inference. Any other axis splits only in inference (the
// moving statistics are per channel, read whole); in training the batch statistics span the
// whole batch, and a device's share would normalise with its own.
// Backward (x, dy, mean, inv_std, gamma -> dx, dgamma, dbeta): the channel split as forward; in
// inference dx = gamma * inv_std * dy is local, so other axes split with dgamma/dbeta partial;
// every output is linear in dy (training too: the sums are over dy), so B..,P,B.. -> P,P,P.
StatusOr<std::vector<SbpSignature>> BatchNormSbp(const SbpContext& ctx, bool backward) {
  const Shape& x = ctx.inputs[0].shape;
  AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", 1), x.size(), "axis"));
  const bool training = ctx.attrs.GetBoolOr("training", false);
  const Sbp B = Sbp::Broadcast(), P = Sbp::PartialSum();
  std::vector<SbpSignature> out;
  if (CanSplit(x[axis], ctx.parts)) {
    SbpSignature channel = UniformSignature(5, 3, Sbp::Split(0));
    channel.inputs[0] = channel.outputs[0] = Sbp::Split(axis);
    if (backward) channel.inputs[1] = Sbp::Split(axis);
    out.push_back(channel);
  }
  for (int64_t i = 0; !training && i < static_cast<int64_t>(x.size()); ++i) {
    if (i == axis || !CanSplit(x[i], ctx.parts)) continue;
    if (backward) out.push_back(MakeSignature({Sbp::Split(i), Sbp::Split(i), B, B, B}, {Sbp::Split(i), P, P}));
    else out.push_back(MakeSignature({Sbp::Split(i), B, B, B, B}, {Sbp::Split(i), B, B}));
  }
  out.push_back(AllBroadcast(ctx));
  if (backward) out.push_back(MakeSignature({B, P, B, B, B}, {P, P, P}));
  return out;
}

}  // namespace

void RegisterBatchNormOps(OpRegistry& registry) {
  OpDef def;
  def.type = "batch_normalization";
  def.input_names = {"x", "gamma", "beta", "moving_mean", "moving_variance"};
  def.output_names = {"out", "mean", "inv_std"};
  def.mutable_inputs = {3, 4};
  def.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(AxisSplit s, ReadBatchNorm(ctx.inputs, ctx.attrs, 1));
    TensorDesc stats{{s.channels}, ctx.inputs[0].dtype};
    ctx.outputs = {ctx.inputs[0], stats, stats};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(AxisSplit s, ReadBatchNorm(init.inputs, init.attrs, 1));
    bool training = init.attrs.GetBoolOr("training", false);
    double epsilon = init.attrs.GetFloatOr("epsilon", 1e-5), momentum = init.attrs.GetFloatOr("momentum", 0.99);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return ForwardKernel<T>(s, training, epsilon, momentum);
    });
  };
  def.grad = [](GradBuilder& g) -> Status {
    if (g.output_grad(0).empty()) return Status::Ok();
    AF_ASSIGN_OR_RETURN(std::vector<std::string> d,
                        g.AddOp("batch_normalization_grad", {g.input(0), g.output_grad(0), g.output(1), g.output(2), g.input(1)},
                                g.attrs()));
    for (int i = 0; i < 3; ++i)
      if (g.needs_input_grad(i)) g.SetInputGrad(i, d[i]);
    return Status::Ok();
  };
  def.sbp = [](const SbpContext& ctx) { return BatchNormSbp(ctx, false); };
  def.doc = "out = (x - mean) * gamma / sqrt(var + epsilon) + beta over channel attr axis; training uses batch stats and updates moving stats";
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = "batch_normalization_grad";
  grad.input_names = {"x", "dy", "mean", "inv_std", "gamma"};
  grad.output_names = {"dx", "dgamma", "dbeta"};
  grad.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(AxisSplit s, ReadBatchNorm(ctx.inputs, ctx.attrs, 2));
    if (ctx.inputs[1] != ctx.inputs[0]) return InvalidArgument("dy must match x " + ctx.inputs[0].ToString());
    TensorDesc stats{{s.channels}, ctx.inputs[0].dtype};
    ctx.outputs = {ctx.inputs[0], stats, stats};
    return Status::Ok();
  };
  grad.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(AxisSplit s, ReadBatchNorm(init.inputs, init.attrs, 2));
    bool training = init.attrs.GetBoolOr("training", false);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> { return BackwardKernel<T>(s, training); });
  };
  grad.doc = "dx, dgamma(C), dbeta(C) of batch_normalization (same attrs)";
  grad.sbp = [](const SbpContext& ctx) { return BatchNormSbp(ctx, true); };
  registry.Register(std::move(grad));
}

}  // namespace actorflow

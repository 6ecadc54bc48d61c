// softmax and log_softmax over any axis (attr `axis`, default -1); sparse softmax cross-entropy (per-sample loss,
// as OneFlow's sparse_softmax_cross_entropy_with_logits). Shape letters: N rows, C classes.
#include <cmath>

#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

// labels (N,) int32/int64 and float logits (N,C): the inputs of both sparse cross-entropy ops.
Status CheckLabelsAndLogits(const TensorDesc& labels, const TensorDesc& logits) {
  AF_RETURN_IF_ERROR(ExpectFloat(logits, "logits"));
  AF_RETURN_IF_ERROR(ExpectRank(logits, 2, "logits"));
  if (labels.dtype != DType::kInt32 && labels.dtype != DType::kInt64)
    return InvalidArgument(std::string("labels must be int32 or int64, got ") + DTypeName(labels.dtype));
  if (labels.shape != Shape{logits.shape[0]})
    return InvalidArgument("labels must have shape (" + std::to_string(logits.shape[0]) + ",) to match logits " +
                           ShapeToString(logits.shape) + ", got " + ShapeToString(labels.shape));
  return Status::Ok();
}

// Row i's label (int64 or int32 labels).
inline int64_t LabelAt(const KernelContext& c, bool labels64, int64_t i) {
  return labels64 ? c.input(0).as<int64_t>()[i] : c.input(0).as<int32_t>()[i];
}

Status LabelOutOfRange(int64_t label, int64_t i, int64_t classes) {
  return InvalidArgument("label " + std::to_string(label) + " at position " + std::to_string(i) +
                         " is out of range [0, " + std::to_string(classes) + ")");
}

// exp(row - max(row)) into p; returns the row's maximum and the sum of p. Both cross-entropy ops
// use it, so the fused op computes the same floats as the forward op.
template <typename T>
std::pair<T, T> ShiftedExp(const T* row, T* p, int64_t classes) {
  T mx = row[0];
  for (int64_t j = 1; j < classes; ++j) mx = std::max(mx, row[j]);
  T sum = 0;
  for (int64_t j = 0; j < classes; ++j) { p[j] = std::exp(row[j] - mx); sum += p[j]; }
  return {mx, sum};
}

// Sparse softmax cross-entropy: labels (N,) int32/int64, logits (N,C) -> loss (N,), prob (N,C).
// prob is kept for the backward op: dlogits = (prob - onehot(labels)) * dloss.
void RegisterSparseCrossEntropy(OpRegistry& registry) {
  OpDef def;
  def.type = "sparse_softmax_cross_entropy";
  def.input_names = {"labels", "logits"};
  def.output_names = {"loss", "prob"};
  def.infer = [](InferContext& ctx) -> Status {
    const TensorDesc& logits = ctx.inputs[1];
    AF_RETURN_IF_ERROR(CheckLabelsAndLogits(ctx.inputs[0], logits));
    ctx.outputs = {TensorDesc{{logits.shape[0]}, logits.dtype}, logits};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[1].shape[0], classes = init.inputs[1].shape[1];
    bool labels64 = init.inputs[0].dtype == DType::kInt64;
    return DispatchFloat(init.inputs[1].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        const T* logits = c.input(1).as<T>();
        T* loss = c.output(0).as<T>();
        T* prob = c.output(1).as<T>();
        for (int64_t i = 0; i < n; ++i) {
          int64_t label = LabelAt(c, labels64, i);
          if (label < 0 || label >= classes) return LabelOutOfRange(label, i, classes);
          const T* row = logits + i * classes;
          T* p = prob + i * classes;
          auto [mx, sum] = ShiftedExp(row, p, classes);
          T inv = T(1) / sum;
          for (int64_t j = 0; j < classes; ++j) p[j] *= inv;
          loss[i] = -(row[label] - mx - std::log(sum));
        }
        return Status::Ok();
      });
    });
  };
  def.grad = [](GradBuilder& g) -> Status {
    if (!g.output_grad(1).empty())
      return Unimplemented("a gradient through sparse_softmax_cross_entropy's prob output is not supported; use softmax");
    if (!g.needs_input_grad(1) || g.output_grad(0).empty()) return Status::Ok();
    AF_ASSIGN_OR_RETURN(std::string d, g.AddOp1("sparse_softmax_cross_entropy_grad", {g.input(0), g.output(1), g.output_grad(0)}));
    g.SetInputGrad(1, d);
    return Status::Ok();
  };
  // Samples are independent: split the batch. A class split would need the row maximum and sum
  // across devices, which one kernel per device cannot give. The loss is per sample, so no
  // attribute names the batch size.
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    if (CanSplit(ctx.inputs[1].shape[0], ctx.parts)) out.push_back(UniformSignature(2, 2, Sbp::Split(0)));
    return out;
  };
  def.doc = "loss(N) = -log softmax(logits(N,C))[labels(N)]; prob(N,C) = softmax(logits)";
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = "sparse_softmax_cross_entropy_grad";
  grad.input_names = {"labels", "prob", "dloss"};
  grad.output_names = {"dlogits"};
  grad.infer = [](InferContext& ctx) -> Status {
    ctx.outputs = {ctx.inputs[1]};
    return Status::Ok();
  };
  grad.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[1].shape[0], classes = init.inputs[1].shape[1];
    bool labels64 = init.inputs[0].dtype == DType::kInt64;
    return DispatchFloat(init.inputs[1].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        const T* prob = c.input(1).as<T>();
        const T* dloss = c.input(2).as<T>();
        T* d = c.output(0).as<T>();
        for (int64_t i = 0; i < n; ++i) {
          int64_t label = LabelAt(c, labels64, i);
          T s = dloss[i];
          for (int64_t j = 0; j < classes; ++j) d[i * classes + j] = prob[i * classes + j] * s;
          d[i * classes + label] -= s;
        }
        return Status::Ok();
      });
    });
  };
  grad.doc = "dlogits(N,C) = (prob - onehot(labels)) * dloss(N)";
  // Per sample, and linear in dloss: (prob - onehot) * dloss.
  grad.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    if (CanSplit(ctx.inputs[1].shape[0], ctx.parts)) out.push_back(UniformSignature(3, 1, Sbp::Split(0)));
    out.push_back(MakeSignature({Sbp::Broadcast(), Sbp::Broadcast(), Sbp::PartialSum()}, {Sbp::PartialSum()}));
    return out;
  };
  registry.Register(std::move(grad));

  // sparse_softmax_cross_entropy_with_grad: the forward op and its gradient in one pass over the
  // logits (graph/softmax_fusion.cc, "softmax_cross_entropy_grad"): loss as the forward op,
  // dlogits as the gradient op from the same floats (prob is never written out), one actor less.
  // dloss must not depend on loss (the autodiff seed is a constant).
  OpDef fused;
  fused.type = "sparse_softmax_cross_entropy_with_grad";
  fused.input_names = {"labels", "logits", "dloss"};
  fused.output_names = {"loss", "dlogits"};
  fused.infer = [](InferContext& ctx) -> Status {
    const TensorDesc &logits = ctx.inputs[1], &dloss = ctx.inputs[2];
    AF_RETURN_IF_ERROR(CheckLabelsAndLogits(ctx.inputs[0], logits));
    const TensorDesc loss{{logits.shape[0]}, logits.dtype};
    if (dloss != loss) return InvalidArgument("dloss must be " + loss.ToString() + " like the loss, got " + dloss.ToString());
    ctx.outputs = {loss, logits};
    return Status::Ok();
  };
  fused.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[1].shape[0], classes = init.inputs[1].shape[1];
    bool labels64 = init.inputs[0].dtype == DType::kInt64;
    return DispatchFloat(init.inputs[1].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        const T* logits = c.input(1).as<T>();
        const T* dloss = c.input(2).as<T>();
        T* loss = c.output(0).as<T>();
        T* d = c.output(1).as<T>();
        for (int64_t i = 0; i < n; ++i) {
          int64_t label = LabelAt(c, labels64, i);
          if (label < 0 || label >= classes) return LabelOutOfRange(label, i, classes);
          // The two ops' expressions in their order: the same floats.
          const T* row = logits + i * classes;
          T* p = d + i * classes;
          auto [mx, sum] = ShiftedExp(row, p, classes);
          T inv = T(1) / sum;
          const T s = dloss[i];
          for (int64_t j = 0; j < classes; ++j) p[j] = (p[j] * inv) * s;
          p[label] -= s;
          loss[i] = -(row[label] - mx - std::log(sum));
        }
        return Status::Ok();
      });
    });
  };
  fused.doc = "loss(N) = -log softmax(logits(N,C))[labels(N)]; dlogits(N,C) = (softmax(logits) - onehot(labels)) * dloss(N)";
  // Per sample: split the batch.
  fused.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    if (CanSplit(ctx.inputs[1].shape[0], ctx.parts)) out.push_back(UniformSignature(3, 2, Sbp::Split(0)));
    return out;
  };
  registry.Register(std::move(fused));
}

void RegisterSoftmax(OpRegistry& registry, bool log) {
  OpDef def;
  def.type = log ? "log_softmax" : "softmax";
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
    if (ctx.inputs[0].shape.empty()) return InvalidArgument("x must have rank >= 1");
    AF_RETURN_IF_ERROR(NormalizeAxis(ctx.attrs.GetIntOr("axis", -1), ctx.inputs[0].shape.size(), "axis").status());
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [log](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(init.attrs.GetIntOr("axis", -1), init.inputs[0].shape.size(), "axis"));
    const AxisSplit s = SplitAt(init.inputs[0].shape, axis);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        const T* x = c.input(0).as<T>();
        T* y = c.output(0).as<T>();
        // One softmax per (outer, inner) position over `channels` values `inner` apart.
        for (int64_t o = 0; o < s.outer; ++o)
          for (int64_t in = 0; in < s.inner; ++in) {
            const T* r = x + o * s.channels * s.inner + in;
            T* out = y + o * s.channels * s.inner + in;
            const int64_t step = s.inner;
            T mx = r[0];
            for (int64_t j = 1; j < s.channels; ++j) mx = std::max(mx, r[j * step]);
            T sum = 0;
            for (int64_t j = 0; j < s.channels; ++j) sum += std::exp(r[j * step] - mx);
            if (log) {
              T ls = std::log(sum);
              for (int64_t j = 0; j < s.channels; ++j) out[j * step] = r[j * step] - mx - ls;
            } else {
              T inv = T(1) / sum;
              for (int64_t j = 0; j < s.channels; ++j) out[j * step] = std::exp(r[j * step] - mx) * inv;
            }
          }
        return Status::Ok();
      });
    });
  };
  def.grad = [log](GradBuilder& g) -> Status {
    // softmax: dx = y * (dy - sum(dy*y)); log_softmax: dx = dy - exp(y) * sum(dy).
    std::string y = g.output(0), dy = g.output_grad(0);
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(g.attrs().GetIntOr("axis", -1), g.input_desc(0).shape.size(), "axis"));
    Attrs keep{{"axis", std::vector<int64_t>{axis}}, {"keepdims", true}};
    if (log) {
      AF_ASSIGN_OR_RETURN(std::string s, g.AddOp1("reduce_sum", {dy}, keep));
      AF_ASSIGN_OR_RETURN(std::string p, g.AddOp1("exp", {y}));
      AF_ASSIGN_OR_RETURN(std::string t, g.AddOp1("mul", {p, s}));
      AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("sub", {dy, t}));
      g.SetInputGrad(0, dx);
    } else {
      AF_ASSIGN_OR_RETURN(std::string dyy, g.AddOp1("mul", {dy, y}));
      AF_ASSIGN_OR_RETURN(std::string s, g.AddOp1("reduce_sum", {dyy}, keep));
      AF_ASSIGN_OR_RETURN(std::string t, g.AddOp1("sub", {dy, s}));
      AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("mul", {y, t}));
      g.SetInputGrad(0, dx);
    }
    return Status::Ok();
  };
  def.doc = std::string(log ? "log_softmax" : "softmax") + " over attr `axis` (default -1, the last)";
  // Each softmax runs along `axis`: any other axis splits.
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const Shape& x = ctx.inputs[0].shape;
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", -1), x.size(), "axis"));
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i)
      if (i != axis && CanSplit(x[i], ctx.parts)) out.push_back(UniformSignature(1, 1, Sbp::Split(i)));
    return out;
  };
  registry.Register(std::move(def));
}

}  // namespace

void RegisterSoftmaxOps(OpRegistry& registry) {
  RegisterSparseCrossEntropy(registry);
  RegisterSoftmax(registry, false);
  RegisterSoftmax(registry, true);
}

}  // namespace actorflow

// argmax (attr axis, default -1; int64 indices, first maximum wins), one_hot (indices int32/
// int64 of any shape -> shape + (depth,); attrs depth, on_value, off_value, dtype), cast
// (attr dtype string), and gather_flat / gather_flat_grad (elements of x by flat index: the
// eager front end's integer-array and boolean-mask indexing). cast (between float dtypes) and
// gather_flat are differentiable.
#include <algorithm>

#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

template <typename T>
KernelFn ArgmaxKernel(AxisSplit s) {
  return [s](KernelContext& c) {
    const T* x = c.input(0).as<T>();
    int64_t* out = c.output(0).as<int64_t>();
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t i = 0; i < s.inner; ++i) {
        const T* base = x + o * s.channels * s.inner + i;
        int64_t best = 0;
        T best_value = base[0];
        for (int64_t ch = 1; ch < s.channels; ++ch)
          if (NanBeats(base[ch * s.inner], best_value)) {
            best_value = base[ch * s.inner];
            best = ch;
          }
        out[o * s.inner + i] = best;
      }
    return Status::Ok();
  };
}

void RegisterArgmax(OpRegistry& registry) {
  OpDef def;
  def.type = "argmax";
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    const Shape& s = ctx.inputs[0].shape;
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", -1), s.size(), "axis"));
    if (s[axis] == 0) return InvalidArgument("argmax over an empty axis of x " + ShapeToString(s));
    Shape out;
    for (size_t d = 0; d < s.size(); ++d)
      if (static_cast<int64_t>(d) != axis) out.push_back(s[d]);
    ctx.outputs = {TensorDesc{out, DType::kInt64}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    const TensorDesc& x = init.inputs[0];
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(init.attrs.GetIntOr("axis", -1), x.shape.size(), "axis"));
    AxisSplit s = SplitAt(x.shape, axis);
    switch (x.dtype) {
      case DType::kFloat32: return ArgmaxKernel<float>(s);
      case DType::kFloat64: return ArgmaxKernel<double>(s);
      case DType::kInt32: return ArgmaxKernel<int32_t>(s);
      case DType::kInt64: return ArgmaxKernel<int64_t>(s);
      default: return InvalidArgument(std::string("argmax: unsupported dtype ") + DTypeName(x.dtype));
    }
  };
  // Any axis but the searched one splits (renumbered: out drops `axis`).
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const Shape& x = ctx.inputs[0].shape;
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", -1), x.size(), "axis"));
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i)
      if (i != axis && CanSplit(x[i], ctx.parts)) out.push_back(MakeSignature({Sbp::Split(i)}, {Sbp::Split(i < axis ? i : i - 1)}));
    return out;
  };
  def.doc = "out(int64) = index of the first maximum of x along attr axis (default -1); a NaN is the maximum, as in NumPy";
  registry.Register(std::move(def));
}

template <typename I, typename T>
KernelFn OneHotKernel(int64_t n, int64_t depth, double on, double off) {
  return [=](KernelContext& c) {
    const I* idx = c.input(0).as<I>();
    T* __restrict y = c.output(0).as<T>();
    for (int64_t i = 0; i < n * depth; ++i) y[i] = static_cast<T>(off);
    for (int64_t i = 0; i < n; ++i) {
      int64_t k = static_cast<int64_t>(idx[i]);
      if (k < 0 || k >= depth)
        return InvalidArgument("one_hot: index " + std::to_string(k) + " at position " + std::to_string(i) +
                               " is out of range [0, " + std::to_string(depth) + ")");
      y[i * depth + k] = static_cast<T>(on);
    }
    return Status::Ok();
  };
}

template <typename I>
StatusOr<KernelFn> OneHotFor(DType out, int64_t n, int64_t depth, double on, double off) {
  switch (out) {
    case DType::kFloat32: return OneHotKernel<I, float>(n, depth, on, off);
    case DType::kFloat64: return OneHotKernel<I, double>(n, depth, on, off);
    case DType::kInt32: return OneHotKernel<I, int32_t>(n, depth, on, off);
    case DType::kInt64: return OneHotKernel<I, int64_t>(n, depth, on, off);
    default: return InvalidArgument(std::string("one_hot: unsupported output dtype ") + DTypeName(out));
  }
}

void RegisterOneHot(OpRegistry& registry) {
  OpDef def;
  def.type = "one_hot";
  def.input_names = {"indices"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    const TensorDesc& idx = ctx.inputs[0];
    if (idx.dtype != DType::kInt32 && idx.dtype != DType::kInt64)
      return InvalidArgument(std::string("indices must be int32 or int64, got ") + DTypeName(idx.dtype));
    AF_ASSIGN_OR_RETURN(int64_t depth, ctx.attrs.GetInt("depth"));
    if (depth <= 0) return InvalidArgument("depth must be positive, got " + std::to_string(depth));
    AF_ASSIGN_OR_RETURN(DType dtype, ParseDType(ctx.attrs.GetStringOr("dtype", "float32")));
    Shape out = idx.shape;
    out.push_back(depth);
    ctx.outputs = {TensorDesc{out, dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[0].num_elements(), depth = init.outputs[0].shape.back();
    double on = init.attrs.GetFloatOr("on_value", 1), off = init.attrs.GetFloatOr("off_value", 0);
    if (init.inputs[0].dtype == DType::kInt64) return OneHotFor<int64_t>(init.outputs[0].dtype, n, depth, on, off);
    return OneHotFor<int32_t>(init.outputs[0].dtype, n, depth, on, off);
  };
  // Per index; the depth axis (last of out) is never split.
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const Shape& idx = ctx.inputs[0].shape;
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    for (int64_t i = 0; i < static_cast<int64_t>(idx.size()); ++i)
      if (CanSplit(idx[i], ctx.parts)) out.push_back(UniformSignature(1, 1, Sbp::Split(i)));
    return out;
  };
  def.doc = "out(shape..., depth) = on_value at indices, off_value elsewhere; attrs depth, on_value, off_value, dtype";
  registry.Register(std::move(def));
}

template <typename From, typename To>
KernelFn CastKernel(int64_t n) {
  return [n](KernelContext& c) {
    const From* __restrict x = c.input(0).as<From>();
    To* __restrict y = c.output(0).as<To>();
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<To>(x[i]);
    return Status::Ok();
  };
}

template <typename From>
StatusOr<KernelFn> CastFrom(DType to, int64_t n) {
  switch (to) {
    case DType::kFloat32: return CastKernel<From, float>(n);
    case DType::kFloat64: return CastKernel<From, double>(n);
    case DType::kInt8: return CastKernel<From, int8_t>(n);
    case DType::kInt32: return CastKernel<From, int32_t>(n);
    case DType::kInt64: return CastKernel<From, int64_t>(n);
    case DType::kUInt8: return CastKernel<From, uint8_t>(n);
    default: return InvalidArgument("cast: invalid target dtype");
  }
}

void RegisterCast(OpRegistry& registry) {
  OpDef def;
  def.type = "cast";
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(std::string name, ctx.attrs.GetString("dtype"));
    AF_ASSIGN_OR_RETURN(DType dtype, ParseDType(name));
    ctx.outputs = {TensorDesc{ctx.inputs[0].shape, dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[0].num_elements();
    DType to = init.outputs[0].dtype;
    switch (init.inputs[0].dtype) {
      case DType::kFloat32: return CastFrom<float>(to, n);
      case DType::kFloat64: return CastFrom<double>(to, n);
      case DType::kInt8: return CastFrom<int8_t>(to, n);
      case DType::kInt32: return CastFrom<int32_t>(to, n);
      case DType::kInt64: return CastFrom<int64_t>(to, n);
      case DType::kUInt8: return CastFrom<uint8_t>(to, n);
      default: return InvalidArgument("cast: invalid source dtype");
    }
  };
  def.grad = [](GradBuilder& g) -> Status {
    DType from = g.input_desc(0).dtype, to = g.output_desc(0).dtype;
    bool float_pair = (from == DType::kFloat32 || from == DType::kFloat64) && (to == DType::kFloat32 || to == DType::kFloat64);
    if (!float_pair) return Status::Ok();  // integer casts stop the gradient
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("cast", {g.output_grad(0)}, Attrs{{"dtype", std::string(DTypeName(from))}}));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  // Partial sums stay partial sums only into a float dtype (into an integer one each part
  // would be truncated before the sum).
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const DType to = ctx.outputs[0].dtype;
    return ElementwiseSbp(ctx, to == DType::kFloat32 || to == DType::kFloat64);
  };
  def.doc = "out = x converted to attr dtype (float32, float64, int8, int32, int64, uint8)";
  registry.Register(std::move(def));
}

// out[i...] = x.flat[indices[i...]]: x of any shape and dtype, indices int64 of any shape
// (the output's). An index outside [0, x's element count) fails the call naming it.
template <typename T>
KernelFn GatherFlatKernel(int64_t count, int64_t bound) {
  return [count, bound](KernelContext& c) {
    const T* __restrict x = c.input(0).as<T>();
    const int64_t* indices = c.input(1).as<int64_t>();
    T* __restrict out = c.output(0).as<T>();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t k = indices[i];
      if (k < 0 || k >= bound)
        return InvalidArgument("gather_flat: index " + std::to_string(k) + " at position " + std::to_string(i) +
                               " is out of range [0, " + std::to_string(bound) + ")");
      out[i] = x[k];
    }
    return Status::Ok();
  };
}

// dx = zeros like x, then dx.flat[indices[i]] += dy[i] (repeated indices add up).
template <typename T>
KernelFn GatherFlatGradKernel(int64_t count, int64_t bound) {
  return [count, bound](KernelContext& c) {
    const T* __restrict dy = c.input(0).as<T>();
    const int64_t* indices = c.input(1).as<int64_t>();
    T* __restrict dx = c.output(0).as<T>();
    std::fill(dx, dx + bound, T(0));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t k = indices[i];
      if (k < 0 || k >= bound)
        return InvalidArgument("gather_flat_grad: index " + std::to_string(k) + " at position " + std::to_string(i) +
                               " is out of range [0, " + std::to_string(bound) + ")");
      dx[k] += dy[i];
    }
    return Status::Ok();
  };
}

Status CheckFlatIndices(const TensorDesc& indices) {
  if (indices.dtype != DType::kInt64) return InvalidArgument(std::string("indices must be int64, got ") + DTypeName(indices.dtype));
  return Status::Ok();
}

void RegisterGatherFlat(OpRegistry& registry) {
  OpDef def;
  def.type = "gather_flat";
  def.input_names = {"x", "indices"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(CheckFlatIndices(ctx.inputs[1]));
    ctx.outputs = {TensorDesc{ctx.inputs[1].shape, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    const int64_t count = init.inputs[1].num_elements(), bound = init.inputs[0].num_elements();
    switch (init.inputs[0].dtype) {
      case DType::kFloat32: return GatherFlatKernel<float>(count, bound);
      case DType::kFloat64: return GatherFlatKernel<double>(count, bound);
      case DType::kInt8: return GatherFlatKernel<int8_t>(count, bound);
      case DType::kInt32: return GatherFlatKernel<int32_t>(count, bound);
      case DType::kInt64: return GatherFlatKernel<int64_t>(count, bound);
      case DType::kUInt8: return GatherFlatKernel<uint8_t>(count, bound);
      default: return InvalidArgument(std::string("gather_flat: unsupported dtype ") + DTypeName(init.inputs[0].dtype));
    }
  };
  def.grad = [](GradBuilder& g) -> Status {
    if (g.output_grad(0).empty() || !g.needs_input_grad(0)) return Status::Ok();
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("gather_flat_grad", {g.output_grad(0), g.input(1), g.input(0)}));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  // Any element may be read: x whole; linear in x, so a partial x gives a partial out.
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    if (ctx.inputs[0].dtype == DType::kFloat32 || ctx.inputs[0].dtype == DType::kFloat64)
      out.push_back(MakeSignature({Sbp::PartialSum(), Sbp::Broadcast()}, {Sbp::PartialSum()}));
    return out;
  };
  def.doc = "out(shape of indices) = x.flat[indices] (indices int64, each in [0, x's element count))";
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = "gather_flat_grad";
  grad.input_names = {"dy", "indices", "like"};
  grad.output_names = {"dx"};
  grad.infer = [](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(CheckFlatIndices(ctx.inputs[1]));
    if (ctx.inputs[0].shape != ctx.inputs[1].shape || ctx.inputs[0].dtype != ctx.inputs[2].dtype)
      return InvalidArgument("dy " + ctx.inputs[0].ToString() + " must have the shape of indices " + ctx.inputs[1].ToString() +
                             " and the dtype of like " + ctx.inputs[2].ToString());
    ctx.outputs = {ctx.inputs[2]};
    return Status::Ok();
  };
  grad.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    const int64_t count = init.inputs[1].num_elements(), bound = init.inputs[2].num_elements();
    switch (init.inputs[0].dtype) {
      case DType::kFloat32: return GatherFlatGradKernel<float>(count, bound);
      case DType::kFloat64: return GatherFlatGradKernel<double>(count, bound);
      default: return InvalidArgument(std::string("gather_flat_grad: unsupported dtype ") + DTypeName(init.inputs[0].dtype));
    }
  };
  grad.grad = [](GradBuilder& g) -> Status {  // linear in dy: its gradient reads the same positions
    if (g.output_grad(0).empty() || !g.needs_input_grad(0)) return Status::Ok();
    AF_ASSIGN_OR_RETURN(std::string ddy, g.AddOp1("gather_flat", {g.output_grad(0), g.input(1)}));
    g.SetInputGrad(0, ddy);
    return Status::Ok();
  };
  // Linear in dy: a partial dy gives a partial dx.
  grad.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    return std::vector<SbpSignature>{AllBroadcast(ctx),
                                     MakeSignature({Sbp::PartialSum(), Sbp::Broadcast(), Sbp::Broadcast()}, {Sbp::PartialSum()})};
  };
  grad.doc = "dx(like's shape) = zeros, then dx.flat[indices[i]] += dy[i] (the gradient of gather_flat)";
  registry.Register(std::move(grad));
}

}  // namespace

void RegisterIndexOps(OpRegistry& registry) {
  RegisterArgmax(registry);
  RegisterOneHot(registry);
  RegisterCast(registry);
  RegisterGatherFlat(registry);
}

}  // namespace actorflow

// argmax (attr axis, default -1; int64 indices, first maximum wins), one_hot (indices int32/
// int64 of any shape -> shape + (depth,); attrs depth, on_value, off_value, dtype) and cast
// (attr dtype string). Only cast is differentiable (between float dtypes).
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
    std::vector<SbpSignature> out;
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i)
      if (i != axis && CanSplit(x[i], ctx.parts)) out.push_back(MakeSignature({Sbp::Split(i)}, {Sbp::Split(i < axis ? i : i - 1)}));
    out.push_back(AllBroadcast(ctx));
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
    std::vector<SbpSignature> out;
    for (int64_t i = 0; i < static_cast<int64_t>(idx.size()); ++i)
      if (CanSplit(idx[i], ctx.parts)) out.push_back(UniformSignature(1, 1, Sbp::Split(i)));
    out.push_back(AllBroadcast(ctx));
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

}  // namespace

void RegisterIndexOps(OpRegistry& registry) {
  RegisterArgmax(registry);
  RegisterOneHot(registry);
  RegisterCast(registry);
}

}  // namespace actorflow

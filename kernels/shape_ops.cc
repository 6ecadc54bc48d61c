// Layout ops: reshape (attr shape, one -1), flatten (start_dim, end_dim), identity, transpose
// (perm), concat (axis, variadic), slice (begin/end/stride lists, Python-style clamping) and
// slice_grad (scatters dy into zeros of x's shape). Copies walk strided loops (broadcast.h).
#include <cstring>

#include "kernels/broadcast.h"
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

KernelFn CopyKernel(size_t bytes) {
  return [bytes](KernelContext& c) {
    if (c.output(0).data != c.input(0).data) std::memcpy(c.output(0).data, c.input(0).data, bytes);
    return Status::Ok();
  };
}

// out[start + j] = x[oa + j * sa] over `loop` (a = source strides, b = contiguous destination).
template <typename T>
KernelFn GatherKernel(StridedLoop loop, int64_t base) {
  return [loop, base](KernelContext& c) {
    const T* x = c.input(0).as<T>() + base;
    T* __restrict z = c.output(0).as<T>();
    RunLoop(loop, [&](int64_t oa, int64_t, int64_t start, int64_t len, int64_t sa, int64_t) {
      if (sa == 1) std::memcpy(z + start, x + oa, static_cast<size_t>(len) * sizeof(T));
      else for (int64_t j = 0; j < len; ++j) z[start + j] = x[oa + j * sa];
    });
    return Status::Ok();
  };
}

// A kernel over any dtype by element size (layout ops never look at values).
template <template <typename> class Make, typename... Args>
StatusOr<KernelFn> BySize(DType dtype, Args&&... args) {
  switch (DTypeSize(dtype)) {
    case 1: return Make<uint8_t>()(args...);
    case 4: return Make<uint32_t>()(args...);
    case 8: return Make<uint64_t>()(args...);
    default: return InvalidArgument(std::string("unsupported dtype ") + DTypeName(dtype));
  }
}
template <typename T>
struct MakeGather {
  KernelFn operator()(StridedLoop loop, int64_t base) { return GatherKernel<T>(loop, base); }
};

// reshape and flatten only relabel the shape: the gradient is dy reshaped back to x's shape.
Status GradReshapeBack(GradBuilder& g) {
  const Shape& s = g.input_desc(0).shape;
  AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("reshape", {g.output_grad(0)}, Attrs{{"shape", std::vector<int64_t>(s.begin(), s.end())}}));
  g.SetInputGrad(0, dx);
  return Status::Ok();
}

// A relabelling of the shape keeps a split where ReshapedAxis finds the same run of memory;
// it is linear (P->P).
StatusOr<std::vector<SbpSignature>> ReshapeSbp(const SbpContext& ctx) {
  const Shape &in = ctx.inputs[0].shape, &out_shape = ctx.outputs[0].shape;
  std::vector<SbpSignature> out;
  for (int64_t i = 0; i < static_cast<int64_t>(in.size()); ++i) {
    if (!CanSplit(in[i], ctx.parts)) continue;
    const int64_t j = ReshapedAxis(in, out_shape, i);
    if (j >= 0) out.push_back(MakeSignature({Sbp::Split(i)}, {Sbp::Split(j)}));
  }
  out.push_back(AllBroadcast(ctx));
  out.push_back(UniformSignature(1, 1, Sbp::PartialSum()));
  return out;
}

void RegisterReshape(OpRegistry& registry) {
  OpDef def;
  def.type = "reshape";
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ctx.attrs.GetInts("shape"));
    int64_t known = 1, unknown = -1, total = ctx.inputs[0].num_elements();
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == -1) {
        if (unknown >= 0) return InvalidArgument("shape " + ShapeToString(shape) + " has more than one -1");
        unknown = static_cast<int64_t>(i);
      } else if (shape[i] < 0) {
        return InvalidArgument("shape " + ShapeToString(shape) + " has a negative dimension");
      } else {
        known *= shape[i];
      }
    }
    if (unknown >= 0) {
      if (known == 0 || total % known != 0)
        return InvalidArgument("cannot reshape " + ShapeToString(ctx.inputs[0].shape) + " to " + ShapeToString(shape));
      shape[unknown] = total / known;
    }
    if (NumElements(shape) != total)
      return InvalidArgument("cannot reshape " + ShapeToString(ctx.inputs[0].shape) + " (" + std::to_string(total) +
                             " elements) to " + ShapeToString(shape) + " (" + std::to_string(NumElements(shape)) + " elements)");
    ctx.outputs = {TensorDesc{shape, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> { return CopyKernel(init.inputs[0].byte_size()); };
  def.grad = GradReshapeBack;
  def.sbp = ReshapeSbp;
  // The target shape is logical: a device's share reshapes to its physical output shape.
  def.physical_attrs = [](const PhysicalContext& ctx) -> StatusOr<Attrs> {
    Attrs attrs = ctx.attrs;
    const Shape& shape = ctx.physical_outputs[0].shape;
    attrs.Set("shape", std::vector<int64_t>(shape.begin(), shape.end()));
    return attrs;
  };
  def.doc = "out = x with attr `shape` (one -1 allowed)";
  registry.Register(std::move(def));
}

void RegisterFlattenIdentity(OpRegistry& registry) {
  OpDef def;
  def.type = "flatten";
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    const Shape& s = ctx.inputs[0].shape;
    if (s.empty()) {
      ctx.outputs = {TensorDesc{{1}, ctx.inputs[0].dtype}};
      return Status::Ok();
    }
    AF_ASSIGN_OR_RETURN(int64_t start, NormalizeAxis(ctx.attrs.GetIntOr("start_dim", 0), s.size(), "start_dim"));
    AF_ASSIGN_OR_RETURN(int64_t end, NormalizeAxis(ctx.attrs.GetIntOr("end_dim", -1), s.size(), "end_dim"));
    if (start > end)
      return InvalidArgument("start_dim " + std::to_string(start) + " must not come after end_dim " + std::to_string(end));
    Shape out(s.begin(), s.begin() + start);
    int64_t merged = 1;
    for (int64_t d = start; d <= end; ++d) merged *= s[d];
    out.push_back(merged);
    out.insert(out.end(), s.begin() + end + 1, s.end());
    ctx.outputs = {TensorDesc{out, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> { return CopyKernel(init.inputs[0].byte_size()); };
  def.grad = GradReshapeBack;
  def.sbp = ReshapeSbp;  // merged axes split only where the merge keeps the split's memory runs
  def.doc = "out = x with dims start_dim..end_dim (defaults 0, -1) merged";
  registry.Register(std::move(def));

  OpDef id;
  id.type = "identity";
  id.input_names = {"x"};
  id.output_names = {"out"};
  id.infer = [](InferContext& ctx) -> Status {
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  id.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> { return CopyKernel(init.inputs[0].byte_size()); };
  id.grad = [](GradBuilder& g) -> Status {
    g.SetInputGrad(0, g.output_grad(0));
    return Status::Ok();
  };
  id.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return ElementwiseSbp(ctx, true); };
  id.doc = "out = x";
  registry.Register(std::move(id));
}

StatusOr<std::vector<int64_t>> ReadPerm(const Attrs& attrs, size_t rank) {
  AF_ASSIGN_OR_RETURN(std::vector<int64_t> perm, attrs.GetInts("perm"));
  std::vector<bool> seen(rank, false);
  bool ok = perm.size() == rank;
  for (int64_t& p : perm) {
    if (p < 0) p += static_cast<int64_t>(rank);
    if (!ok || p < 0 || p >= static_cast<int64_t>(rank) || seen[p]) ok = false;
    else seen[p] = true;
  }
  if (!ok)
    return InvalidArgument("perm " + ShapeToString(attrs.GetInts("perm").value()) + " is not a permutation of the " +
                           std::to_string(rank) + " axes of x");
  return perm;
}

void RegisterTranspose(OpRegistry& registry) {
  OpDef def;
  def.type = "transpose";
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    const Shape& s = ctx.inputs[0].shape;
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ReadPerm(ctx.attrs, s.size()));
    Shape out(s.size());
    for (size_t d = 0; d < s.size(); ++d) out[d] = s[perm[d]];
    ctx.outputs = {TensorDesc{out, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    const Shape& s = init.inputs[0].shape;
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ReadPerm(init.attrs, s.size()));
    std::vector<int64_t> in_strides = Strides(s), src(s.size());
    for (size_t d = 0; d < s.size(); ++d) src[d] = in_strides[perm[d]];
    const Shape& out = init.outputs[0].shape;
    AF_ASSIGN_OR_RETURN(StridedLoop loop, MakeLoop(out, src, Strides(out)));
    return BySize<MakeGather>(init.inputs[0].dtype, loop, int64_t{0});
  };
  def.grad = [](GradBuilder& g) -> Status {
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ReadPerm(g.attrs(), g.input_desc(0).shape.size()));
    std::vector<int64_t> inverse(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) inverse[perm[d]] = static_cast<int64_t>(d);
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("transpose", {g.output_grad(0)}, Attrs{{"perm", inverse}}));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  // Output axis i is x's axis perm[i].
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ReadPerm(ctx.attrs, ctx.inputs[0].shape.size()));
    const Shape& o = ctx.outputs[0].shape;
    std::vector<SbpSignature> out;
    for (int64_t i = 0; i < static_cast<int64_t>(o.size()); ++i)
      if (CanSplit(o[i], ctx.parts)) out.push_back(MakeSignature({Sbp::Split(perm[i])}, {Sbp::Split(i)}));
    out.push_back(AllBroadcast(ctx));
    out.push_back(UniformSignature(1, 1, Sbp::PartialSum()));
    return out;
  };
  def.doc = "out = x with axes permuted: out.shape[i] = x.shape[perm[i]]";
  registry.Register(std::move(def));
}

void RegisterConcat(OpRegistry& registry) {
  OpDef def;
  def.type = "concat";
  def.input_names = {"in"};
  def.output_names = {"out"};
  def.variadic_inputs = true;
  def.infer = [](InferContext& ctx) -> Status {
    if (ctx.inputs.empty()) return InvalidArgument("concat needs at least one input");
    const TensorDesc& first = ctx.inputs[0];
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", 0), first.shape.size(), "axis"));
    Shape out = first.shape;
    for (size_t i = 1; i < ctx.inputs.size(); ++i) {
      const TensorDesc& in = ctx.inputs[i];
      bool same = in.dtype == first.dtype && in.shape.size() == first.shape.size();
      for (size_t d = 0; same && d < in.shape.size(); ++d) same = static_cast<int64_t>(d) == axis || in.shape[d] == first.shape[d];
      if (!same)
        return InvalidArgument("concat on axis " + std::to_string(axis) + ": input " + std::to_string(i) + " is " +
                               in.ToString() + " but input 0 is " + first.ToString() +
                               "; dtypes and all other dimensions must match");
      out[axis] += in.shape[axis];
    }
    ctx.outputs = {TensorDesc{out, first.dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(init.attrs.GetIntOr("axis", 0), init.outputs[0].shape.size(), "axis"));
    // Each input contributes one contiguous chunk of chunk[i] bytes per outer index.
    std::vector<size_t> chunk;
    for (const TensorDesc& in : init.inputs) {
      AxisSplit s = SplitAt(in.shape, axis);
      chunk.push_back(static_cast<size_t>(s.channels * s.inner) * DTypeSize(in.dtype));
    }
    int64_t outer = SplitAt(init.outputs[0].shape, axis).outer;
    return KernelFn([chunk, outer](KernelContext& c) {
      char* z = static_cast<char*>(c.output(0).data);
      for (int64_t o = 0; o < outer; ++o)
        for (size_t i = 0; i < chunk.size(); ++i) {
          std::memcpy(z, static_cast<const char*>(c.input(i).data) + o * chunk[i], chunk[i]);
          z += chunk[i];
        }
      return Status::Ok();
    });
  };
  def.grad = [](GradBuilder& g) -> Status {
    const Shape& out = g.output_desc(0).shape;
    int64_t axis = NormalizeAxis(g.attrs().GetIntOr("axis", 0), out.size(), "axis").value();
    int64_t offset = 0;
    for (int i = 0; i < g.num_inputs(); ++i) {
      int64_t size = g.input_desc(i).shape[axis];
      if (g.needs_input_grad(i)) {
        std::vector<int64_t> begin(out.size(), 0), end(out.begin(), out.end());
        begin[axis] = offset;
        end[axis] = offset + size;
        AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("slice", {g.output_grad(0)}, Attrs{{"begin", begin}, {"end", end}}));
        g.SetInputGrad(i, dx);
      }
      offset += size;
    }
    return Status::Ok();
  };
  // Every input split alike on an axis other than the joined one; linear (P->P).
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const Shape& o = ctx.outputs[0].shape;
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", 0), o.size(), "axis"));
    const size_t n = ctx.inputs.size();
    std::vector<SbpSignature> out;
    for (int64_t i = 0; i < static_cast<int64_t>(o.size()); ++i)
      if (i != axis && CanSplit(o[i], ctx.parts)) out.push_back(UniformSignature(n, 1, Sbp::Split(i)));
    out.push_back(AllBroadcast(ctx));
    out.push_back(UniformSignature(n, 1, Sbp::PartialSum()));
    return out;
  };
  def.doc = "out = inputs joined along attr axis (default 0)";
  registry.Register(std::move(def));
}

// Python-style slice of every dimension: begin/end clamp to [0, dim], negatives count from the
// end, stride (default 1) must be positive. Missing lists mean the whole dimension.
struct SliceSpec {
  Shape out;
  std::vector<int64_t> begin, stride;
};

StatusOr<SliceSpec> ReadSlice(const Shape& in, const Attrs& attrs) {
  size_t rank = in.size();
  std::vector<int64_t> begin(rank, 0), end(in.begin(), in.end()), stride(rank, 1);
  auto read = [&](const char* name, std::vector<int64_t>* v) -> Status {
    if (!attrs.Has(name)) return Status::Ok();
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> got, attrs.GetInts(name));
    if (got.size() != rank)
      return InvalidArgument(std::string("attribute '") + name + "' has " + std::to_string(got.size()) +
                             " entries but x has rank " + std::to_string(rank) + " (shape " + ShapeToString(in) + ")");
    *v = got;
    return Status::Ok();
  };
  AF_RETURN_IF_ERROR(read("begin", &begin));
  AF_RETURN_IF_ERROR(read("end", &end));
  AF_RETURN_IF_ERROR(read("stride", &stride));
  SliceSpec spec;
  for (size_t d = 0; d < rank; ++d) {
    if (stride[d] <= 0) return InvalidArgument("slice stride must be positive, got " + ShapeToString(stride));
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + in[d] : v, 0, in[d]); };
    int64_t b = clamp(begin[d]), e = clamp(end[d]);
    spec.out.push_back(e > b ? (e - b + stride[d] - 1) / stride[d] : 0);
    spec.begin.push_back(b);
  }
  spec.stride = stride;
  return spec;
}

// Axes of `in` the slice takes whole (begin 0, stride 1, all of it): only those split.
StatusOr<std::vector<bool>> UnslicedAxes(const Shape& in, const Attrs& attrs) {
  AF_ASSIGN_OR_RETURN(SliceSpec spec, ReadSlice(in, attrs));
  std::vector<bool> whole(in.size());
  for (size_t d = 0; d < in.size(); ++d) whole[d] = spec.begin[d] == 0 && spec.stride[d] == 1 && spec.out[d] == in[d];
  return whole;
}

// slice (x at input 0) and slice_grad (x's shape at input 1): S(i) on every input and the
// output for an unsliced axis i, all broadcast, and partial sums through the data input.
StatusOr<std::vector<SbpSignature>> SliceSbp(const SbpContext& ctx, size_t x_input) {
  const Shape& x = ctx.inputs[x_input].shape;
  AF_ASSIGN_OR_RETURN(std::vector<bool> whole, UnslicedAxes(x, ctx.attrs));
  std::vector<SbpSignature> out;
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i)
    if (whole[i] && CanSplit(x[i], ctx.parts)) out.push_back(UniformSignature(ctx.inputs.size(), 1, Sbp::Split(i)));
  out.push_back(AllBroadcast(ctx));
  SbpSignature partial = UniformSignature(ctx.inputs.size(), 1, Sbp::Broadcast());
  partial.inputs[0] = partial.outputs[0] = Sbp::PartialSum();
  out.push_back(partial);
  return out;
}

// The bounds are logical: on a split axis a device's share takes its whole physical extent.
StatusOr<Attrs> SlicePhysicalAttrs(const PhysicalContext& ctx, size_t x_input) {
  Attrs attrs = ctx.attrs;
  const Sbp& sbp = ctx.signature.inputs[x_input];
  if (sbp.kind != SbpKind::kSplit) return attrs;
  const size_t axis = static_cast<size_t>(sbp.axis);
  for (const char* name : {"begin", "end"}) {
    if (!attrs.Has(name)) continue;
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> bound, attrs.GetInts(name));
    if (axis >= bound.size()) return InvalidArgument(std::string("slice: attribute '") + name + "' has no entry for axis " + std::to_string(axis));
    bound[axis] = std::string(name) == "begin" ? 0 : ctx.physical_inputs[x_input].shape[axis];
    attrs.Set(name, bound);
  }
  return attrs;
}

void RegisterSlice(OpRegistry& registry) {
  OpDef def;
  def.type = "slice";
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(SliceSpec spec, ReadSlice(ctx.inputs[0].shape, ctx.attrs));
    ctx.outputs = {TensorDesc{spec.out, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    const Shape& in = init.inputs[0].shape;
    AF_ASSIGN_OR_RETURN(SliceSpec spec, ReadSlice(in, init.attrs));
    std::vector<int64_t> st = Strides(in), src(in.size());
    int64_t base = 0;
    for (size_t d = 0; d < in.size(); ++d) {
      src[d] = st[d] * spec.stride[d];
      base += spec.begin[d] * st[d];
    }
    AF_ASSIGN_OR_RETURN(StridedLoop loop, MakeLoop(spec.out, src, Strides(spec.out)));
    return BySize<MakeGather>(init.inputs[0].dtype, loop, base);
  };
  def.grad = [](GradBuilder& g) -> Status {
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("slice_grad", {g.output_grad(0), g.input(0)}, g.attrs()));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  def.sbp = [](const SbpContext& ctx) { return SliceSbp(ctx, 0); };
  def.physical_attrs = [](const PhysicalContext& ctx) { return SlicePhysicalAttrs(ctx, 0); };
  def.doc = "out = x[begin:end:stride] per dimension (attrs begin, end, stride lists)";
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = "slice_grad";
  grad.input_names = {"dy", "like"};
  grad.output_names = {"dx"};
  grad.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(SliceSpec spec, ReadSlice(ctx.inputs[1].shape, ctx.attrs));
    if (spec.out != ctx.inputs[0].shape)
      return InvalidArgument("slice_grad: dy has shape " + ShapeToString(ctx.inputs[0].shape) + ", expected " +
                             ShapeToString(spec.out));
    ctx.outputs = {TensorDesc{ctx.inputs[1].shape, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  grad.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    const Shape& in = init.inputs[1].shape;
    AF_ASSIGN_OR_RETURN(SliceSpec spec, ReadSlice(in, init.attrs));
    std::vector<int64_t> st = Strides(in), dst(in.size());
    int64_t base = 0;
    for (size_t d = 0; d < in.size(); ++d) {
      dst[d] = st[d] * spec.stride[d];
      base += spec.begin[d] * st[d];
    }
    AF_ASSIGN_OR_RETURN(StridedLoop loop, MakeLoop(spec.out, dst, Strides(spec.out)));
    size_t bytes = init.outputs[0].byte_size();
    return DispatchFloat(init.outputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        const T* dy = c.input(0).as<T>();
        T* dx = c.output(0).as<T>();
        std::memset(dx, 0, bytes);
        dx += base;
        RunLoop(loop, [&](int64_t oa, int64_t, int64_t start, int64_t len, int64_t sa, int64_t) {
          for (int64_t j = 0; j < len; ++j) dx[oa + j * sa] = dy[start + j];
        });
        return Status::Ok();
      });
    });
  };
  grad.doc = "dx(like.shape) = zeros with dy scattered into the slice (same attrs as slice)";
  grad.sbp = [](const SbpContext& ctx) { return SliceSbp(ctx, 1); };
  grad.physical_attrs = [](const PhysicalContext& ctx) { return SlicePhysicalAttrs(ctx, 1); };
  registry.Register(std::move(grad));
}

}  // namespace

void RegisterShapeOps(OpRegistry& registry) {
  RegisterReshape(registry);
  RegisterFlattenIdentity(registry);
  RegisterTranspose(registry);
  RegisterConcat(registry);
  RegisterSlice(registry);
}

}  // namespace actorflow

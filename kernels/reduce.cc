// Reductions: reduce_sum / reduce_mean / reduce_max over attr `axis` (list; missing or empty =
// all axes), attr `keepdims`; reduce_sum_like (sums a broadcast gradient back to an operand's
// shape) and broadcast_like (its transpose); reduce_max_grad. All walk the input once with a
// strided loop (broadcast.h), the output index following through zero strides on reduced axes.
#include <cmath>
#include <limits>

#include "kernels/broadcast.h"
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

enum class Reduce { kSum, kMean, kMax };

// The input shape with reduced axes set to 1 ("kept" shape), or an error naming the bad axis.
StatusOr<Shape> KeptShape(const Shape& in, const Attrs& attrs) {
  std::vector<int64_t> axes;
  if (attrs.Has("axis")) { AF_ASSIGN_OR_RETURN(axes, attrs.GetInts("axis")); }
  std::vector<bool> reduce(in.size(), axes.empty());
  for (int64_t a : axes) {
    int64_t r = a < 0 ? a + static_cast<int64_t>(in.size()) : a;
    if (r < 0 || r >= static_cast<int64_t>(in.size()))
      return InvalidArgument("axis " + std::to_string(a) + " is out of range for x of shape " + ShapeToString(in));
    reduce[r] = true;
  }
  Shape keep = in;
  for (size_t i = 0; i < in.size(); ++i)
    if (reduce[i]) keep[i] = 1;
  return keep;
}

// Which axes of `in` the attributes reduce (all of them when `axis` is missing or empty).
StatusOr<std::vector<bool>> ReducedAxes(const Shape& in, const Attrs& attrs) {
  AF_ASSIGN_OR_RETURN(Shape keep, KeptShape(in, attrs));
  std::vector<int64_t> axes;
  if (attrs.Has("axis")) { AF_ASSIGN_OR_RETURN(axes, attrs.GetInts("axis")); }
  std::vector<bool> reduce(in.size(), axes.empty());
  for (int64_t a : axes) reduce[a < 0 ? a + static_cast<int64_t>(in.size()) : a] = true;
  return reduce;
}

// Reduced-axis test robust to size-1 dims: an axis of size 1 is dropped when listed (or when
// reducing everything), kept otherwise.
StatusOr<Shape> ReduceOutputShape(const Shape& in, const Attrs& attrs) {
  AF_ASSIGN_OR_RETURN(Shape keep, KeptShape(in, attrs));
  bool keepdims = attrs.GetBoolOr("keepdims", false);
  if (keepdims) return keep;
  std::vector<int64_t> axes;
  if (attrs.Has("axis")) { AF_ASSIGN_OR_RETURN(axes, attrs.GetInts("axis")); }
  std::vector<bool> reduce(in.size(), axes.empty());
  for (int64_t a : axes) reduce[a < 0 ? a + static_cast<int64_t>(in.size()) : a] = true;
  Shape out;
  for (size_t i = 0; i < in.size(); ++i)
    if (!reduce[i]) out.push_back(in[i]);
  return out;
}

std::vector<int64_t> ContiguousStrides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

// Loop over `big` with a = contiguous strides of `big`, b = strides of `small` broadcast to it.
StatusOr<StridedLoop> BigSmallLoop(const Shape& big, const Shape& small) {
  return MakeLoop(big, ContiguousStrides(big), BroadcastStrides(small, big));
}

// S(i) of x on a kept axis is S of the same axis of out (renumbered without keepdims). On a
// reduced axis each device reduces its share: partial sums for sum, and for mean too when
// every device divides by the logical count (attribute mean_count, set by the hook below);
// max has no such combination. sum and mean are linear (P->P).
StatusOr<std::vector<SbpSignature>> ReduceSbp(const SbpContext& ctx, Reduce kind) {
  const Shape& x = ctx.inputs[0].shape;
  AF_ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedAxes(x, ctx.attrs));
  const bool keepdims = ctx.attrs.GetBoolOr("keepdims", false);
  std::vector<SbpSignature> out;
  int64_t reduced_before = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    if (CanSplit(x[i], ctx.parts)) {
      if (!reduced[i]) out.push_back(MakeSignature({Sbp::Split(i)}, {Sbp::Split(keepdims ? i : i - reduced_before)}));
      else if (kind != Reduce::kMax) out.push_back(MakeSignature({Sbp::Split(i)}, {Sbp::PartialSum()}));
    }
    reduced_before += reduced[i] ? 1 : 0;
  }
  out.push_back(AllBroadcast(ctx));
  if (kind != Reduce::kMax) out.push_back(UniformSignature(1, 1, Sbp::PartialSum()));
  return out;
}

// reduce_mean on one device's share divides by the logical number of averaged elements.
StatusOr<Attrs> ReduceMeanPhysicalAttrs(const PhysicalContext& ctx) {
  const Shape& x = ctx.logical_inputs[0].shape;
  AF_ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedAxes(x, ctx.attrs));
  int64_t count = 1;
  for (size_t i = 0; i < x.size(); ++i)
    if (reduced[i]) count *= x[i];
  Attrs attrs = ctx.attrs;
  attrs.Set("mean_count", count);
  return attrs;
}

template <typename T>
KernelFn ReduceKernel(Reduce kind, StridedLoop loop, int64_t n_in, int64_t n_out) {
  T scale = kind == Reduce::kMean ? static_cast<T>(static_cast<double>(n_out) / static_cast<double>(std::max<int64_t>(n_in, 1)))
                                  : T(1);
  return [=](KernelContext& c) {
    const T* __restrict x = c.input(0).as<T>();
    T* __restrict z = c.output(0).as<T>();
    T init = kind == Reduce::kMax ? (std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                                          : std::numeric_limits<T>::lowest())
                                  : T(0);
    for (int64_t i = 0; i < n_out; ++i) z[i] = init;
    if (kind == Reduce::kMax) {
      RunLoop(loop, [&](int64_t oa, int64_t ob, int64_t, int64_t len, int64_t sa, int64_t sb) {
        for (int64_t j = 0; j < len; ++j) z[ob + j * sb] = NanMax(x[oa + j * sa], z[ob + j * sb]);
      });
    } else {
      RunLoop(loop, [&](int64_t oa, int64_t ob, int64_t, int64_t len, int64_t sa, int64_t sb) {
        if (sb == 0) {
          T acc = 0;
          #pragma omp simd reduction(+ : acc)
          for (int64_t j = 0; j < len; ++j) acc += x[oa + j * sa];
          z[ob] += acc;
        } else {  // innermost strides of a contiguous input and a kept output are 1
          for (int64_t j = 0; j < len; ++j) z[ob + j] += x[oa + j];
        }
      });
      if (kind == Reduce::kMean)
        for (int64_t i = 0; i < n_out; ++i) z[i] *= scale;
    }
    return Status::Ok();
  };
}

void RegisterReduce(OpRegistry& registry, const std::string& type, Reduce kind) {
  OpDef def;
  def.type = type;
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [kind](InferContext& ctx) -> Status {
    if (kind == Reduce::kMean || (ctx.inputs[0].dtype != DType::kInt32 && ctx.inputs[0].dtype != DType::kInt64))
      AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
    AF_ASSIGN_OR_RETURN(Shape out, ReduceOutputShape(ctx.inputs[0].shape, ctx.attrs));
    ctx.outputs = {TensorDesc{out, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [kind](const KernelInit& init) -> StatusOr<KernelFn> {
    const Shape& in = init.inputs[0].shape;
    AF_ASSIGN_OR_RETURN(Shape keep, KeptShape(in, init.attrs));
    AF_ASSIGN_OR_RETURN(StridedLoop loop, BigSmallLoop(in, keep));
    int64_t n_in = NumElements(in), n_out = NumElements(keep);
    // A device's share of a mean split on a reduced axis divides by the logical count.
    if (kind == Reduce::kMean && init.attrs.Has("mean_count")) {
      AF_ASSIGN_OR_RETURN(int64_t count, init.attrs.GetInt("mean_count"));
      if (count <= 0) return InvalidArgument("reduce_mean: mean_count must be positive, got " + std::to_string(count));
      n_in = count * n_out;
    }
    switch (init.inputs[0].dtype) {
      case DType::kFloat32: return ReduceKernel<float>(kind, loop, n_in, n_out);
      case DType::kFloat64: return ReduceKernel<double>(kind, loop, n_in, n_out);
      case DType::kInt32: return ReduceKernel<int32_t>(kind, loop, n_in, n_out);
      default: return ReduceKernel<int64_t>(kind, loop, n_in, n_out);
    }
  };
  def.grad = [kind](GradBuilder& g) -> Status {
    AF_ASSIGN_OR_RETURN(Shape keep, KeptShape(g.input_desc(0).shape, g.attrs()));
    Attrs reshape{{"shape", std::vector<int64_t>(keep.begin(), keep.end())}};
    AF_ASSIGN_OR_RETURN(std::string dk, g.AddOp1("reshape", {g.output_grad(0)}, reshape));
    std::string dx;
    if (kind == Reduce::kMax) {
      AF_ASSIGN_OR_RETURN(std::string yk, g.AddOp1("reshape", {g.output(0)}, reshape));
      AF_ASSIGN_OR_RETURN(dx, g.AddOp1("reduce_max_grad", {g.input(0), yk, dk}));
    } else {
      AF_ASSIGN_OR_RETURN(dx, g.AddOp1("broadcast_like", {dk, g.input(0)}));
      if (kind == Reduce::kMean) {
        double scale = static_cast<double>(NumElements(keep)) / static_cast<double>(std::max<int64_t>(g.input_desc(0).num_elements(), 1));
        AF_ASSIGN_OR_RETURN(dx, g.AddOp1("scalar_mul", {dx}, Attrs{{"scalar", scale}}));
      }
    }
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  def.sbp = [kind](const SbpContext& ctx) { return ReduceSbp(ctx, kind); };
  if (kind == Reduce::kMean) def.physical_attrs = ReduceMeanPhysicalAttrs;
  def.doc = "out = " + type + " of x over attr `axis` (list, empty = all), attr keepdims" +
            (kind == Reduce::kMean ? "; mean_count (default: the reduced elements of x) is the divisor" : "");
  registry.Register(std::move(def));
}

}  // namespace

void RegisterReduceOps(OpRegistry& registry) {
  RegisterReduce(registry, "reduce_sum", Reduce::kSum);
  RegisterReduce(registry, "reduce_mean", Reduce::kMean);
  RegisterReduce(registry, "reduce_max", Reduce::kMax);

  OpDef max_grad;
  max_grad.type = "reduce_max_grad";
  max_grad.input_names = {"x", "y", "dy"};
  max_grad.output_names = {"dx"};
  max_grad.infer = [](InferContext& ctx) -> Status {
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  max_grad.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(StridedLoop loop, BigSmallLoop(init.inputs[0].shape, init.inputs[1].shape));
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([loop](KernelContext& c) {
        const T* x = c.input(0).as<T>();
        const T* y = c.input(1).as<T>();
        const T* dy = c.input(2).as<T>();
        T* dx = c.output(0).as<T>();
        RunLoop(loop, [&](int64_t oa, int64_t ob, int64_t, int64_t len, int64_t sa, int64_t sb) {
          // A NaN max came from the NaN entries: they receive dy.
          for (int64_t j = 0; j < len; ++j) dx[oa + j * sa] = NanSame(x[oa + j * sa], y[ob + j * sb]) ? dy[ob + j * sb] : T(0);
        });
        return Status::Ok();
      });
    });
  };
  max_grad.doc = "dx = dy where x equals the (kept-shape) max y (or both are NaN), else 0; ties all receive dy";
  // Each dx element compares its x with its max and takes its dy: x splits on any axis, with y
  // and dy split alike where they have the axis and whole where it was reduced. Linear in dy.
  max_grad.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const Shape &x = ctx.inputs[0].shape, &y = ctx.inputs[1].shape, &dy = ctx.inputs[2].shape;
    std::vector<SbpSignature> out;
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
      if (!CanSplit(x[i], ctx.parts)) continue;
      const int64_t d = i - static_cast<int64_t>(x.size() - y.size());
      const bool kept = d >= 0 && y[d] == x[i] && y == dy;
      const bool whole = d < 0 || y[d] == 1;
      if (!kept && !whole) continue;
      const Sbp small = kept ? Sbp::Split(d) : Sbp::Broadcast();
      out.push_back(MakeSignature({Sbp::Split(i), small, small}, {Sbp::Split(i)}));
    }
    out.push_back(AllBroadcast(ctx));
    out.push_back(MakeSignature({Sbp::Broadcast(), Sbp::Broadcast(), Sbp::PartialSum()}, {Sbp::PartialSum()}));
    return out;
  };
  registry.Register(std::move(max_grad));

  // Gradient clipping by global norm: one op per gradient instead of square + reduce + reshape.
  OpDef squares;
  squares.type = "sum_of_squares";
  squares.input_names = {"x"};
  squares.output_names = {"out"};
  squares.infer = [](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
    ctx.outputs = {TensorDesc{{1}, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  squares.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[0].num_elements();
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([n](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        double acc = 0;  // in double: a global norm sums millions of squares
        #pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * x[i];
        c.output(0).as<T>()[0] = static_cast<T>(acc);
        return Status::Ok();
      });
    });
  };
  squares.grad = [](GradBuilder& g) -> Status {  // d/dx sum(x^2) = 2 x dy
    AF_ASSIGN_OR_RETURN(std::string t, g.AddOp1("mul", {g.input(0), g.output_grad(0)}));
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("scalar_mul", {t}, Attrs{{"scalar", 2.0}}));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  // Any split leaves partial sums; squares are not linear, so no P->P.
  squares.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out;
    for (int64_t i = 0; i < static_cast<int64_t>(ctx.inputs[0].shape.size()); ++i)
      if (CanSplit(ctx.inputs[0].shape[i], ctx.parts)) out.push_back(MakeSignature({Sbp::Split(i)}, {Sbp::PartialSum()}));
    out.push_back(AllBroadcast(ctx));
    return out;
  };
  squares.doc = "out(1,) = sum of x squared";
  registry.Register(std::move(squares));

  OpDef like;
  like.type = "reduce_sum_like";
  like.input_names = {"x", "like"};
  like.output_names = {"out"};
  like.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(Shape b, BroadcastShape(ctx.inputs[1].shape, ctx.inputs[0].shape));
    if (b != ctx.inputs[0].shape)
      return InvalidArgument("reduce_sum_like: like's shape " + ShapeToString(ctx.inputs[1].shape) +
                             " does not broadcast to x's shape " + ShapeToString(ctx.inputs[0].shape));
    ctx.outputs = {TensorDesc{ctx.inputs[1].shape, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  like.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(StridedLoop loop, BigSmallLoop(init.inputs[0].shape, init.inputs[1].shape));
    int64_t n_in = init.inputs[0].num_elements(), n_out = init.outputs[0].num_elements();
    return DispatchFloat(init.outputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return ReduceKernel<T>(Reduce::kSum, loop, n_in, n_out);
    });
  };
  like.grad = [](GradBuilder& g) -> Status {
    if (g.needs_input_grad(0)) {
      AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("broadcast_like", {g.output_grad(0), g.input(0)}));
      g.SetInputGrad(0, dx);
    }
    return Status::Ok();
  };
  like.doc = "out(like.shape) = x summed over the dimensions along which like broadcasts to x";
  // x's axis i kept in like: split both; summed (missing in like or extent 1): partial sums.
  like.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const Shape &x = ctx.inputs[0].shape, &l = ctx.inputs[1].shape;
    std::vector<SbpSignature> out;
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
      if (!CanSplit(x[i], ctx.parts)) continue;
      const int64_t d = i - static_cast<int64_t>(x.size() - l.size());
      if (d >= 0 && l[d] == x[i]) out.push_back(MakeSignature({Sbp::Split(i), Sbp::Split(d)}, {Sbp::Split(d)}));
      else out.push_back(MakeSignature({Sbp::Split(i), Sbp::Broadcast()}, {Sbp::PartialSum()}));
    }
    out.push_back(AllBroadcast(ctx));
    out.push_back(MakeSignature({Sbp::PartialSum(), Sbp::Broadcast()}, {Sbp::PartialSum()}));
    return out;
  };
  registry.Register(std::move(like));

  OpDef bcast;
  bcast.type = "broadcast_like";
  bcast.input_names = {"x", "like"};
  bcast.output_names = {"out"};
  bcast.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(Shape b, BroadcastShape(ctx.inputs[0].shape, ctx.inputs[1].shape));
    if (b != ctx.inputs[1].shape)
      return InvalidArgument("broadcast_like: x's shape " + ShapeToString(ctx.inputs[0].shape) +
                             " does not broadcast to like's shape " + ShapeToString(ctx.inputs[1].shape));
    ctx.outputs = {TensorDesc{ctx.inputs[1].shape, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  bcast.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(StridedLoop loop, BigSmallLoop(init.outputs[0].shape, init.inputs[0].shape));
    return DispatchFloat(init.outputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([loop](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        T* __restrict z = c.output(0).as<T>();
        RunLoop(loop, [&](int64_t oa, int64_t ob, int64_t, int64_t len, int64_t sa, int64_t sb) {
          if (sb == 0) {
            T v = x[ob];
            for (int64_t j = 0; j < len; ++j) z[oa + j] = v;
          } else {
            for (int64_t j = 0; j < len; ++j) z[oa + j * sa] = x[ob + j * sb];
          }
        });
        return Status::Ok();
      });
    });
  };
  bcast.grad = [](GradBuilder& g) -> Status {
    if (g.needs_input_grad(0)) {
      AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("reduce_sum_like", {g.output_grad(0), g.input(0)}));
      g.SetInputGrad(0, dx);
    }
    return Status::Ok();
  };
  bcast.doc = "out(like.shape) = x broadcast to like's shape";
  // Output axis i splits with like; x splits alike where it has the axis, else is read whole.
  bcast.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const Shape &x = ctx.inputs[0].shape, &l = ctx.inputs[1].shape;
    std::vector<SbpSignature> out;
    for (int64_t i = 0; i < static_cast<int64_t>(l.size()); ++i) {
      if (!CanSplit(l[i], ctx.parts)) continue;
      const int64_t d = i - static_cast<int64_t>(l.size() - x.size());
      const Sbp xs = d >= 0 && x[d] == l[i] ? Sbp::Split(d) : Sbp::Broadcast();
      out.push_back(MakeSignature({xs, Sbp::Split(i)}, {Sbp::Split(i)}));
    }
    out.push_back(AllBroadcast(ctx));
    out.push_back(MakeSignature({Sbp::PartialSum(), Sbp::Broadcast()}, {Sbp::PartialSum()}));
    return out;
  };
  registry.Register(std::move(bcast));
}

}  // namespace actorflow

// bias_add, reshape/flatten, reductions (sum/mean over axes), softmax and the sparse softmax
// cross-entropy loss, constants. Shape letters: N batch, C classes/channels.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernel_util.h"

namespace actorflow {
namespace {

// x viewed as (outer, C, inner) around `axis`.
struct AxisSplit {
  int64_t outer = 1, channels = 1, inner = 1;
};
AxisSplit SplitAt(const Shape& s, int64_t axis) {
  AxisSplit a;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    if (i < axis) a.outer *= s[i];
    else if (i == axis) a.channels = s[i];
    else a.inner *= s[i];
  }
  return a;
}

void RegisterBiasAdd(OpRegistry& registry) {
  OpDef def;
  def.type = "bias_add";
  def.input_names = {"x", "bias"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    const TensorDesc &x = ctx.inputs[0], &b = ctx.inputs[1];
    AF_RETURN_IF_ERROR(ExpectSameDType(x, b, "x", "bias"));
    int64_t axis = ctx.attrs.GetIntOr("axis", 1);
    if (axis < 0) axis += static_cast<int64_t>(x.shape.size());
    if (axis < 0 || axis >= static_cast<int64_t>(x.shape.size()))
      return InvalidArgument("axis " + std::to_string(axis) + " is out of range for x of shape " + ShapeToString(x.shape));
    if (b.shape != Shape{x.shape[axis]})
      return InvalidArgument("bias must have shape (" + std::to_string(x.shape[axis]) + ",) to match x " +
                             ShapeToString(x.shape) + " on axis " + std::to_string(axis) + ", got " + ShapeToString(b.shape));
    ctx.outputs = {x};
    return Status::Ok();
  };
  def.make_cpu_kernel = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t axis = init.attrs.GetIntOr("axis", 1);
    if (axis < 0) axis += static_cast<int64_t>(init.inputs[0].shape.size());
    AxisSplit s = SplitAt(init.inputs[0].shape, axis);
    bool relu = init.attrs.GetBoolOr("fuse_relu", false);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([s, relu](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        const T* __restrict b = c.input(1).as<T>();
        T* __restrict y = c.output(0).as<T>();
        for (int64_t o = 0; o < s.outer; ++o)
          for (int64_t ch = 0; ch < s.channels; ++ch) {
            int64_t base = (o * s.channels + ch) * s.inner;
            T bv = b[ch];
            if (relu) for (int64_t i = 0; i < s.inner; ++i) { T v = x[base + i] + bv; y[base + i] = v > T(0) ? v : T(0); }
            else for (int64_t i = 0; i < s.inner; ++i) y[base + i] = x[base + i] + bv;
          }
        return Status::Ok();
      });
    });
  };
  def.grad = [](GradBuilder& g) -> Status {
    if (g.attrs().GetBoolOr("fuse_relu", false)) return Unimplemented("bias_add with fuse_relu has no gradient rule");
    if (g.needs_input_grad(0)) g.SetInputGrad(0, g.output_grad(0));
    if (g.needs_input_grad(1)) {
      AF_ASSIGN_OR_RETURN(std::string db, g.AddOp1("bias_add_grad", {g.output_grad(0)}, Attrs{{"axis", g.attrs().GetIntOr("axis", 1)}}));
      g.SetInputGrad(1, db);
    }
    return Status::Ok();
  };
  def.sbp_signatures = {"S(0),B->S(0)", "B,B->B", "P,B->P"};
  def.doc = "out = x + bias broadcast along `axis` (default 1)";
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = "bias_add_grad";
  grad.input_names = {"dy"};
  grad.output_names = {"dbias"};
  grad.infer = [](InferContext& ctx) -> Status {
    int64_t axis = ctx.attrs.GetIntOr("axis", 1);
    if (axis < 0) axis += static_cast<int64_t>(ctx.inputs[0].shape.size());
    ctx.outputs = {TensorDesc{{ctx.inputs[0].shape.at(axis)}, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  grad.make_cpu_kernel = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t axis = init.attrs.GetIntOr("axis", 1);
    if (axis < 0) axis += static_cast<int64_t>(init.inputs[0].shape.size());
    AxisSplit s = SplitAt(init.inputs[0].shape, axis);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([s](KernelContext& c) {
        const T* __restrict dy = c.input(0).as<T>();
        T* __restrict db = c.output(0).as<T>();
        for (int64_t ch = 0; ch < s.channels; ++ch) db[ch] = 0;
        for (int64_t o = 0; o < s.outer; ++o)
          for (int64_t ch = 0; ch < s.channels; ++ch) {
            const T* row = dy + (o * s.channels + ch) * s.inner;
            T acc = 0;
            for (int64_t i = 0; i < s.inner; ++i) acc += row[i];
            db[ch] += acc;
          }
        return Status::Ok();
      });
    });
  };
  grad.doc = "dbias(C) = dy summed over every axis but `axis`";
  registry.Register(std::move(grad));
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
  def.make_cpu_kernel = [](const KernelInit& init) -> StatusOr<KernelFn> {
    size_t bytes = init.inputs[0].byte_size();
    return KernelFn([bytes](KernelContext& c) {
      std::memcpy(c.output(0).data, c.input(0).data, bytes);
      return Status::Ok();
    });
  };
  def.grad = [](GradBuilder& g) -> Status {
    const Shape& s = g.input_desc(0).shape;
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("reshape", {g.output_grad(0)}, Attrs{{"shape", std::vector<int64_t>(s.begin(), s.end())}}));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  def.sbp_signatures = {"B->B"};
  def.doc = "out = x with attr `shape` (one -1 allowed)";
  registry.Register(std::move(def));
}

// reduce_sum / reduce_mean over `axis` (list; empty = all), keepdims.
void RegisterReduce(OpRegistry& registry, const std::string& type, bool mean) {
  OpDef def;
  def.type = type;
  def.input_names = {"x"};
  def.output_names = {"out"};
  auto out_shape = [](const Shape& in, const Attrs& attrs, Shape* kept) -> Status {
    std::vector<int64_t> axes = attrs.GetInts("axis").ok() ? attrs.GetInts("axis").value() : std::vector<int64_t>{};
    bool keepdims = attrs.GetBoolOr("keepdims", false);
    std::vector<bool> reduce(in.size(), axes.empty());
    for (int64_t a : axes) {
      int64_t r = a < 0 ? a + static_cast<int64_t>(in.size()) : a;
      if (r < 0 || r >= static_cast<int64_t>(in.size()))
        return InvalidArgument("axis " + std::to_string(a) + " is out of range for shape " + ShapeToString(in));
      reduce[r] = true;
    }
    Shape out, keep;
    for (size_t i = 0; i < in.size(); ++i) {
      keep.push_back(reduce[i] ? 1 : in[i]);
      if (!reduce[i]) out.push_back(in[i]);
      else if (keepdims) out.push_back(1);
    }
    *kept = keep;
    return Status::Ok();
  };
  def.infer = [out_shape](InferContext& ctx) -> Status {
    Shape keep;
    AF_RETURN_IF_ERROR(out_shape(ctx.inputs[0].shape, ctx.attrs, &keep));
    Shape out;
    bool keepdims = ctx.attrs.GetBoolOr("keepdims", false);
    std::vector<int64_t> axes = ctx.attrs.GetInts("axis").ok() ? ctx.attrs.GetInts("axis").value() : std::vector<int64_t>{};
    std::vector<bool> reduce(keep.size(), axes.empty());
    for (int64_t a : axes) reduce[a < 0 ? a + keep.size() : a] = true;
    for (size_t i = 0; i < keep.size(); ++i)
      if (!reduce[i]) out.push_back(keep[i]);
      else if (keepdims) out.push_back(1);
    ctx.outputs = {TensorDesc{out, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.make_cpu_kernel = [mean, out_shape](const KernelInit& init) -> StatusOr<KernelFn> {
    Shape in = init.inputs[0].shape, keep;
    AF_RETURN_IF_ERROR(out_shape(in, init.attrs, &keep));
    int64_t n_in = NumElements(in), n_out = NumElements(keep);
    double scale = mean ? static_cast<double>(n_out) / static_cast<double>(std::max<int64_t>(n_in, 1)) : 1.0;
    std::vector<int64_t> strides(in.size(), 0);
    int64_t st = 1;
    for (int64_t d = static_cast<int64_t>(in.size()) - 1; d >= 0; --d) {
      strides[d] = keep[d] == 1 ? 0 : st;
      st *= keep[d];
    }
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        const T* x = c.input(0).as<T>();
        T* z = c.output(0).as<T>();
        for (int64_t i = 0; i < n_out; ++i) z[i] = 0;
        int64_t rank = static_cast<int64_t>(in.size());
        for (int64_t i = 0; i < n_in; ++i) {
          int64_t rem = i, o = 0;
          for (int64_t d = rank - 1; d >= 0; --d) {
            o += (rem % in[d]) * strides[d];
            rem /= in[d];
          }
          z[o] += x[i];
        }
        if (scale != 1.0)
          for (int64_t i = 0; i < n_out; ++i) z[i] = static_cast<T>(z[i] * scale);
        return Status::Ok();
      });
    });
  };
  def.grad = [mean, out_shape](GradBuilder& g) -> Status {
    Shape keep;
    AF_RETURN_IF_ERROR(out_shape(g.input_desc(0).shape, g.attrs(), &keep));
    AF_ASSIGN_OR_RETURN(std::string dk, g.AddOp1("reshape", {g.output_grad(0)}, Attrs{{"shape", std::vector<int64_t>(keep.begin(), keep.end())}}));
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1("broadcast_like", {dk, g.input(0)}));
    if (mean) {
      double scale = static_cast<double>(NumElements(keep)) / static_cast<double>(g.input_desc(0).num_elements());
      AF_ASSIGN_OR_RETURN(dx, g.AddOp1("scalar_mul", {dx}, Attrs{{"scalar", scale}}));
    }
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  def.doc = "out = " + type + " of x over attr `axis` (list, empty = all), attr keepdims";
  registry.Register(std::move(def));
}

// Sparse softmax cross-entropy: labels (N,) int32/int64, logits (N,C) -> loss (N,), prob (N,C).
// prob is kept for the backward op: dlogits = (prob - onehot(labels)) * dloss.
void RegisterSparseCrossEntropy(OpRegistry& registry) {
  OpDef def;
  def.type = "sparse_softmax_cross_entropy";
  def.input_names = {"labels", "logits"};
  def.output_names = {"loss", "prob"};
  def.infer = [](InferContext& ctx) -> Status {
    const TensorDesc &labels = ctx.inputs[0], &logits = ctx.inputs[1];
    AF_RETURN_IF_ERROR(ExpectFloat(logits, "logits"));
    AF_RETURN_IF_ERROR(ExpectRank(logits, 2, "logits"));
    if (labels.dtype != DType::kInt32 && labels.dtype != DType::kInt64)
      return InvalidArgument(std::string("labels must be int32 or int64, got ") + DTypeName(labels.dtype));
    if (labels.shape != Shape{logits.shape[0]})
      return InvalidArgument("labels must have shape (" + std::to_string(logits.shape[0]) + ",) to match logits " +
                             ShapeToString(logits.shape) + ", got " + ShapeToString(labels.shape));
    ctx.outputs = {TensorDesc{{logits.shape[0]}, logits.dtype}, logits};
    return Status::Ok();
  };
  def.make_cpu_kernel = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[1].shape[0], classes = init.inputs[1].shape[1];
    bool labels64 = init.inputs[0].dtype == DType::kInt64;
    return DispatchFloat(init.inputs[1].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        const T* logits = c.input(1).as<T>();
        T* loss = c.output(0).as<T>();
        T* prob = c.output(1).as<T>();
        for (int64_t i = 0; i < n; ++i) {
          int64_t label = labels64 ? c.input(0).as<int64_t>()[i] : c.input(0).as<int32_t>()[i];
          if (label < 0 || label >= classes)
            return InvalidArgument("label " + std::to_string(label) + " at position " + std::to_string(i) +
                                   " is out of range [0, " + std::to_string(classes) + ")");
          const T* row = logits + i * classes;
          T* p = prob + i * classes;
          T mx = row[0];
          for (int64_t j = 1; j < classes; ++j) mx = std::max(mx, row[j]);
          T sum = 0;
          for (int64_t j = 0; j < classes; ++j) { p[j] = std::exp(row[j] - mx); sum += p[j]; }
          T inv = T(1) / sum;
          for (int64_t j = 0; j < classes; ++j) p[j] *= inv;
          loss[i] = -(row[label] - mx - std::log(sum));
        }
        return Status::Ok();
      });
    });
  };
  def.grad = [](GradBuilder& g) -> Status {
    if (!g.needs_input_grad(1)) return Status::Ok();
    AF_ASSIGN_OR_RETURN(std::string d, g.AddOp1("sparse_softmax_cross_entropy_grad", {g.input(0), g.output(1), g.output_grad(0)}));
    g.SetInputGrad(1, d);
    return Status::Ok();
  };
  def.sbp_signatures = {"S(0),S(0)->S(0),S(0)", "B,B->B,B"};
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
  grad.make_cpu_kernel = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t n = init.inputs[1].shape[0], classes = init.inputs[1].shape[1];
    bool labels64 = init.inputs[0].dtype == DType::kInt64;
    return DispatchFloat(init.inputs[1].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        const T* prob = c.input(1).as<T>();
        const T* dloss = c.input(2).as<T>();
        T* d = c.output(0).as<T>();
        for (int64_t i = 0; i < n; ++i) {
          int64_t label = labels64 ? c.input(0).as<int64_t>()[i] : c.input(0).as<int32_t>()[i];
          T s = dloss[i];
          for (int64_t j = 0; j < classes; ++j) d[i * classes + j] = prob[i * classes + j] * s;
          d[i * classes + label] -= s;
        }
        return Status::Ok();
      });
    });
  };
  grad.doc = "dlogits(N,C) = (prob - onehot(labels)) * dloss(N)";
  registry.Register(std::move(grad));
}

void RegisterSoftmax(OpRegistry& registry, bool log) {
  OpDef def;
  def.type = log ? "log_softmax" : "softmax";
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(ExpectFloat(ctx.inputs[0], "x"));
    if (ctx.inputs[0].shape.empty()) return InvalidArgument("x must have rank >= 1");
    ctx.outputs = {ctx.inputs[0]};
    return Status::Ok();
  };
  def.make_cpu_kernel = [log](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t classes = init.inputs[0].shape.back(), rows = init.inputs[0].num_elements() / std::max<int64_t>(classes, 1);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        const T* x = c.input(0).as<T>();
        T* y = c.output(0).as<T>();
        for (int64_t i = 0; i < rows; ++i) {
          const T* r = x + i * classes;
          T* o = y + i * classes;
          T mx = r[0];
          for (int64_t j = 1; j < classes; ++j) mx = std::max(mx, r[j]);
          T sum = 0;
          for (int64_t j = 0; j < classes; ++j) sum += std::exp(r[j] - mx);
          if (log) { T ls = std::log(sum); for (int64_t j = 0; j < classes; ++j) o[j] = r[j] - mx - ls; }
          else { T inv = T(1) / sum; for (int64_t j = 0; j < classes; ++j) o[j] = std::exp(r[j] - mx) * inv; }
        }
        return Status::Ok();
      });
    });
  };
  def.grad = [log](GradBuilder& g) -> Status {
    // softmax: dx = y * (dy - sum(dy*y)); log_softmax: dx = dy - exp(y) * sum(dy).
    std::string y = g.output(0), dy = g.output_grad(0);
    int64_t last = static_cast<int64_t>(g.input_desc(0).shape.size()) - 1;
    Attrs keep{{"axis", std::vector<int64_t>{last}}, {"keepdims", true}};
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
  def.doc = std::string(log ? "log_softmax" : "softmax") + " over the last axis";
  registry.Register(std::move(def));
}

// constant: no inputs; attrs shape, value, dtype. A root of the plan, run once per iteration.
void RegisterConstant(OpRegistry& registry) {
  OpDef def;
  def.type = "constant";
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ctx.attrs.GetInts("shape"));
    std::string dtype = ctx.attrs.GetStringOr("dtype", "float32");
    ctx.outputs = {TensorDesc{shape, dtype == "float64" ? DType::kFloat64 : DType::kFloat32}};
    return Status::Ok();
  };
  def.make_cpu_kernel = [](const KernelInit& init) -> StatusOr<KernelFn> {
    double value = init.attrs.GetFloatOr("value", 0);
    int64_t n = init.outputs[0].num_elements();
    return DispatchFloat(init.outputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([=](KernelContext& c) {
        T* y = c.output(0).as<T>();
        for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(value);
        return Status::Ok();
      });
    });
  };
  def.doc = "out(shape) = value";
  registry.Register(std::move(def));
}

}  // namespace

void RegisterNnOps(OpRegistry& registry) {
  RegisterBiasAdd(registry);
  RegisterReshape(registry);
  RegisterReduce(registry, "reduce_sum", false);
  RegisterReduce(registry, "reduce_mean", true);
  RegisterSparseCrossEntropy(registry);
  RegisterSoftmax(registry, false);
  RegisterSoftmax(registry, true);
  RegisterConstant(registry);
}

}  // namespace actorflow

// matmul: C = op(A) · op(B), op = optional transpose. Shapes (row-major): A (M,K) or (K,M) if
// transpose_a; B (K,N) or (N,K) if transpose_b; C (M,N). float32 goes to oneDNN's sgemm
// (near this machine's GEMM ceiling); float64 uses a blocked loop (gradient checks only).
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include "kernels/kernel_util.h"

namespace actorflow {
namespace {

Status InferMatmul(InferContext& ctx) {
  const TensorDesc &a = ctx.inputs[0], &b = ctx.inputs[1];
  AF_RETURN_IF_ERROR(ExpectFloat(a, "a"));
  AF_RETURN_IF_ERROR(ExpectSameDType(a, b, "a", "b"));
  AF_RETURN_IF_ERROR(ExpectRank(a, 2, "a"));
  AF_RETURN_IF_ERROR(ExpectRank(b, 2, "b"));
  bool ta = ctx.attrs.GetBoolOr("transpose_a", false), tb = ctx.attrs.GetBoolOr("transpose_b", false);
  int64_t m = ta ? a.shape[1] : a.shape[0], ka = ta ? a.shape[0] : a.shape[1];
  int64_t kb = tb ? b.shape[1] : b.shape[0], n = tb ? b.shape[0] : b.shape[1];
  if (ka != kb)
    return InvalidArgument("a has shape " + ShapeToString(a.shape) + " and b has shape " + ShapeToString(b.shape) +
                           "; with transpose_a=" + (ta ? "true" : "false") + " and transpose_b=" + (tb ? "true" : "false") +
                           " the inner dimensions must match (" + std::to_string(ka) + " vs " + std::to_string(kb) + ")");
  ctx.outputs = {TensorDesc{{m, n}, a.dtype}};
  return Status::Ok();
}

template <typename T>
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c) {
  for (int64_t i = 0; i < m; ++i) {
    T* crow = c + i * n;
    for (int64_t j = 0; j < n; ++j) crow[j] = 0;
    for (int64_t p = 0; p < k; ++p) {
      T av = ta ? a[p * m + i] : a[i * k + p];
      if (!tb) {
        const T* brow = b + p * n;
        for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
      } else {
        for (int64_t j = 0; j < n; ++j) crow[j] += av * b[j * k + p];
      }
    }
  }
}

StatusOr<KernelFn> MakeMatmul(const KernelInit& init) {
  bool ta = init.attrs.GetBoolOr("transpose_a", false), tb = init.attrs.GetBoolOr("transpose_b", false);
  const Shape& a = init.inputs[0].shape;
  int64_t m = init.outputs[0].shape[0], n = init.outputs[0].shape[1], k = ta ? a[0] : a[1];
  int threads = std::max(1, init.num_threads);
  if (init.inputs[0].dtype == DType::kFloat64)
    return KernelFn([=](KernelContext& c) {
      Gemm<double>(ta, tb, m, n, k, c.input(0).as<double>(), c.input(1).as<double>(), c.output(0).as<double>());
      return Status::Ok();
    });
  return KernelFn([=](KernelContext& c) {
    omp_set_num_threads(threads);  // the per-thread ICV oneDNN reads: this kernel's share of the budget
    dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, c.input(0).as<float>(), ta ? m : k,
                                 c.input(1).as<float>(), tb ? k : n, 0.0f, c.output(0).as<float>(), n);
    return s == dnnl_success ? Status::Ok() : Internal("dnnl_sgemm failed with status " + std::to_string(s));
  });
}

// d(op(A)·op(B)): each case writes the gradient as another matmul with transpose flags.
Status GradMatmul(GradBuilder& g) {
  bool ta = g.attrs().GetBoolOr("transpose_a", false), tb = g.attrs().GetBoolOr("transpose_b", false);
  std::string a = g.input(0), b = g.input(1), dc = g.output_grad(0);
  auto mm = [&](const std::string& x, const std::string& y, bool tx, bool ty) {
    return g.AddOp1("matmul", {x, y}, Attrs{{"transpose_a", tx}, {"transpose_b", ty}});
  };
  if (g.needs_input_grad(0)) {
    StatusOr<std::string> da = !ta ? (tb ? mm(dc, b, false, false) : mm(dc, b, false, true))
                                   : (tb ? mm(b, dc, true, true) : mm(b, dc, false, true));
    if (!da.ok()) return da.status();
    g.SetInputGrad(0, da.value());
  }
  if (g.needs_input_grad(1)) {
    StatusOr<std::string> db = !tb ? (ta ? mm(a, dc, false, false) : mm(a, dc, true, false))
                                   : (ta ? mm(dc, a, true, true) : mm(dc, a, true, false));
    if (!db.ok()) return db.status();
    g.SetInputGrad(1, db.value());
  }
  return Status::Ok();
}

}  // namespace

void RegisterMatmulOps(OpRegistry& registry) {
  OpDef def;
  def.type = "matmul";
  def.input_names = {"a", "b"};
  def.output_names = {"out"};
  def.infer = InferMatmul;
  def.make_cpu_kernel = MakeMatmul;
  def.grad = GradMatmul;
  def.sbp_signatures = {"S(0),B->S(0)", "B,S(1)->S(1)", "S(1),S(0)->P", "B,B->B"};
  def.doc = "out(M,N) = op(a)(M,K) . op(b)(K,N); attrs transpose_a, transpose_b";
  registry.Register(std::move(def));
}

}  // namespace actorflow

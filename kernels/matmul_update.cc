// matmul_sgd_update: var = (1 - lr * weight_decay) * var - lr * grad_scale * op(a) · op(b), in
// place. It is the compiler's fusion of a weight gradient computed as one matmul with the plain
// SGD update that is its only reader (graph/update_fusion.cc): the GEMM accumulates into the
// variable (alpha = -lr * grad_scale, beta = 1 - lr * weight_decay), so the gradient is never
// written to memory and read back, and the separate update pass over the weight disappears.
// Same algebra as sgd_update of a matmul: var -= lr * (grad_scale * grad + weight_decay * var).
// 2-D float32 only (what dense weights are); no gradient (an update). The compiler fuses only
// on one device; the SBP function still says which shards are exact (rows of var with the rows
// of op(a), columns with the columns of op(b)) for plans built by hand.
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/matmul_narrow.h"
#include "kernels/parallel_chunks.h"
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

struct Dims {
  int64_t m = 0, n = 0, k = 0;
};

// var (M,N) = op(a) (M,K) · op(b) (K,N).
StatusOr<Dims> ReadDims(const std::vector<TensorDesc>& in, bool ta, bool tb) {
  const TensorDesc &var = in[0], &a = in[1], &b = in[2], &lr = in[3];
  if (var.dtype != DType::kFloat32 || var.shape.size() != 2)
    return InvalidArgument("var must be a 2-D float32 tensor, got " + var.ToString());
  if (a.dtype != DType::kFloat32 || a.shape.size() != 2)
    return InvalidArgument("a must be a 2-D float32 tensor, got " + a.ToString());
  if (b.dtype != DType::kFloat32 || b.shape.size() != 2)
    return InvalidArgument("b must be a 2-D float32 tensor, got " + b.ToString());
  if (lr != TensorDesc{{1}, DType::kFloat32}) return InvalidArgument("lr must be float32(1,), got " + lr.ToString());
  Dims d;
  d.m = ta ? a.shape[1] : a.shape[0];
  d.k = ta ? a.shape[0] : a.shape[1];
  const int64_t kb = tb ? b.shape[1] : b.shape[0];
  d.n = tb ? b.shape[0] : b.shape[1];
  if (kb != d.k)
    return InvalidArgument("a has shape " + ShapeToString(a.shape) + " and b has shape " + ShapeToString(b.shape) +
                           "; with transpose_a=" + (ta ? "true" : "false") + " and transpose_b=" + (tb ? "true" : "false") +
                           " the inner dimensions must match (" + std::to_string(d.k) + " vs " + std::to_string(kb) + ")");
  if (var.shape != Shape{d.m, d.n})
    return InvalidArgument("op(a) · op(b) has shape (" + std::to_string(d.m) + ", " + std::to_string(d.n) +
                           ") but var has shape " + ShapeToString(var.shape));
  return d;
}

// Below this many FLOPs the GEMM runs on the acting thread alone. Lower than the matmul
// kernel's 2 MFLOP (which hands smaller GEMMs to its one-thread primitive, split in halves):
// here every size goes through Sgemm's blocks, and a narrow weight gradient of 1 MFLOP (the
// seed MLP's 512x10 output layer, K = 100: ~20 us on one core) still splits into row blocks
// of ~5 us each, which a helper that arrives late leaves to the caller.
constexpr double kParallelGemmFlops = 4e5;

}  // namespace

void RegisterMatmulUpdateOps(OpRegistry& registry) {
  OpDef def;
  def.type = "matmul_sgd_update";
  def.input_names = {"var", "a", "b", "lr"};
  def.mutable_inputs = {0};
  def.infer = [](InferContext& ctx) -> Status {
    AF_RETURN_IF_ERROR(ReadDims(ctx.inputs, ctx.attrs.GetBoolOr("transpose_a", false),
                                ctx.attrs.GetBoolOr("transpose_b", false))
                           .status());
    ctx.outputs.clear();
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    const bool ta = init.attrs.GetBoolOr("transpose_a", false), tb = init.attrs.GetBoolOr("transpose_b", false);
    AF_ASSIGN_OR_RETURN(Dims d, ReadDims(init.inputs, ta, tb));
    const float weight_decay = static_cast<float>(init.attrs.GetFloatOr("weight_decay", 0));
    const float grad_scale = static_cast<float>(init.attrs.GetFloatOr("grad_scale", 1.0));
    const double flops = 2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k);
    const int threads = flops < kParallelGemmFlops ? 1 : std::max(1, init.num_threads);
    const bool omp_team = init.attrs.GetBoolOr("omp_team", false);
    // A narrow weight gradient (a dense layer with few units: (K,units)ᵀ·(K,in)) accumulates
    // into var through the kernels' register-tiled loop (kernels/matmul_narrow.h), split in
    // `threads` parts; attr narrow_gemm=false (disable_fusion("narrow_gemm")) keeps oneDNN.
    const NarrowGemmLoop narrow = init.attrs.GetBoolOr("narrow_gemm", true) && GemvAvailable()
                                      ? ChooseNarrowGemm(ta, tb, d.m, d.n, d.k)
                                      : NarrowGemmLoop::kNone;
    if (narrow != NarrowGemmLoop::kNone)
      return KernelFn([=](KernelContext& c) {
        const float lr = *c.input(3).as<float>();
        NarrowGemmArgs g;
        g.transpose_a = ta;
        g.transpose_b = tb;
        g.m = d.m;
        g.n = d.n;
        g.k = d.k;
        g.alpha = -lr * grad_scale;
        g.beta = 1.0f - lr * weight_decay;
        g.a = c.input(1).as<float>();
        g.b = c.input(2).as<float>();
        g.c = c.input(0).as<float>();
        const int64_t extent = NarrowGemmExtent(g, narrow), step = NarrowGemmStep(g, narrow, threads);
        const int pieces = static_cast<int>((extent + step - 1) / step);
        if (pieces <= 1) {
          NarrowGemmPart(g, narrow, 0, extent);
        } else {
          auto piece = [&](int i) { NarrowGemmPart(g, narrow, i * step, std::min(extent, (i + 1) * step)); };
          ParallelChunks(pieces, threads, piece);
        }
        return Status::Ok();
      });
    return KernelFn([=](KernelContext& c) {
      const float lr = *c.input(3).as<float>();
      return Sgemm(ta, tb, d.m, d.n, d.k, -lr * grad_scale, c.input(1).as<float>(), c.input(2).as<float>(),
                   1.0f - lr * weight_decay, c.input(0).as<float>(), threads, omp_team);
    });
  };
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const bool ta = ctx.attrs.GetBoolOr("transpose_a", false), tb = ctx.attrs.GetBoolOr("transpose_b", false);
    const Shape& var = ctx.inputs[0].shape;
    const Sbp B = Sbp::Broadcast();
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    if (CanSplit(var[0], ctx.parts)) out.push_back(MakeSignature({Sbp::Split(0), Sbp::Split(ta ? 1 : 0), B, B}, {}));
    if (CanSplit(var[1], ctx.parts)) out.push_back(MakeSignature({Sbp::Split(1), B, Sbp::Split(tb ? 0 : 1), B}, {}));
    return out;
  };
  def.doc = "var = (1 - lr*weight_decay) * var - lr*grad_scale * op(a)·op(b), in place (fused SGD of a matmul gradient)";
  registry.Register(std::move(def));

  // bias_add_grad_sgd_update: var (C,) -= lr * (grad_scale * sum of dy over every axis but
  // `axis` + weight_decay * var), in place: a bias's gradient (bias_add_grad) and its plain SGD
  // update as one op (graph/update_fusion.cc, "bias_gradient_update"): one actor less per
  // dense or convolution bias, and the gradient never leaves the kernel. The sums run in
  // bias_add_grad's order into a buffer made with the kernel (one thread runs a kernel at a
  // time), then the update is sgd_update's expression: the same floats as the two ops.
  OpDef bias;
  bias.type = "bias_add_grad_sgd_update";
  bias.input_names = {"var", "dy", "lr"};
  bias.mutable_inputs = {0};
  bias.infer = [](InferContext& ctx) -> Status {
    const TensorDesc &var = ctx.inputs[0], &dy = ctx.inputs[1], &lr = ctx.inputs[2];
    if (var.dtype != DType::kFloat32 || var.shape.size() != 1)
      return InvalidArgument("var must be a 1-D float32 tensor, got " + var.ToString());
    if (dy.dtype != DType::kFloat32) return InvalidArgument("dy must be float32, got " + dy.ToString());
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", 1), dy.shape.size(), "axis"));
    if (dy.shape[axis] != var.shape[0])
      return InvalidArgument("dy " + ShapeToString(dy.shape) + " has " + std::to_string(dy.shape[axis]) +
                             " channels on axis " + std::to_string(axis) + " but var has shape " + ShapeToString(var.shape));
    if (lr != TensorDesc{{1}, DType::kFloat32}) return InvalidArgument("lr must be float32(1,), got " + lr.ToString());
    ctx.outputs.clear();
    return Status::Ok();
  };
  bias.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(init.attrs.GetIntOr("axis", 1), init.inputs[1].shape.size(), "axis"));
    const AxisSplit s = SplitAt(init.inputs[1].shape, axis);
    const float weight_decay = static_cast<float>(init.attrs.GetFloatOr("weight_decay", 0));
    const float grad_scale = static_cast<float>(init.attrs.GetFloatOr("grad_scale", 1.0));
    auto sums = std::make_shared<std::vector<float>>(s.channels);
    return KernelFn([=](KernelContext& c) {
      const float* __restrict dy = c.input(1).as<float>();
      float* __restrict db = sums->data();
      float* __restrict w = c.input(0).as<float>();
      const float lr = *c.input(2).as<float>();
      for (int64_t ch = 0; ch < s.channels; ++ch) db[ch] = 0;
      if (s.inner == 1) {
        for (int64_t o = 0; o < s.outer; ++o) {
          const float* __restrict row = dy + o * s.channels;
          for (int64_t ch = 0; ch < s.channels; ++ch) db[ch] += row[ch];
        }
      } else {
        for (int64_t o = 0; o < s.outer; ++o)
          for (int64_t ch = 0; ch < s.channels; ++ch) {
            const float* row = dy + (o * s.channels + ch) * s.inner;
            float acc = 0;
            #pragma omp simd reduction(+ : acc)
            for (int64_t i = 0; i < s.inner; ++i) acc += row[i];
            db[ch] += acc;
          }
      }
      for (int64_t ch = 0; ch < s.channels; ++ch) w[ch] -= lr * (grad_scale * db[ch] + weight_decay * w[ch]);
      return Status::Ok();
    });
  };
  // The compiler fuses only on one device; for plans built by hand, channels split with the
  // variable's shards are exact (each shard sums and updates its own channels).
  bias.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", 1), ctx.inputs[1].shape.size(), "axis"));
    if (CanSplit(ctx.inputs[0].shape[0], ctx.parts))
      out.push_back(MakeSignature({Sbp::Split(0), Sbp::Split(axis), Sbp::Broadcast()}, {}));
    return out;
  };
  bias.doc = "var -= lr * (grad_scale * dy summed over every axis but `axis` + weight_decay * var), in place "
             "(fused bias_add_grad and SGD update)";
  registry.Register(std::move(bias));
}

}  // namespace actorflow

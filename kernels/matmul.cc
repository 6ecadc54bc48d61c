// matmul: C = op(A) · op(B), op = optional transpose of the last two dims; 2-D or batched 3-D.
// bias_add (the dense layer's other half; attr fuse_relu gives the fused epilogue). float32 goes to oneDNN's sgemm
// (near this machine's GEMM ceiling; split into blocks over the threads by kernels/gemm.h, the
// bias and relu applied per block; a small one-thread GEMM runs a oneDNN matmul primitive made
// once per kernel); float64 uses a blocked loop (gradient checks only).
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/matmul_narrow.h"
#include "kernels/matmul_packed.h"
#include "kernels/parallel_chunks.h"
#include "kernels/kernel_util.h"
#include "kernels/sbp_util.h"

namespace actorflow {
namespace {

// Shapes: a (M,K) / (B,M,K), b (K,N) / (B,K,N) (transposes swap the last two dims); a 2-D
// operand is shared by every batch. out (M,N) or (B,M,N).
struct MatmulDims {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool a_batched = false, b_batched = false;
};

StatusOr<MatmulDims> ReadDims(const TensorDesc& a, const TensorDesc& b, bool ta, bool tb) {
  if (a.shape.size() != 2 && a.shape.size() != 3)
    return InvalidArgument("a must have rank 2 (M,K) or 3 (B,M,K), got shape " + ShapeToString(a.shape));
  if (b.shape.size() != 2 && b.shape.size() != 3)
    return InvalidArgument("b must have rank 2 (K,N) or 3 (B,K,N), got shape " + ShapeToString(b.shape));
  MatmulDims d;
  d.a_batched = a.shape.size() == 3;
  d.b_batched = b.shape.size() == 3;
  size_t ra = a.shape.size(), rb = b.shape.size();
  if (d.a_batched && d.b_batched && a.shape[0] != b.shape[0])
    return InvalidArgument("a has shape " + ShapeToString(a.shape) + " and b has shape " + ShapeToString(b.shape) +
                           "; the batch dimensions must match (" + std::to_string(a.shape[0]) + " vs " +
                           std::to_string(b.shape[0]) + ")");
  d.batch = d.a_batched ? a.shape[0] : d.b_batched ? b.shape[0] : 1;
  d.m = ta ? a.shape[ra - 1] : a.shape[ra - 2];
  int64_t ka = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  int64_t kb = tb ? b.shape[rb - 1] : b.shape[rb - 2];
  d.n = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  if (ka != kb)
    return InvalidArgument("a has shape " + ShapeToString(a.shape) + " and b has shape " + ShapeToString(b.shape) +
                           "; with transpose_a=" + (ta ? "true" : "false") + " and transpose_b=" + (tb ? "true" : "false") +
                           " the inner dimensions must match (" + std::to_string(ka) + " vs " + std::to_string(kb) + ")");
  d.k = ka;
  return d;
}

Status InferMatmul(InferContext& ctx) {
  const TensorDesc &a = ctx.inputs[0], &b = ctx.inputs[1];
  AF_RETURN_IF_ERROR(ExpectFloat(a, "a"));
  AF_RETURN_IF_ERROR(ExpectSameDType(a, b, "a", "b"));
  bool ta = ctx.attrs.GetBoolOr("transpose_a", false), tb = ctx.attrs.GetBoolOr("transpose_b", false);
  AF_ASSIGN_OR_RETURN(MatmulDims d, ReadDims(a, b, ta, tb));
  Shape out = (d.a_batched || d.b_batched) ? Shape{d.batch, d.m, d.n} : Shape{d.m, d.n};
  ctx.outputs = {TensorDesc{out, a.dtype}};
  // The compiler's bias-gradient fusion (graph/matmul_bias_grad.cc): a second output, the
  // product's columns summed over every row (and batch), what bias_add_grad on the last axis gives.
  if (ctx.attrs.GetBoolOr("fuse_bias_grad", false)) ctx.outputs.push_back(TensorDesc{{d.n}, a.dtype});
  return Status::Ok();
}

// dbias (n) = out (rows x n) summed over rows in ascending order from zero: bias_add_grad's
// loop (the same floats), for the kernels' paths that cannot sum while the product is stored.
template <typename T>
void SumColumns(const T* __restrict out, int64_t rows, int64_t n, T* __restrict sums) {
  for (int64_t j = 0; j < n; ++j) sums[j] = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict row = out + r * n;
    for (int64_t j = 0; j < n; ++j) sums[j] += row[j];
  }
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

// Below this many FLOPs a GEMM is not worth splitting across threads (a few microseconds of work).
constexpr double kParallelGemmFlops = 2e6;
// A right operand this large is streamed from memory whatever the FLOPs (see MakeMatmul).
constexpr double kStreamedRightBytes = 512 * 1024;

// A small float GEMM (UsePrimitive) runs as a oneDNN matmul primitive made once per kernel over
// b where it lies (PackedGemm::MakeInPlace, kernels/matmul_packed.h): its code is generated for
// these shapes; with a large b it repacks b on every call ((1,784)x(784,512): 96-131 us against
// 23-40) and with a few rows it is no faster. With two threads and enough work the rows are split
// in two halves on the caller and a kernels' pool helper (ParallelChunks: a helper that is not
// there in time leaves its half to the caller).
bool UsePrimitive(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMinRows = 16, kMaxRightBytes = 128 << 10;
  return m >= kMinRows && n > 0 && k > 0 && k * n * static_cast<int64_t>(sizeof(float)) <= kMaxRightBytes;
}

// A packed right operand pays from this many rows of op(a) (fewer run as a GEMV or the narrow
// loops, reading b once); each piece of the rows split over threads has at least kPackedMinPartRows.
constexpr int64_t kPackedMinRows = 16, kPackedMinPartRows = 8;

// Two halves pay where each is still a few microseconds of work: a 64x64x64 GEMM (0.5 MFLOP,
// 4.9 us on one core) is the smallest split.
constexpr double kSplitSmallGemmFlops = 4e5;

StatusOr<KernelFn> MakeMatmul(const KernelInit& init) {
  bool ta = init.attrs.GetBoolOr("transpose_a", false), tb = init.attrs.GetBoolOr("transpose_b", false);
  AF_ASSIGN_OR_RETURN(MatmulDims d, ReadDims(init.inputs[0], init.inputs[1], ta, tb));
  // A batched, untransposed a against a shared b is one (B*M,K)x(K,N) GEMM.
  if (d.a_batched && !d.b_batched && !ta) {
    d.m *= d.batch;
    d.batch = 1;
  }
  int64_t m = d.m, n = d.n, k = d.k, batch = d.batch;
  int64_t a_step = d.a_batched ? m * k : 0, b_step = d.b_batched ? k * n : 0, c_step = m * n;
  // A small GEMM runs on the acting thread alone: waking the OpenMP team costs more than it
  // saves, and a team member spinning afterwards takes a core from the host and the other actors
  // (batch-1 inference: 115 -> 65 us for the MLP on 2 cores).
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
                       static_cast<double>(batch);
  // ... except a few rows against a large b (batch-1 inference's 784x512 weights): that GEMM
  // streams b from memory, more than one core's L2 holds, so column blocks on two cores each
  // read half of b (measured: 19 us on one core, 8-9.5 on two).
  const bool streams_b = m * batch <= 8 && static_cast<double>(k) * static_cast<double>(n) * sizeof(float) >= kStreamedRightBytes;
  const bool small = flops < kParallelGemmFlops && !streams_b;
  const int threads = small ? 1 : std::max(1, init.num_threads);
  // Epilogues (the compiler's fusion passes): out += bias per column, then relu; or, for a
  // gradient matmul, relu's backward: out kept where the relu's output y (third input) > 0.
  const bool fuse_bias = init.attrs.GetBoolOr("fuse_bias", false), fuse_relu = init.attrs.GetBoolOr("fuse_relu", false);
  const bool fuse_relu_grad = init.attrs.GetBoolOr("fuse_relu_grad", false);
  if (fuse_bias && (init.inputs.size() != 3 || init.inputs[2].shape != Shape{n} || init.inputs[2].dtype != init.inputs[0].dtype))
    return InvalidArgument("matmul with fuse_bias needs a third input 'bias' of shape (" + std::to_string(n) + ",) and "
                           "the operands' dtype, got " + (init.inputs.size() == 3 ? init.inputs[2].ToString() : "none"));
  if (fuse_relu && !fuse_bias) return InvalidArgument("matmul: fuse_relu needs fuse_bias");
  if (fuse_relu_grad && fuse_bias) return InvalidArgument("matmul: fuse_relu_grad and fuse_bias exclude each other");
  if (fuse_relu_grad && (init.inputs.size() != 3 || init.inputs[2] != init.outputs[0]))
    return InvalidArgument("matmul with fuse_relu_grad needs a third input 'y' (the relu's output) like the product, " +
                           init.outputs[0].ToString() + ", got " + (init.inputs.size() == 3 ? init.inputs[2].ToString() : "none"));
  const int64_t rows = m * batch;
  // fuse_bias_grad: output 1 (n) = the final product's column sums (see InferMatmul).
  const bool fuse_bias_grad = init.attrs.GetBoolOr("fuse_bias_grad", false);
  if (fuse_bias_grad && (init.outputs.size() != 2 || init.outputs[1] != TensorDesc{{n}, init.inputs[0].dtype}))
    return InvalidArgument("matmul with fuse_bias_grad needs a second output 'dbias' of shape (" + std::to_string(n) +
                           ",) and the operands' dtype, got " +
                           (init.outputs.size() == 2 ? init.outputs[1].ToString() : std::string("none")));
  auto sum_columns = [=]<typename T>(KernelContext& c) {
    if (fuse_bias_grad) SumColumns<T>(c.output(0).as<T>(), rows, n, c.output(1).as<T>());
  };
  // On rows [r0, r1) of the output (all batches folded into rows).
  auto epilogue = [=]<typename T>(KernelContext& c, int64_t r0, int64_t r1) {
    if (fuse_relu_grad) {
      const T* __restrict y = c.input(2).as<T>();
      T* __restrict out = c.output(0).as<T>();
      for (int64_t i = r0 * n; i < r1 * n; ++i) { T d = out[i]; out[i] = y[i] > T(0) ? d : T(0); }
      return;
    }
    if (!fuse_bias) return;
    const T* __restrict bias = c.input(2).as<T>();
    T* __restrict out = c.output(0).as<T>();
    for (int64_t r = r0; r < r1; ++r) {
      T* __restrict row = out + r * n;
      if (fuse_relu)
        for (int64_t j = 0; j < n; ++j) { T v = row[j] + bias[j]; row[j] = NanRelu(v); }
      else
        for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
    }
  };
  if (init.inputs[0].dtype == DType::kFloat64)
    return KernelFn([=](KernelContext& c) {
      for (int64_t i = 0; i < batch; ++i)
        Gemm<double>(ta, tb, m, n, k, c.input(0).as<double>() + i * a_step, c.input(1).as<double>() + i * b_step,
                     c.output(0).as<double>() + i * c_step);
      epilogue.template operator()<double>(c, 0, rows);
      sum_columns.template operator()<double>(c);
      return Status::Ok();
    });
  // A few rows of a (batch-1 inference) as a GEMV (kernels/gemv.h), its columns split over the
  // threads when the GEMM would be split; attr gemv=false (disable_fusion("gemv")) keeps oneDNN.
  // The GEMV has the bias/relu epilogue only: a relu-gradient mask keeps the GEMM path.
  if (init.inputs[0].dtype == DType::kFloat32 && init.attrs.GetBoolOr("gemv", true) && batch == 1 && !ta &&
      !fuse_relu_grad && m <= kGemvMaxRows && n > 0 && k > 0 && GemvAvailable())
    return KernelFn([=](KernelContext& c) {
      const GemvArgs g{tb, m, n, k, c.input(0).as<float>(), c.input(1).as<float>(),
                       fuse_bias ? c.input(2).as<float>() : nullptr, fuse_relu, c.output(0).as<float>()};
      const int t = !small && c.threads > threads ? c.threads : threads;
      const int64_t step = GemvColumnStep(n, t);
      const int blocks = static_cast<int>((n + step - 1) / step);
      if (blocks <= 1) {
        GemvColumns(g, 0, n);
      } else {
        auto block = [&](int i) { GemvColumns(g, i * step, std::min(n, (i + 1) * step)); };
        ParallelChunks(blocks, t, block, WakeHelpers::kInStream);  // ~20 us on one core: see the enum
      }
      sum_columns.template operator()<float>(c);
      return Status::Ok();
    });
  // A GEMM with one small dimension (a narrow dense layer and its gradients) as the kernels'
  // register-tiled loops (kernels/matmul_narrow.h), in two parts on two threads where the
  // one-thread primitive below would split; attr narrow_gemm=false (disable_fusion
  // ("narrow_gemm")) keeps oneDNN.
  // Pieces of a GEMM split over threads by the loops and primitives below: two halves for a small
  // one with enough work, else the kernel's threads.
  const int split_parts = small ? (init.num_threads >= 2 && flops >= kSplitSmallGemmFlops ? 2 : 1) : threads;
  const NarrowGemmLoop narrow = init.inputs[0].dtype == DType::kFloat32 && init.attrs.GetBoolOr("narrow_gemm", true) &&
                                        batch == 1 && GemvAvailable()
                                    ? ChooseNarrowGemm(ta, tb, m, n, k)
                                    : NarrowGemmLoop::kNone;
  if (narrow != NarrowGemmLoop::kNone) {
    return KernelFn([=](KernelContext& c) {
      NarrowGemmArgs g;
      g.transpose_a = ta;
      g.transpose_b = tb;
      g.m = m;
      g.n = n;
      g.k = k;
      g.a = c.input(0).as<float>();
      g.b = c.input(1).as<float>();
      g.bias = fuse_bias ? c.input(2).as<float>() : nullptr;
      g.relu = fuse_relu;
      g.relu_output = fuse_relu_grad ? c.input(2).as<float>() : nullptr;
      g.c = c.output(0).as<float>();
      // The rows loop sums each column as it stores it (its parts own whole columns).
      g.column_sums = fuse_bias_grad && NarrowGemmSumsColumns(narrow) ? c.output(1).as<float>() : nullptr;
      const int parts = !small && c.threads > split_parts ? c.threads : split_parts;
      const int64_t extent = NarrowGemmExtent(g, narrow), step = NarrowGemmStep(g, narrow, parts);
      const int pieces = static_cast<int>((extent + step - 1) / step);
      if (pieces <= 1) {
        NarrowGemmPart(g, narrow, 0, extent);
      } else {
        auto piece = [&](int i) { NarrowGemmPart(g, narrow, i * step, std::min(extent, (i + 1) * step)); };
        ParallelChunks(pieces, parts, piece);
      }
      if (!g.column_sums) sum_columns.template operator()<float>(c);
      return Status::Ok();
    });
  }
  // A right operand the job only reads (a predict job's weights) in oneDNN's packed layout,
  // packed again when the variable changes (kernels/matmul_packed.h); its rows split over the
  // threads. attr packed_weights=false (disable_fusion("packed_weights")) keeps the paths below,
  // as does omp_team. Else a small GEMM as a primitive over b in place (see UsePrimitive).
  std::shared_ptr<PackedGemm> primitive;
  if (init.inputs[0].dtype == DType::kFloat32 && batch == 1 && !d.b_batched && m >= kPackedMinRows &&
      init.input_version(1) != nullptr && init.attrs.GetBoolOr("packed_weights", true) &&
      !init.attrs.GetBoolOr("omp_team", false))
    primitive = PackedGemm::Make(ta, tb, m, n, k, static_cast<int>(std::min<int64_t>(split_parts, m / kPackedMinPartRows)),
                                 init.input_versions[1]);
  if (!primitive && small && batch == 1 && UsePrimitive(m, n, k))
    primitive = PackedGemm::MakeInPlace(ta, tb, m, n, k, split_parts == 2 && m % 2 == 0 && UsePrimitive(m / 2, n, k) ? 2 : 1);
  if (primitive)
    return KernelFn([=](KernelContext& c) {
      // Each piece's epilogue on its own rows, on the thread that just wrote them.
      auto after_part = [&](int64_t begin, int64_t end) { epilogue.template operator()<float>(c, begin, end); };
      AF_RETURN_IF_ERROR(primitive->Run(c.input(1).as<float>(), c.input(0).as<float>(), c.output(0).as<float>(),
                                        after_part, "oneDNN matmul"));
      sum_columns.template operator()<float>(c);
      return Status::Ok();
    });
  // omp_team: one OpenMP team per GEMM instead of blocks (disable_fusion("gemm_chunks")).
  const bool omp_team = init.attrs.GetBoolOr("omp_team", false);
  return KernelFn([=](KernelContext& c) {
    // This kernel's share of the budget, or more while other devices' workers idle
    // (KernelContext::threads); a small GEMM stays on one thread.
    const int t = !small && c.threads > threads ? c.threads : threads;
    const float* bias = fuse_bias ? c.input(2).as<float>() : nullptr;
    for (int64_t i = 0; i < batch; ++i) {
      float* out = c.output(0).as<float>() + i * c_step;
      struct Bias {
        float* out;
        const float* bias;
        int64_t n;
        bool relu;
      } state{out, bias, n, fuse_relu};
      const GemmEpilogue bias_epilogue{[](const void* context, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        const Bias& e = *static_cast<const Bias*>(context);
        const float* __restrict bias = e.bias;
        for (int64_t r = r0; r < r1; ++r) {
          float* __restrict row = e.out + r * e.n;
          if (e.relu)
            for (int64_t j = c0; j < c1; ++j) { float v = row[j] + bias[j]; row[j] = NanRelu(v); }
          else
            for (int64_t j = c0; j < c1; ++j) row[j] += bias[j];
        }
      }, &state};
      // relu's backward on each block while it is in cache (y is the product's shape).
      struct Mask {
        float* out;
        const float* y;
        int64_t n;
      } mask{out, fuse_relu_grad ? c.input(2).as<float>() + i * c_step : nullptr, n};
      const GemmEpilogue mask_epilogue{[](const void* context, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        const Mask& e = *static_cast<const Mask*>(context);
        for (int64_t r = r0; r < r1; ++r) {
          float* __restrict row = e.out + r * e.n;
          const float* __restrict y = e.y + r * e.n;
          for (int64_t j = c0; j < c1; ++j) { float d = row[j]; row[j] = y[j] > 0.0f ? d : 0.0f; }
        }
      }, &mask};
      AF_RETURN_IF_ERROR(Sgemm(ta, tb, m, n, k, 1.0f, c.input(0).as<float>() + i * a_step,
                               c.input(1).as<float>() + i * b_step, 0.0f, out, t, omp_team,
                               fuse_bias ? &bias_epilogue : fuse_relu_grad ? &mask_epilogue : nullptr));
    }
    sum_columns.template operator()<float>(c);
    return Status::Ok();
  });
}

// Row split of op(a) (rows of out), column split of op(b) (columns of out), the inner dimension
// split on both (partial sums), the batch split, and a partial sum through either operand with
// the other whole (the product is bilinear). The fused bias is split with the columns and is
// partial with partial products (sum of (a_d b_d + bias_d) = ab + bias); a fused relu is not
// linear, so no partial sum then. A fused relu gradient's y is laid out like the output, and
// broadcast with partial products: masking is linear in the product (mask(sum) = sum of masks).
// A fused bias gradient (column sums) is split with the columns, partial with split rows,
// batches or partial products (each device sums its rows), broadcast with a broadcast product.
StatusOr<std::vector<SbpSignature>> MatmulSbp(const SbpContext& ctx) {
  const bool ta = ctx.attrs.GetBoolOr("transpose_a", false), tb = ctx.attrs.GetBoolOr("transpose_b", false);
  const bool fuse_relu_grad = ctx.attrs.GetBoolOr("fuse_relu_grad", false);
  const bool fuse_bias = ctx.inputs.size() == 3 && !fuse_relu_grad, fuse_relu = ctx.attrs.GetBoolOr("fuse_relu", false);
  const Shape &a = ctx.inputs[0].shape, &b = ctx.inputs[1].shape, &o = ctx.outputs[0].shape;
  const int64_t ra = static_cast<int64_t>(a.size()), rb = static_cast<int64_t>(b.size()), ro = static_cast<int64_t>(o.size());
  const int64_t a_m = ta ? ra - 1 : ra - 2, a_k = ta ? ra - 2 : ra - 1, b_k = tb ? rb - 1 : rb - 2, b_n = tb ? rb - 2 : rb - 1;
  const Sbp B = Sbp::Broadcast(), P = Sbp::PartialSum();
  std::vector<SbpSignature> out;
  const bool fuse_bias_grad = ctx.attrs.GetBoolOr("fuse_bias_grad", false);
  auto add = [&](Sbp sa, Sbp sb, Sbp bias, Sbp result) {
    std::vector<Sbp> in = {sa, sb};
    if (fuse_bias) in.push_back(bias);
    if (fuse_relu_grad) in.push_back(result.kind == SbpKind::kPartialSum ? Sbp::Broadcast() : result);
    std::vector<Sbp> results = {result};
    if (fuse_bias_grad)
      results.push_back(result.kind == SbpKind::kBroadcast                         ? Sbp::Broadcast()
                        : result.kind == SbpKind::kSplit && result.axis == ro - 1 ? Sbp::Split(0)
                                                                                   : Sbp::PartialSum());
    out.push_back(MakeSignature(std::move(in), std::move(results)));
  };
  add(B, B, B, B);
  if (ro == 3 && CanSplit(o[0], ctx.parts)) add(ra == 3 ? Sbp::Split(0) : B, rb == 3 ? Sbp::Split(0) : B, B, Sbp::Split(0));
  if (CanSplit(o[ro - 2], ctx.parts)) add(Sbp::Split(a_m), B, B, Sbp::Split(ro - 2));
  if (CanSplit(o[ro - 1], ctx.parts)) add(B, Sbp::Split(b_n), Sbp::Split(0), Sbp::Split(ro - 1));
  if (!fuse_relu && CanSplit(a[a_k], ctx.parts)) add(Sbp::Split(a_k), Sbp::Split(b_k), P, P);
  if (!fuse_relu) {
    add(P, B, P, P);
    add(B, P, P, P);
  }
  return out;
}

// A 2-D operand used by every batch gets the batch-sum of its per-batch gradients.
StatusOr<std::string> SumSharedBatch(GradBuilder& g, const std::string& grad, int input) {
  bool batched_out = g.output_desc(0).shape.size() == 3;
  if (!batched_out || g.input_desc(input).shape.size() == 3) return grad;
  return g.AddOp1("reduce_sum", {grad}, Attrs{{"axis", std::vector<int64_t>{0}}, {"keepdims", false}});
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
    AF_ASSIGN_OR_RETURN(std::string r, SumSharedBatch(g, da.value(), 0));
    g.SetInputGrad(0, r);
  }
  if (g.needs_input_grad(1)) {
    StatusOr<std::string> db = !tb ? (ta ? mm(a, dc, false, false) : mm(a, dc, true, false))
                                   : (ta ? mm(dc, a, true, true) : mm(dc, a, true, false));
    if (!db.ok()) return db.status();
    AF_ASSIGN_OR_RETURN(std::string r, SumSharedBatch(g, db.value(), 1));
    g.SetInputGrad(1, r);
  }
  return Status::Ok();
}

void RegisterBiasAdd(OpRegistry& registry) {
  OpDef def;
  def.type = "bias_add";
  def.input_names = {"x", "bias"};
  def.output_names = {"out"};
  def.infer = [](InferContext& ctx) -> Status {
    const TensorDesc &x = ctx.inputs[0], &b = ctx.inputs[1];
    AF_RETURN_IF_ERROR(ExpectSameDType(x, b, "x", "bias"));
    AF_RETURN_IF_ERROR(ExpectFloat(x, "x"));
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", 1), x.shape.size(), "axis"));
    if (b.shape != Shape{x.shape[axis]})
      return InvalidArgument("bias must have shape (" + std::to_string(x.shape[axis]) + ",) to match x " +
                             ShapeToString(x.shape) + " on axis " + std::to_string(axis) + ", got " + ShapeToString(b.shape));
    ctx.outputs = {x};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t axis = init.attrs.GetIntOr("axis", 1);
    if (axis < 0) axis += static_cast<int64_t>(init.inputs[0].shape.size());
    AxisSplit s = SplitAt(init.inputs[0].shape, axis);
    bool relu = init.attrs.GetBoolOr("fuse_relu", false);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([s, relu](KernelContext& c) {
        const T* __restrict x = c.input(0).as<T>();
        const T* __restrict b = c.input(1).as<T>();
        T* __restrict y = c.output(0).as<T>();
        if (s.inner == 1) {  // bias on the last axis (dense layers): vectorize along channels
          for (int64_t o = 0; o < s.outer; ++o) {
            const T* __restrict xr = x + o * s.channels;
            T* __restrict yr = y + o * s.channels;
            if (relu) for (int64_t ch = 0; ch < s.channels; ++ch) { T v = xr[ch] + b[ch]; yr[ch] = NanRelu(v); }
            else for (int64_t ch = 0; ch < s.channels; ++ch) yr[ch] = xr[ch] + b[ch];
          }
          return Status::Ok();
        }
        for (int64_t o = 0; o < s.outer; ++o)
          for (int64_t ch = 0; ch < s.channels; ++ch) {
            int64_t base = (o * s.channels + ch) * s.inner;
            T bv = b[ch];
            if (relu) for (int64_t i = 0; i < s.inner; ++i) { T v = x[base + i] + bv; y[base + i] = NanRelu(v); }
            else for (int64_t i = 0; i < s.inner; ++i) y[base + i] = x[base + i] + bv;
          }
        return Status::Ok();
      });
    });
  };
  def.grad = [](GradBuilder& g) -> Status {
    // Fused relu: the gradient first goes through relu's (from the output, y > 0 <=> x + b > 0).
    std::string d = g.output_grad(0);
    if (g.attrs().GetBoolOr("fuse_relu", false)) { AF_ASSIGN_OR_RETURN(d, g.AddOp1("relu_grad", {g.output(0), d})); }
    if (g.needs_input_grad(0)) g.SetInputGrad(0, d);
    if (g.needs_input_grad(1)) {
      AF_ASSIGN_OR_RETURN(std::string db, g.AddOp1("bias_add_grad", {d}, Attrs{{"axis", g.attrs().GetIntOr("axis", 1)}}));
      g.SetInputGrad(1, db);
    }
    return Status::Ok();
  };
  // Split anywhere with the bias split alike on `axis`, whole elsewhere; partial x needs a
  // partial bias (each device's part would otherwise add the whole bias), and no fused relu.
  def.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const Shape& x = ctx.inputs[0].shape;
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", 1), x.size(), "axis"));
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i)
      if (CanSplit(x[i], ctx.parts))
        out.push_back(MakeSignature({Sbp::Split(i), i == axis ? Sbp::Split(0) : Sbp::Broadcast()}, {Sbp::Split(i)}));
    if (!ctx.attrs.GetBoolOr("fuse_relu", false)) out.push_back(UniformSignature(2, 1, Sbp::PartialSum()));
    return out;
  };
  def.doc = "out = x + bias broadcast along `axis` (default 1)";
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = "bias_add_grad";
  grad.input_names = {"dy"};
  grad.output_names = {"dbias"};
  grad.infer = [](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", 1), ctx.inputs[0].shape.size(), "axis"));
    ctx.outputs = {TensorDesc{{ctx.inputs[0].shape[axis]}, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  grad.kernel_factories[kCpuDevice] = [](const KernelInit& init) -> StatusOr<KernelFn> {
    int64_t axis = init.attrs.GetIntOr("axis", 1);
    if (axis < 0) axis += static_cast<int64_t>(init.inputs[0].shape.size());
    AxisSplit s = SplitAt(init.inputs[0].shape, axis);
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> {
      return KernelFn([s](KernelContext& c) {
        const T* __restrict dy = c.input(0).as<T>();
        T* __restrict db = c.output(0).as<T>();
        for (int64_t ch = 0; ch < s.channels; ++ch) db[ch] = 0;
        if (s.inner == 1) {
          for (int64_t o = 0; o < s.outer; ++o) {
            const T* __restrict row = dy + o * s.channels;
            for (int64_t ch = 0; ch < s.channels; ++ch) db[ch] += row[ch];
          }
          return Status::Ok();
        }
        for (int64_t o = 0; o < s.outer; ++o)
          for (int64_t ch = 0; ch < s.channels; ++ch) {
            const T* row = dy + (o * s.channels + ch) * s.inner;
            T acc = 0;
            #pragma omp simd reduction(+ : acc)
            for (int64_t i = 0; i < s.inner; ++i) acc += row[i];
            db[ch] += acc;
          }
        return Status::Ok();
      });
    });
  };
  grad.doc = "dbias(C) = dy summed over every axis but `axis`";
  // A split of a summed axis leaves partial sums; a split of the channel axis splits dbias.
  grad.sbp = [](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> {
    const Shape& dy = ctx.inputs[0].shape;
    AF_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx.attrs.GetIntOr("axis", 1), dy.size(), "axis"));
    std::vector<SbpSignature> out = {AllBroadcast(ctx)};
    for (int64_t i = 0; i < static_cast<int64_t>(dy.size()); ++i)
      if (CanSplit(dy[i], ctx.parts))
        out.push_back(MakeSignature({Sbp::Split(i)}, {i == axis ? Sbp::Split(0) : Sbp::PartialSum()}));
    out.push_back(UniformSignature(1, 1, Sbp::PartialSum()));
    return out;
  };
  registry.Register(std::move(grad));
}

}  // namespace

void RegisterMatmulOps(OpRegistry& registry) {
  OpDef def;
  def.type = "matmul";
  def.sizes_own_threads = true;  // MakeMatmul: one thread, two halves, or blocks
  def.input_names = {"a", "b"};
  def.output_names = {"out"};
  def.infer = InferMatmul;
  def.kernel_factories[kCpuDevice] = MakeMatmul;
  def.grad = GradMatmul;
  def.sbp = MatmulSbp;
  def.doc = "out([B,]M,N) = op(a)([B,]M,K) . op(b)([B,]K,N); attrs transpose_a, transpose_b; the fusion passes add "
            "fuse_bias (third input bias (N,), added to every row) and fuse_relu, or fuse_relu_grad (third input y "
            "like out: out kept where y > 0, relu's backward), and fuse_bias_grad (second output dbias (N,): out "
            "summed over all rows, bias_add_grad's floats)";
  registry.Register(std::move(def));
  RegisterBiasAdd(registry);
}

}  // namespace actorflow

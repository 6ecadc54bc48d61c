// Launchers of the CUDA kernels (device type "cuda"): float32, device pointers, enqueued on the
// caller's stream (asynchronous). Each returns the launch's error (cudaSuccess once enqueued).
// Free of project headers so nvcc compiles only the .cu files; the op registration that calls
// them is host C++ (kernels/cuda/*_cuda.cc). Shape letters as in the CPU kernels.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace actorflow::cuda {

// Elementwise family (elementwise_cuda.cu).
enum class Binary : int { kAdd, kSub, kMul, kDiv };
inline constexpr int kMaxRank = 6;
// out[i] = x[.] op y[.] with NumPy broadcasting: `out_dims` (rank <= kMaxRank), and the
// element strides of x and y per output axis (0 where the operand is broadcast along it).
struct BroadcastIndex {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t x_strides[kMaxRank] = {};
  int64_t y_strides[kMaxRank] = {};
};
cudaError_t LaunchBinary(Binary op, const float* x, const float* y, float* out, int64_t n, const BroadcastIndex& index,
                         bool same_shape, cudaStream_t stream);
// out[i] = x[.] broadcast to `out_dims` (x_strides of `index`; y_strides unused).
cudaError_t LaunchBroadcast(const float* x, float* out, int64_t n, const BroadcastIndex& index, cudaStream_t stream);
// out[i] += x[i] (add_n's running sum; out and x distinct).
cudaError_t LaunchAccumulate(const float* x, float* out, int64_t n, cudaStream_t stream);
// reduce_sum_like: out[o] = sum of x over the axes where `like` broadcasts (extent 1 or
// missing). Output o's coordinates run row-major over x's kept axes (`kept_dims`, element strides
// in x `kept_strides`); each output sums, in double, the `summed_dims` positions (strides in x
// `summed_strides`) from its base.
struct SumLikeIndex {
  int kept_rank = 0, summed_rank = 0;
  int64_t kept_dims[kMaxRank] = {}, kept_strides[kMaxRank] = {};
  int64_t summed_dims[kMaxRank] = {}, summed_strides[kMaxRank] = {};
};
cudaError_t LaunchSumLike(const float* x, float* out, int64_t outputs, int64_t summed, const SumLikeIndex& index,
                          cudaStream_t stream);
// out = x * scale + shift (scalar_mul: shift 0; scalar_add: scale 1).
cudaError_t LaunchAffine(const float* x, float* out, int64_t n, float scale, float shift, cudaStream_t stream);
// relu (NaN passes through, as the CPU's), and dx = dy where y > 0 else 0.
cudaError_t LaunchRelu(const float* x, float* out, int64_t n, cudaStream_t stream);
cudaError_t LaunchReluGrad(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t stream);
// x viewed as (outer, channels, inner): out = x + bias[channel], then relu if `relu`; out may be x.
cudaError_t LaunchBiasAdd(const float* x, const float* bias, float* out, int64_t outer, int64_t channels, int64_t inner,
                          bool relu, cudaStream_t stream);
// dbias[channel] = sum over outer and inner of dy (outer, channels, inner).
cudaError_t LaunchBiasAddGrad(const float* dy, float* dbias, int64_t outer, int64_t channels, int64_t inner,
                              cudaStream_t stream);
cudaError_t LaunchFill(float* out, int64_t n, float value, cudaStream_t stream);

// clamp to [low, high] (±inf for an absent bound; NaN stays NaN), and its gradient: dy where x
// lies within the bounds (inclusive or not), else 0.
cudaError_t LaunchClamp(const float* x, float* out, int64_t n, float low, float high, cudaStream_t stream);
cudaError_t LaunchClampGrad(const float* x, const float* dy, float* dx, int64_t n, float low, float high, bool inclusive,
                            cudaStream_t stream);
// Inverted dropout with the CPU kernel's random stream: element i draws splitmix64's (i + 1)-th
// number after `state`, keeps when its top 53 bits are >= `threshold` (mask = scale, else 0),
// out = x * mask.
cudaError_t LaunchDropout(const float* x, float* out, float* mask, int64_t n, uint64_t state, uint64_t threshold, float scale,
                          cudaStream_t stream);

// Windows over (planes, H, W) images (pool_cuda.cu). Gradients are gathers (one thread per
// input element adds its outputs' contributions in the CPU kernels' order): no atomics, the
// same sums as the CPU.
struct PoolWindow {
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0, kh = 1, kw = 1, sh = 1, sw = 1, top = 0, left = 0;
};
// Max (NaN wins, padding never does; an empty window gives -inf) or average over the window's
// valid positions (padding not counted; an empty window gives 0).
cudaError_t LaunchPool(bool max, const float* x, float* y, const PoolWindow& window, cudaStream_t stream);
// dy of each output to the first position (row-major) of its window holding its maximum y.
cudaError_t LaunchMaxPoolGrad(const float* x, const float* y, const float* dy, float* dx, const PoolWindow& window,
                              cudaStream_t stream);
// dy of each output spread evenly over its window's valid positions.
cudaError_t LaunchAvgPoolGrad(const float* dy, float* dx, const PoolWindow& window, cudaStream_t stream);
// PyTorch's adaptive windows: rows [floor(i*H/OH), ceil((i+1)*H/OH)), columns alike.
cudaError_t LaunchAdaptiveAvgPool(const float* x, float* y, const PoolWindow& window, cudaStream_t stream);
cudaError_t LaunchAdaptiveAvgPoolGrad(const float* dy, float* dx, const PoolWindow& window, cudaStream_t stream);
// Zero or reflection padding of (planes, h, w) to (planes, oh, ow), `top` rows and `left`
// columns before; the gradient folds the padded gradient back (reflection adds mirrored cells).
cudaError_t LaunchPad(bool reflect, const float* x, float* y, const PoolWindow& window, cudaStream_t stream);
cudaError_t LaunchPadGrad(bool reflect, const float* dy, float* dx, const PoolWindow& window, cudaStream_t stream);

// Batch normalization over x viewed as (outer, channels, inner) (batch_norm_cuda.cu), the CPU
// kernel's math: statistics accumulated in double, one block per channel, fixed reduction order.
// Training: batch mean and biased variance, moving = momentum * moving + (1 - momentum) * batch
// (unbiased variance), in place; inference: the moving statistics. Both write mean and
// inv_std = 1 / sqrt(var + epsilon), and out = (x - mean) * inv_std * gamma + beta.
cudaError_t LaunchBatchNorm(bool training, const float* x, const float* gamma, const float* beta, float* moving_mean,
                            float* moving_variance, float* out, float* mean, float* inv_std, int64_t outer, int64_t channels,
                            int64_t inner, double epsilon, double momentum, cudaStream_t stream);
// dgamma = sum(dy * xhat), dbeta = sum(dy); dx = gamma * inv_std / M * (M * dy - dbeta - xhat *
// dgamma) in training, gamma * inv_std * dy in inference (M = outer * inner).
cudaError_t LaunchBatchNormGrad(bool training, const float* x, const float* dy, const float* mean, const float* inv_std,
                                const float* gamma, float* dx, float* dgamma, float* dbeta, int64_t outer, int64_t channels,
                                int64_t inner, cudaStream_t stream);

// Reductions and softmax (softmax_cuda.cu).
// x viewed as (outer, reduced, inner): out(outer, inner) = scale * sum over reduced.
cudaError_t LaunchReduceSum(const float* x, float* out, int64_t outer, int64_t reduced, int64_t inner, float scale,
                            cudaStream_t stream);
// Softmax over the last axis of (rows, classes).
cudaError_t LaunchSoftmax(const float* x, float* out, int64_t rows, int64_t classes, cudaStream_t stream);
// loss(N) = -log softmax(logits)[label], prob(N,C) = softmax(logits). A label outside [0, C)
// gives loss NaN and is recorded in *bad_label (device-visible host memory): the first such
// row (row index; -1 when none), read by the caller after the stream's completion.
cudaError_t LaunchSparseSoftmaxCrossEntropy(const void* labels, bool labels64, const float* logits, float* loss, float* prob,
                                            int64_t rows, int64_t classes, int64_t* bad_label, cudaStream_t stream);
// dlogits = (prob - onehot(labels)) * dloss[row].
cudaError_t LaunchSparseSoftmaxCrossEntropyGrad(const void* labels, bool labels64, const float* prob, const float* dloss,
                                                float* dlogits, int64_t rows, int64_t classes, cudaStream_t stream);

// Optimizer updates, in place (optimizer_cuda.cu); lr is a device scalar, the rest as the CPU's.
struct UpdateHyper {
  float weight_decay = 0, grad_scale = 1, beta = 0.9f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  bool decoupled = false;
  // Adam: lr is [lr, c1, c2] and the moments get the bias corrections m*c1, v*c2 (as the CPU's).
  bool corrected = false;
};
cudaError_t LaunchSgd(float* w, const float* g, const float* lr, int64_t n, UpdateHyper h, cudaStream_t stream);
cudaError_t LaunchMomentum(float* w, const float* g, float* m, const float* lr, int64_t n, UpdateHyper h, cudaStream_t stream);
cudaError_t LaunchAdam(float* w, const float* g, float* m, float* v, const float* lr, int64_t n, UpdateHyper h,
                       cudaStream_t stream);

}  // namespace actorflow::cuda

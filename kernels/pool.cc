// max_pool2d / avg_pool2d over NCHW: attrs ksize, strides (int or [h, w]), padding (window.h:
// "SAME", "VALID" or explicit), data_format "NCHW". Padded positions never win a max and are
// not counted by the average (TensorFlow/OneFlow semantics). Backward ops recompute the
// window: max_pool2d_grad (x, y, dy) routes dy to the first maximum, avg_pool2d_grad (dy, x)
// spreads dy evenly over the window's valid positions. Plain loops over (sample, channel)
// planes; large poolings split the planes over the kernel's threads (ForPlanes). The compiler's
// blocked layout (kernels/blocked_layout.h: attrs channel_block, blocked_inputs/outputs) runs
// the same windows over nChw{B}c tensors, a block of channels per vector.
#include <limits>
#include <type_traits>

#include "kernels/blocked_layout.h"
#include "kernels/kernel_util.h"
#include "kernels/parallel_chunks.h"
#include "kernels/pool_avx512.h"
#include "kernels/sbp_util.h"
#include "kernels/window.h"

namespace actorflow {
namespace {

StatusOr<Window2d> ReadPool(const TensorDesc& x, const Attrs& attrs, const std::string& type) {
  AF_RETURN_IF_ERROR(ExpectFloat(x, "x"));
  if (!attrs.Has("ksize")) return InvalidArgument(type + ": missing attribute 'ksize'");
  AF_ASSIGN_OR_RETURN(auto k, ReadPair(attrs, "ksize", 1));
  Attrs a = attrs;
  if (!a.Has("strides")) a.Set("strides", std::vector<int64_t>{k.first, k.second});
  return ReadWindow(x.shape, k.first, k.second, a, type, false);
}

// Visits the valid input positions of output (oh, ow): body(ih, iw).
template <typename Body>
inline void ForWindow(const Window2d& g, int64_t oh, int64_t ow, Body&& body) {
  int64_t h0 = oh * g.sh - g.top, w0 = ow * g.sw - g.left;
  int64_t h_begin = std::max<int64_t>(h0, 0), h_end = std::min(h0 + g.kh, g.h);
  int64_t w_begin = std::max<int64_t>(w0, 0), w_end = std::min(w0 + g.kw, g.w);
  for (int64_t ih = h_begin; ih < h_end; ++ih)
    for (int64_t iw = w_begin; iw < w_end; ++iw) body(ih, iw);
}

// Planes [first, end) of the n * c (sample, channel) planes.
template <typename T, bool kMax>
void PoolForwardLoop(const Window2d& g, const T* x, T* y, int64_t first, int64_t end) {
  for (int64_t nc = first; nc < end; ++nc) {
    const T* xp = x + nc * g.h * g.w;
    T* yp = y + nc * g.oh * g.ow;
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      int64_t h0 = oh * g.sh - g.top;
      int64_t hb = std::max<int64_t>(h0, 0), he = std::min(h0 + g.kh, g.h);
      // 2x2 stride-2 windows fully inside the image (LeNet's pools): a vectorizable row loop.
      int64_t ow_begin = 0;
      if (g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && he - hb == 2) {
        const T* __restrict r0 = xp + hb * g.w - g.left;
        const T* __restrict r1 = r0 + g.w;
        T* __restrict out = yp + oh * g.ow;
        int64_t lo = (g.left + 1) / 2, hi = std::min(g.ow, (g.w + g.left) / 2);  // 2ow-left >= 0, 2ow-left+2 <= w
        for (int64_t ow = lo; ow < hi; ++ow) {
          T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
          if constexpr (kMax) {
            out[ow] = NanMax(NanMax(a, b), NanMax(c, d));
          } else {
            out[ow] = (a + b + c + d) * T(0.25);
          }
        }
        // Edges (padding) through the generic loop below.
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          if (ow == lo && hi > lo) ow = hi;
          if (ow >= g.ow) break;
          int64_t w0 = ow * g.sw - g.left;
          int64_t wb = std::max<int64_t>(w0, 0), we = std::min(w0 + g.kw, g.w);
          T acc = kMax ? -std::numeric_limits<T>::infinity() : T(0);
          for (int64_t ih = hb; ih < he; ++ih)
            for (int64_t iw = wb; iw < we; ++iw) acc = kMax ? NanMax(xp[ih * g.w + iw], acc) : acc + xp[ih * g.w + iw];
          out[ow] = kMax ? acc : acc / static_cast<T>(std::max<int64_t>((he - hb) * (we - wb), 1));
        }
        continue;
      }
      for (int64_t ow = ow_begin; ow < g.ow; ++ow) {
        int64_t w0 = ow * g.sw - g.left;
        int64_t wb = std::max<int64_t>(w0, 0), we = std::min(w0 + g.kw, g.w);
        T acc = kMax ? -std::numeric_limits<T>::infinity() : T(0);
        for (int64_t ih = hb; ih < he; ++ih) {
          const T* row = xp + ih * g.w;
          for (int64_t iw = wb; iw < we; ++iw) acc = kMax ? NanMax(row[iw], acc) : acc + row[iw];
        }
        int64_t count = (he - hb) * (we - wb);
        yp[oh * g.ow + ow] = kMax ? acc : acc / static_cast<T>(std::max<int64_t>(count, 1));
      }
    }
  }
}

// Planes are independent: a large pooling (LeNet's first: 3200 planes of 28x28, ~1 ms forward
// and 2 ms backward on one core) splits its planes into blocks claimed by the kernel helper
// threads (parallel_chunks.h), each plane computed exactly as on one thread. Smaller ones, and
// one-thread kernels, run inline.
constexpr int64_t kParallelPoolElements = int64_t{1} << 17;

int PoolThreads(const KernelInit& init, const Window2d& g) {
  return g.n * g.c * g.h * g.w >= kParallelPoolElements ? std::max(1, init.num_threads) : 1;
}

// body(first_plane, end_plane) over all n * c planes, in blocks on up to `threads` threads
// (the act's lent threads when more).
template <typename Body>
void ForPlanes(int64_t planes, int threads, const KernelContext& c, Body&& body) {
  if (threads > 1 && c.threads > threads) threads = c.threads;
  if (threads <= 1) {
    body(int64_t{0}, planes);
    return;
  }
  const int64_t blocks = std::min<int64_t>(planes, 4 * threads);
  auto run = [&](int block) { body(planes * block / blocks, planes * (block + 1) / blocks); };
  ParallelChunks(static_cast<int>(blocks), threads, run);
}

template <typename T>
KernelFn PoolForward(Window2d g, bool max, int threads) {
  return [g, max, threads](KernelContext& c) {
    const T* x = c.input(0).as<T>();
    T* y = c.output(0).as<T>();
    ForPlanes(g.n * g.c, threads, c, [&](int64_t first, int64_t end) {
      if (max) PoolForwardLoop<T, true>(g, x, y, first, end);
      else PoolForwardLoop<T, false>(g, x, y, first, end);
    });
    return Status::Ok();
  };
}

// Generic backward of one output position (any window, padding, overlap): accumulates into dx.
// relu_mask (max only): the gradient reaching the maximum passes only where it is > 0.
template <typename T, bool kMax>
inline void PoolBackwardAt(const Window2d& g, const T* xp, T y, T dy, T* dxp, int64_t oh, int64_t ow, bool relu_mask) {
  if constexpr (kMax) {
    bool routed = false;
    ForWindow(g, oh, ow, [&](int64_t ih, int64_t iw) {
      if (!routed && NanSame(xp[ih * g.w + iw], y)) {
        if (!relu_mask || xp[ih * g.w + iw] > T(0)) dxp[ih * g.w + iw] += dy;
        routed = true;
      }
    });
  } else {
    int64_t count = 0;
    ForWindow(g, oh, ow, [&](int64_t, int64_t) { ++count; });
    T share = dy / static_cast<T>(std::max<int64_t>(count, 1));
    ForWindow(g, oh, ow, [&](int64_t ih, int64_t iw) { dxp[ih * g.w + iw] += share; });
  }
}

// max: inputs (x, y, dy); avg: inputs (dy, x). Output dx. relu_mask (max only, the compiler's
// fusion of the relu_grad that follows when x is a relu's output): dx = relu_grad(x, dx), i.e.
// the routed gradient is kept only where x > 0 (0 where x is 0 or NaN, as relu_grad does).
template <typename T, bool kMax>
void PoolBackwardLoop(const Window2d& g, const T* x, const T* y, const T* dy, T* dx, bool relu_mask, int64_t first,
                      int64_t end) {
  // 2x2 stride-2 windows tile the image without overlap: interior outputs write their four
  // positions directly (max: dy to the first maximum in row-major order, 0 elsewhere).
  bool fast = g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2;
  int64_t lo = (g.left + 1) / 2, hi = std::min(g.ow, (g.w + g.left) / 2);
  // When those windows cover every input position (even sizes, no padding: LeNet's pools), the
  // fast path writes all of dx and zeroing it first would be a whole pass over dx for nothing.
  const bool covers_all = fast && g.top == 0 && g.left == 0 && g.oh * 2 == g.h && g.ow * 2 == g.w;
  if (!covers_all)
    for (int64_t i = first * g.h * g.w; i < end * g.h * g.w; ++i) dx[i] = 0;
  for (int64_t nc = first; nc < end; ++nc) {
    const T* xp = x + nc * g.h * g.w;
    T* dxp = dx + nc * g.h * g.w;
    const T* yp = kMax ? y + nc * g.oh * g.ow : nullptr;
    const T* dyp = dy + nc * g.oh * g.ow;
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      int64_t h0 = oh * 2 - g.top;
      bool fast_row = fast && h0 >= 0 && h0 + 2 <= g.h && hi > lo;
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        if (fast_row && ow == lo) {
          const T* r0 = xp + h0 * g.w - g.left;
          const T* r1 = r0 + g.w;
          T* d0 = dxp + h0 * g.w - g.left;
          T* d1 = d0 + g.w;
          for (int64_t q = lo; q < hi; ++q) {
            T d = dyp[oh * g.ow + q];
            if constexpr (kMax) {
              T a = r0[2 * q], b = r0[2 * q + 1], c = r1[2 * q], e = r1[2 * q + 1];
              int best = 0;
              T m = a;
              if (NanBeats(b, m)) m = b, best = 1;
              if (NanBeats(c, m)) m = c, best = 2;
              if (NanBeats(e, m)) m = e, best = 3;
              if (relu_mask && !(m > T(0))) d = T(0);
              d0[2 * q] = best == 0 ? d : T(0);
              d0[2 * q + 1] = best == 1 ? d : T(0);
              d1[2 * q] = best == 2 ? d : T(0);
              d1[2 * q + 1] = best == 3 ? d : T(0);
            } else {
              T share = d * T(0.25);
              d0[2 * q] = share, d0[2 * q + 1] = share, d1[2 * q] = share, d1[2 * q + 1] = share;
            }
          }
          ow = hi - 1;
          continue;
        }
        PoolBackwardAt<T, kMax>(g, xp, kMax ? yp[oh * g.ow + ow] : T(0), dyp[oh * g.ow + ow], dxp, oh, ow, relu_mask);
      }
    }
  }
}

template <typename T>
KernelFn PoolBackward(Window2d g, bool max, bool relu_mask, int threads) {
  if (max)
    return [g, relu_mask, threads](KernelContext& c) {
      const T *x = c.input(0).as<T>(), *y = c.input(1).as<T>(), *dy = c.input(2).as<T>();
      T* dx = c.output(0).as<T>();
      ForPlanes(g.n * g.c, threads, c,
                [&](int64_t first, int64_t end) { PoolBackwardLoop<T, true>(g, x, y, dy, dx, relu_mask, first, end); });
      return Status::Ok();
    };
  return [g, threads](KernelContext& c) {
    const T *dy = c.input(0).as<T>(), *x = c.input(1).as<T>();
    T* dx = c.output(0).as<T>();
    ForPlanes(g.n * g.c, threads, c,
              [&](int64_t first, int64_t end) { PoolBackwardLoop<T, false>(g, x, nullptr, dy, dx, false, first, end); });
    return Status::Ok();
  };
}

// Blocked layout (kernels/blocked_layout.h): the planes are (sample, channel block) pairs of
// H * W * kBlock values and the innermost loops run over a block's kBlock channels, one vector,
// each lane computing what the plain loops compute for its channel (max: the first maximum in
// row-major window order, the first NaN; average: the valid positions' sum over their count).
// x (forward) and x, dx (backward) are blocked; out (forward) and dy (backward) may be either.
template <typename T, int kBlock, bool kMax>
void PoolForwardBlockedLoop(const Window2d& g, const T* x, T* y, bool y_blocked, int64_t first, int64_t end) {
  const int64_t blocks = g.c / kBlock;
  // Unpadded 2x2 stride-2 windows (LeNet's pools): the rows and columns of windows inside the
  // plane as AVX-512 vectors (pool_avx512.h), the rest (odd edges) below.
  int64_t fast_rows = 0, fast_cols = 0;
  if constexpr (kBlock == 16 && std::is_same_v<T, float>)
    if (g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.top == 0 && g.left == 0 && CpuHasAvx512())
      fast_rows = std::min(g.oh, g.h / 2), fast_cols = std::min(g.ow, g.w / 2);
  for (int64_t plane = first; plane < end; ++plane) {
    const T* xp = x + plane * g.h * g.w * kBlock;
    const int64_t n = plane / blocks, channel = plane % blocks * kBlock;
    if constexpr (kBlock == 16 && std::is_same_v<T, float>)
      if (fast_rows > 0 && fast_cols > 0)
        Pool2x2Block16Forward(kMax, xp, g.w, fast_rows, fast_cols, g.ow, y_blocked ? y + plane * g.oh * g.ow * kBlock : nullptr,
                              y_blocked ? nullptr : y + (n * g.c + channel) * g.oh * g.ow, g.oh * g.ow);
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const int64_t h0 = oh * g.sh - g.top;
      const int64_t hb = std::max<int64_t>(h0, 0), he = std::min(h0 + g.kh, g.h);
      for (int64_t ow = oh < fast_rows ? fast_cols : 0; ow < g.ow; ++ow) {
        const int64_t w0 = ow * g.sw - g.left;
        const int64_t wb = std::max<int64_t>(w0, 0), we = std::min(w0 + g.kw, g.w);
        T acc[kBlock];
        for (int l = 0; l < kBlock; ++l) acc[l] = kMax ? -std::numeric_limits<T>::infinity() : T(0);
        for (int64_t ih = hb; ih < he; ++ih)
          for (int64_t iw = wb; iw < we; ++iw) {
            const T* __restrict v = xp + (ih * g.w + iw) * kBlock;
            for (int l = 0; l < kBlock; ++l) acc[l] = kMax ? NanMax(v[l], acc[l]) : acc[l] + v[l];
          }
        if (!kMax) {
          const T count = static_cast<T>(std::max<int64_t>((he - hb) * (we - wb), 1));
          for (int l = 0; l < kBlock; ++l) acc[l] /= count;
        }
        if (y_blocked) {
          T* __restrict out = y + ((plane * g.oh + oh) * g.ow + ow) * kBlock;
          for (int l = 0; l < kBlock; ++l) out[l] = acc[l];
        } else {
          for (int l = 0; l < kBlock; ++l) y[((n * g.c + channel + l) * g.oh + oh) * g.ow + ow] = acc[l];
        }
      }
    }
  }
}

template <typename T, int kBlock, bool kMax>
void PoolBackwardBlockedLoop(const Window2d& g, const T* x, const T* dy, bool dy_blocked, T* dx, bool relu_mask,
                             int64_t first, int64_t end) {
  const int64_t blocks = g.c / kBlock, plane_in = g.h * g.w * kBlock;
  // 2x2 stride-2 windows tiling the whole image (LeNet's pools) write every position of dx
  // once: no zeroing, and each window's four vectors are written with selects.
  const bool covers_all = g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.top == 0 && g.left == 0 &&
                          g.oh * 2 == g.h && g.ow * 2 == g.w;
  if (!covers_all) std::fill(dx + first * plane_in, dx + end * plane_in, T(0));
  bool vectors = false;  // the AVX-512 loop of pool_avx512.h
  if constexpr (kBlock == 16 && std::is_same_v<T, float>) vectors = covers_all && CpuHasAvx512();
  for (int64_t plane = first; plane < end; ++plane) {
    const T* xp = x + plane * plane_in;
    T* dxp = dx + plane * plane_in;
    const int64_t n = plane / blocks, channel = plane % blocks * kBlock;
    if constexpr (kBlock == 16 && std::is_same_v<T, float>)
      if (vectors) {
        Pool2x2Block16Backward(kMax, relu_mask, xp, g.oh, g.ow, dy_blocked ? dy + plane * g.oh * g.ow * kBlock : nullptr,
                               dy_blocked ? nullptr : dy + (n * g.c + channel) * g.oh * g.ow, g.oh * g.ow, dxp);
        continue;
      }
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        T d[kBlock];
        if (dy_blocked) {
          const T* __restrict dyp = dy + ((plane * g.oh + oh) * g.ow + ow) * kBlock;
          for (int l = 0; l < kBlock; ++l) d[l] = dyp[l];
        } else {
          for (int l = 0; l < kBlock; ++l) d[l] = dy[((n * g.c + channel + l) * g.oh + oh) * g.ow + ow];
        }
        if (covers_all) {
          const int64_t at = (2 * oh * g.w + 2 * ow) * kBlock, down = g.w * kBlock;
          const T* __restrict r0 = xp + at;
          const T* __restrict r1 = r0 + down;
          T* __restrict d0 = dxp + at;
          T* __restrict d1 = d0 + down;
          for (int l = 0; l < kBlock; ++l) {
            if constexpr (kMax) {
              const T a = r0[l], b = r0[kBlock + l], c = r1[l], e = r1[kBlock + l];
              int best = 0;
              T m = a;
              if (NanBeats(b, m)) m = b, best = 1;
              if (NanBeats(c, m)) m = c, best = 2;
              if (NanBeats(e, m)) m = e, best = 3;
              const T v = relu_mask && !(m > T(0)) ? T(0) : d[l];
              d0[l] = best == 0 ? v : T(0);
              d0[kBlock + l] = best == 1 ? v : T(0);
              d1[l] = best == 2 ? v : T(0);
              d1[kBlock + l] = best == 3 ? v : T(0);
            } else {
              const T share = d[l] * T(0.25);
              d0[l] = share, d0[kBlock + l] = share, d1[l] = share, d1[kBlock + l] = share;
            }
          }
          continue;
        }
        const int64_t h0 = oh * g.sh - g.top, w0 = ow * g.sw - g.left;
        const int64_t hb = std::max<int64_t>(h0, 0), he = std::min(h0 + g.kh, g.h);
        const int64_t wb = std::max<int64_t>(w0, 0), we = std::min(w0 + g.kw, g.w);
        if (he <= hb || we <= wb) continue;
        if constexpr (kMax) {
          for (int l = 0; l < kBlock; ++l) {
            int64_t best = hb * g.w + wb;
            T m = xp[best * kBlock + l];
            for (int64_t ih = hb; ih < he; ++ih)
              for (int64_t iw = wb; iw < we; ++iw) {
                const T v = xp[(ih * g.w + iw) * kBlock + l];
                if (NanBeats(v, m)) m = v, best = ih * g.w + iw;
              }
            if (!relu_mask || m > T(0)) dxp[best * kBlock + l] += d[l];
          }
        } else {
          const T count = static_cast<T>((he - hb) * (we - wb));
          for (int l = 0; l < kBlock; ++l) d[l] /= count;
          for (int64_t ih = hb; ih < he; ++ih)
            for (int64_t iw = wb; iw < we; ++iw) {
              T* __restrict out = dxp + (ih * g.w + iw) * kBlock;
              for (int l = 0; l < kBlock; ++l) out[l] += d[l];
            }
        }
      }
  }
}

template <typename T, int kBlock>
KernelFn PoolForwardBlocked(Window2d g, bool max, bool y_blocked, int threads) {
  return [g, max, y_blocked, threads](KernelContext& c) {
    const T* x = c.input(0).as<T>();
    T* y = c.output(0).as<T>();
    ForPlanes(g.n * g.c / kBlock, threads, c, [&](int64_t first, int64_t end) {
      if (max) PoolForwardBlockedLoop<T, kBlock, true>(g, x, y, y_blocked, first, end);
      else PoolForwardBlockedLoop<T, kBlock, false>(g, x, y, y_blocked, first, end);
    });
    return Status::Ok();
  };
}

// max: inputs (x, y, dy), y unread (the maximum is found again in x, as the plain 2x2 path
// does); avg: inputs (dy, x), x unread.
template <typename T, int kBlock>
KernelFn PoolBackwardBlocked(Window2d g, bool max, bool relu_mask, bool dy_blocked, int threads) {
  return [g, max, relu_mask, dy_blocked, threads](KernelContext& c) {
    const T* x = max ? c.input(0).as<T>() : nullptr;
    const T* dy = c.input(max ? 2 : 0).as<T>();
    T* dx = c.output(0).as<T>();
    ForPlanes(g.n * g.c / kBlock, threads, c, [&](int64_t first, int64_t end) {
      if (max) PoolBackwardBlockedLoop<T, kBlock, true>(g, x, dy, dy_blocked, dx, relu_mask, first, end);
      else PoolBackwardBlockedLoop<T, kBlock, false>(g, x, dy, dy_blocked, dx, false, first, end);
    });
    return Status::Ok();
  };
}

// Windows run within one (sample, channel) plane: S(0) and S(1) on every tensor. Average
// pooling and both backward ops are linear in their data input (x, dy: `linear_input`, -1 for
// max pooling), the others whole.
std::vector<SbpSignature> PlaneSbp(const SbpContext& ctx, int linear_input) {
  const Shape& x = ctx.inputs[0].shape;
  std::vector<SbpSignature> out = {AllBroadcast(ctx)};
  for (int64_t axis : {0, 1})
    if (CanSplit(x[axis], ctx.parts)) out.push_back(UniformSignature(ctx.inputs.size(), 1, Sbp::Split(axis)));
  if (linear_input >= 0) {
    SbpSignature partial = AllBroadcast(ctx);
    partial.inputs[linear_input] = partial.outputs[0] = Sbp::PartialSum();
    out.push_back(partial);
  }
  return out;
}

void RegisterPool(OpRegistry& registry, const std::string& type, bool max) {
  OpDef def;
  def.type = type;
  def.input_names = {"x"};
  def.output_names = {"out"};
  def.infer = [type](InferContext& ctx) -> Status {
    AF_ASSIGN_OR_RETURN(Window2d g, ReadPool(ctx.inputs[0], ctx.attrs, type));
    ctx.outputs = {TensorDesc{{g.n, g.c, g.oh, g.ow}, ctx.inputs[0].dtype}};
    return Status::Ok();
  };
  def.kernel_factories[kCpuDevice] = [type, max](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(Window2d g, ReadPool(init.inputs[0], init.attrs, type));
    const int threads = PoolThreads(init, g);
    AF_ASSIGN_OR_RETURN(BlockedLayout layout, ReadBlockedLayout(type, init.attrs, init.inputs, init.outputs, {0}, {0}));
    if (layout.output(0) && !layout.input(0))
      return InvalidArgument(type + ": a blocked output needs a blocked input x (blocked_inputs)");
    if (layout.input(0)) {
      if (layout.block == 8) return PoolForwardBlocked<float, 8>(g, max, layout.output(0), threads);
      return PoolForwardBlocked<float, 16>(g, max, layout.output(0), threads);
    }
    return DispatchFloat(init.inputs[0].dtype, [&]<typename T>() -> StatusOr<KernelFn> { return PoolForward<T>(g, max, threads); });
  };
  def.grad = [type, max](GradBuilder& g) -> Status {
    std::vector<std::string> in = max ? std::vector<std::string>{g.input(0), g.output(0), g.output_grad(0)}
                                      : std::vector<std::string>{g.output_grad(0), g.input(0)};
    AF_ASSIGN_OR_RETURN(std::string dx, g.AddOp1(type + "_grad", in, g.attrs()));
    g.SetInputGrad(0, dx);
    return Status::Ok();
  };
  def.sbp = [max](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return PlaneSbp(ctx, max ? -1 : 0); };
  def.doc = type + ": out(N,C,OH,OW) over ksize windows of x(N,C,H,W); attrs ksize, strides, padding, data_format";
  registry.Register(std::move(def));

  OpDef grad;
  grad.type = type + "_grad";
  grad.input_names = max ? std::vector<std::string>{"x", "y", "dy"} : std::vector<std::string>{"dy", "x"};
  grad.output_names = {"dx"};
  grad.infer = [max](InferContext& ctx) -> Status {
    ctx.outputs = {ctx.inputs[max ? 0 : 1]};
    return Status::Ok();
  };
  grad.kernel_factories[kCpuDevice] = [type, max](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_ASSIGN_OR_RETURN(Window2d g, ReadPool(init.inputs[max ? 0 : 1], init.attrs, type));
    const bool relu_mask = init.attrs.GetBoolOr("relu_mask", false);
    if (relu_mask && !max) return InvalidArgument(type + "_grad: relu_mask applies to max pooling only");
    const int threads = PoolThreads(init, g);
    // max (x, y, dy) -> dx: x and dx share a layout, and y (unread by the blocked loop) may be
    // listed only with them; avg (dy, x) -> dx: x is unread. dy may be either beside a blocked dx.
    const int dy_slot = max ? 2 : 0;
    AF_ASSIGN_OR_RETURN(BlockedLayout layout, ReadBlockedLayout(type + "_grad", init.attrs, init.inputs, init.outputs,
                                                                max ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1}, {0}));
    if (max && layout.input(0) != layout.output(0))
      return InvalidArgument(type + "_grad: x and dx must be both blocked or both plain (blocked_inputs, blocked_outputs)");
    if ((max && layout.input(1) && !layout.input(0)) || (layout.input(dy_slot) && !layout.output(0)))
      return InvalidArgument(type + "_grad: a blocked " + (layout.input(dy_slot) ? "dy" : "y") +
                             " needs a blocked dx (blocked_outputs)");
    if (layout.output(0)) {
      if (layout.block == 8) return PoolBackwardBlocked<float, 8>(g, max, relu_mask, layout.input(dy_slot), threads);
      return PoolBackwardBlocked<float, 16>(g, max, relu_mask, layout.input(dy_slot), threads);
    }
    return DispatchFloat(init.inputs[0].dtype,
                         [&]<typename T>() -> StatusOr<KernelFn> { return PoolBackward<T>(g, max, relu_mask, threads); });
  };
  grad.doc = "gradient of " + type + " (same attrs)" +
             (max ? std::string("; attr relu_mask (the compiler's fusion of a following relu_grad(x, dx)): dx kept "
                                "only where x > 0")
                  : std::string());
  // Inputs (x, y, dy) for max, (dy, x) for avg: linear in dy.
  grad.sbp = [max](const SbpContext& ctx) -> StatusOr<std::vector<SbpSignature>> { return PlaneSbp(ctx, max ? 2 : 0); };
  registry.Register(std::move(grad));
}

}  // namespace

void RegisterPoolOps(OpRegistry& registry) {
  RegisterPool(registry, "max_pool2d", true);
  RegisterPool(registry, "avg_pool2d", false);
}

}  // namespace actorflow

// Broadcasting helpers shared by elementwise, reduce and shape ops (NumPy rules: align
// trailing dimensions; a dimension of 1 stretches). Plain functions, no templates.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"

namespace actorflow {

inline StatusOr<Shape> BroadcastShape(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return InvalidArgument("shapes " + ShapeToString(a) + " and " + ShapeToString(b) +
                             " cannot be broadcast together (dimension " + std::to_string(i) + ": " + std::to_string(da) +
                             " vs " + std::to_string(db) + ")");
    out[i] = std::max(da, db);
  }
  return out;
}

// Element strides of `in` seen through the broadcast shape `out` (0 on broadcast dims).
inline std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = 0; i < in.size(); ++i) {
    size_t d = in.size() - 1 - i, o = out.size() - 1 - i;
    strides[o] = in[d] == 1 ? 0 : stride;
    stride *= in[d];
  }
  return strides;
}

// Walks a row-major index space `dims` with two stride sets, innermost dimension as a
// contiguous run: body(offset_a, offset_b, run_start, run_length, stride_a_inner, stride_b_inner).
// Dimensions are merged where both stride sets allow it, so common cases become one long run.
// Allocation-free: ranks up to kMaxLoopRank (checked by MakeLoop's caller at kernel build time).
constexpr int kMaxLoopRank = 8;
struct StridedLoop {
  int rank = 0;
  int64_t dims[kMaxLoopRank] = {};
  int64_t stride_a[kMaxLoopRank] = {};
  int64_t stride_b[kMaxLoopRank] = {};
};

inline StatusOr<StridedLoop> MakeLoop(const Shape& dims, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb) {
  StridedLoop loop;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    int r = loop.rank;
    // Merge with the previous dimension when both are contiguous continuations.
    if (r > 0 && loop.stride_a[r - 1] == sa[i] * dims[i] && loop.stride_b[r - 1] == sb[i] * dims[i]) {
      loop.dims[r - 1] *= dims[i];
      loop.stride_a[r - 1] = sa[i];
      loop.stride_b[r - 1] = sb[i];
      continue;
    }
    if (r == kMaxLoopRank) return InvalidArgument("tensors of rank above 8 after merging dimensions are not supported");
    loop.dims[r] = dims[i];
    loop.stride_a[r] = sa[i];
    loop.stride_b[r] = sb[i];
    ++loop.rank;
  }
  if (loop.rank == 0) {
    loop.rank = 1;
    loop.dims[0] = 1;
  }
  return loop;
}

template <typename Body>
inline void RunLoop(const StridedLoop& loop, Body&& body) {
  int r = loop.rank;
  int64_t idx[kMaxLoopRank] = {};
  int64_t inner = loop.dims[r - 1], total = 1;
  for (int d = 0; d < r; ++d) total *= loop.dims[d];
  int64_t oa = 0, ob = 0;
  for (int64_t start = 0; start < total; start += inner) {
    body(oa, ob, start, inner, loop.stride_a[r - 1], loop.stride_b[r - 1]);
    for (int d = r - 2; d >= 0; --d) {
      oa += loop.stride_a[d];
      ob += loop.stride_b[d];
      if (++idx[d] < loop.dims[d]) break;
      oa -= loop.stride_a[d] * loop.dims[d];
      ob -= loop.stride_b[d] * loop.dims[d];
      idx[d] = 0;
    }
  }
}

}  // namespace actorflow

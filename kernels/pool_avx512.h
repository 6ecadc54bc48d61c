// 2x2 stride-2 pooling windows over one nChw16c block plane (kernels/blocked_layout.h) with
// AVX-512: one vector per window position, the 16 channels of the block in its lanes. The same
// results as the blocked loops in pool.cc (max: NaN wins, the first maximum in row-major window
// order takes the gradient; average: ((a + b) + c + d) * 0.25). Callers check
// CpuHasAvx512(); the build's -march may lack it (this file is compiled for it alone).
#pragma once

#include <cstdint>

namespace actorflow {

bool CpuHasAvx512();

// Outputs (oh, ow) for oh < rows, ow < cols of a plane of `width` input columns whose windows
// start at (2 oh, 2 ow) inside it. y_blocked: the output block plane (out_cols per row), or null:
// then y_plain points at output (0, 0) of the block's first channel, lane l at l * plane_stride.
void Pool2x2Block16Forward(bool max, const float* x, int64_t width, int64_t rows, int64_t cols, int64_t out_cols,
                           float* y_blocked, float* y_plain, int64_t plane_stride);

// The gradient of those windows when they tile the whole plane (2 rows x 2 cols of input per
// output): writes every element of dx's block plane. dy_blocked as y_blocked above, or dy_plain
// (lane l at l * plane_stride). relu_mask: the gradient passes only where the maximum is > 0.
void Pool2x2Block16Backward(bool max, bool relu_mask, const float* x, int64_t rows, int64_t cols, const float* dy_blocked,
                            const float* dy_plain, int64_t plane_stride, float* dx);

}  // namespace actorflow

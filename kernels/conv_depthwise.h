// dfilter(C,1,KH,KW) of a depthwise convolution (NCHW, one filter per channel, float32), as
// direct loops: dfilter[c,kh,kw] = sum over n, oh, ow of dy[n,c,oh,ow] * x[n,c,oh*sh-top+kh*dh,
// ow*sw-left+kw*dw]. For the planes where oneDNN 2.6 has no depthwise backward-weights kernel
// and runs one GEMM per group (MobileNetV2's 1x1 and 2x2 planes at batch 64: 5-12 ms of CPU
// each, against 0.1-0.3 ms here). Such planes are small, so the innermost loop runs over the
// channels (contiguous for 1x1 planes), each thread over its own block of them. The kernel's
// inputs are (dy, x, ...), its output dfilter; conv_kernel.cc picks it (IsDepthwiseChannelsFirst).
#pragma once

#include "kernels/op_registry.h"
#include "kernels/window.h"

namespace actorflow {

KernelFn MakeDepthwiseFilterGrad(const Window2d& window, int threads);

}  // namespace actorflow

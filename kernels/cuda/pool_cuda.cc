// "cuda" factories of the window ops over NCHW images, over the launchers of pool_cuda.cu:
// max_pool2d / avg_pool2d (+ _grad), adaptive_avg_pool2d (+ _grad), zero_pad2d /
// reflection_pad2d (+ _grad). Own kernels rather than cuDNN's pooling: they follow the CPU
// kernels exactly, including "SAME" padding with its odd pixel at the bottom/right (cuDNN pads
// symmetrically), NaN winning a max, and the gradient going to the first maximum of a window.
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/kernel_util.h"
#include "kernels/window.h"

namespace actorflow::cuda {
namespace {

void Add(OpRegistry& registry, const std::string& type, KernelFactory factory) {
  Status added = registry.AddKernelFactory(type, kCudaDevice, std::move(factory));
  if (!added.ok()) throw std::logic_error(added.message());
}

// The pool's window over x as the CPU kernel reads it (kernels/pool.cc): ksize, strides
// (default ksize), padding, NCHW.
StatusOr<PoolWindow> ReadPoolWindow(const std::string& type, const TensorDesc& x, const Attrs& attrs) {
  if (!attrs.Has("ksize")) return InvalidArgument(type + ": missing attribute 'ksize'");
  AF_ASSIGN_OR_RETURN(auto k, ReadPair(attrs, "ksize", 1));
  Attrs with_strides = attrs;
  if (!with_strides.Has("strides")) with_strides.Set("strides", std::vector<int64_t>{k.first, k.second});
  AF_ASSIGN_OR_RETURN(Window2d g, ReadWindow(x.shape, k.first, k.second, with_strides, type, false));
  PoolWindow w;
  w.planes = g.n * g.c, w.h = g.h, w.w = g.w, w.oh = g.oh, w.ow = g.ow;
  w.kh = g.kh, w.kw = g.kw, w.sh = g.sh, w.sw = g.sw, w.top = g.top, w.left = g.left;
  return w;
}

// Planes and sizes of a (N, C, H, W) input and (N, C, OH, OW) output.
StatusOr<PoolWindow> ImagePair(const std::string& type, const TensorDesc& in, const TensorDesc& out) {
  if (in.shape.size() != 4 || out.shape.size() != 4)
    return InvalidArgument(type + " on cuda: expected NCHW tensors, got " + ShapeToString(in.shape) + " and " +
                           ShapeToString(out.shape));
  PoolWindow w;
  w.planes = in.shape[0] * in.shape[1], w.h = in.shape[2], w.w = in.shape[3], w.oh = out.shape[2], w.ow = out.shape[3];
  return w;
}

KernelFactory PoolFactory(const std::string& type, bool max) {
  return [type, max](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32(type, init.inputs, "input"));
    AF_ASSIGN_OR_RETURN(PoolWindow w, ReadPoolWindow(type, init.inputs.at(0), init.attrs));
    return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchPool(max, c.input(0).as<float>(), c.output(0).as<float>(), w, stream);
    });
  };
}

// max_pool2d_grad (x, y, dy) -> dx; avg_pool2d_grad (dy, x) -> dx.
KernelFactory PoolGradFactory(const std::string& type, bool max) {
  return [type, max](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32(type, init.inputs, "input"));
    AF_ASSIGN_OR_RETURN(PoolWindow w, ReadPoolWindow(type, init.inputs.at(max ? 0 : 1), init.attrs));
    if (max)
      return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
        return LaunchMaxPoolGrad(c.input(0).as<float>(), c.input(1).as<float>(), c.input(2).as<float>(), c.output(0).as<float>(),
                                 w, stream);
      });
    return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchAvgPoolGrad(c.input(0).as<float>(), c.output(0).as<float>(), w, stream);
    });
  };
}

// attr padding as kernels/pad.cc reads it: an int (all sides) or [left, right, top, bottom].
StatusOr<PoolWindow> ReadPadding(const std::string& type, const TensorDesc& in, const TensorDesc& out, const Attrs& attrs) {
  AF_ASSIGN_OR_RETURN(PoolWindow w, ImagePair(type, in, out));
  AF_ASSIGN_OR_RETURN(std::vector<int64_t> p, attrs.GetInts("padding"));
  if (p.size() != 1 && p.size() != 4)
    return InvalidArgument(type + ": padding must be an int or [left, right, top, bottom], got " + ShapeToString(p));
  w.left = p[0];
  w.top = p.size() == 1 ? p[0] : p[2];
  return w;
}

KernelFactory PadFactory(const std::string& type, bool reflect, bool grad) {
  return [type, reflect, grad](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32(type, init.inputs, "input"));
    // Forward: x -> out; gradient: (dy, x) -> dx, dy being the padded shape.
    const TensorDesc& in = grad ? init.inputs.at(1) : init.inputs.at(0);
    const TensorDesc& padded = grad ? init.inputs.at(0) : init.outputs.at(0);
    AF_ASSIGN_OR_RETURN(PoolWindow w, ReadPadding(type, in, padded, init.attrs));
    if (grad)
      return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
        return LaunchPadGrad(reflect, c.input(0).as<float>(), c.output(0).as<float>(), w, stream);
      });
    return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchPad(reflect, c.input(0).as<float>(), c.output(0).as<float>(), w, stream);
    });
  };
}

}  // namespace

void RegisterPoolCudaKernels(OpRegistry& registry) {
  Add(registry, "max_pool2d", PoolFactory("max_pool2d", true));
  Add(registry, "avg_pool2d", PoolFactory("avg_pool2d", false));
  Add(registry, "max_pool2d_grad", PoolGradFactory("max_pool2d_grad", true));
  Add(registry, "avg_pool2d_grad", PoolGradFactory("avg_pool2d_grad", false));
  Add(registry, "adaptive_avg_pool2d", [](const KernelInit& init) -> StatusOr<KernelFn> {
    const std::string type = "adaptive_avg_pool2d";
    AF_RETURN_IF_ERROR(ExpectFloat32(type, init.inputs, "input"));
    AF_ASSIGN_OR_RETURN(PoolWindow w, ImagePair(type, init.inputs.at(0), init.outputs.at(0)));
    return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchAdaptiveAvgPool(c.input(0).as<float>(), c.output(0).as<float>(), w, stream);
    });
  });
  // (dy, x) -> dx.
  Add(registry, "adaptive_avg_pool2d_grad", [](const KernelInit& init) -> StatusOr<KernelFn> {
    const std::string type = "adaptive_avg_pool2d_grad";
    AF_RETURN_IF_ERROR(ExpectFloat32(type, init.inputs, "input"));
    AF_ASSIGN_OR_RETURN(PoolWindow w, ImagePair(type, init.inputs.at(1), init.inputs.at(0)));
    return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchAdaptiveAvgPoolGrad(c.input(0).as<float>(), c.output(0).as<float>(), w, stream);
    });
  });
  for (bool reflect : {false, true}) {
    const std::string type = reflect ? "reflection_pad2d" : "zero_pad2d";
    Add(registry, type, PadFactory(type, reflect, false));
    Add(registry, type + "_grad", PadFactory(type + "_grad", reflect, true));
  }
}

}  // namespace actorflow::cuda

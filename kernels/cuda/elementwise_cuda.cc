// "cuda" factories of the elementwise (add_n, broadcast_like, reduce_sum_like too), activation,
// bias, constant, clamp, dropout and layout-copy ops, over the launchers of elementwise_cuda.cu.
// float32 only so far (others: Unimplemented naming the op).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/kernel_util.h"

namespace actorflow::cuda {
namespace {

void Add(OpRegistry& registry, const std::string& type, KernelFactory factory) {
  Status added = registry.AddKernelFactory(type, kCudaDevice, std::move(factory));
  if (!added.ok()) throw std::logic_error(added.message());
}

// NumPy broadcasting of x and y against out: element strides per output axis (0 where broadcast).
StatusOr<BroadcastIndex> IndexOf(const Shape& x, const Shape& y, const Shape& out) {
  BroadcastIndex index;
  if (out.size() > static_cast<size_t>(kMaxRank))
    return Unimplemented("broadcasting over rank " + std::to_string(out.size()) + " > " + std::to_string(kMaxRank));
  index.rank = static_cast<int>(out.size());
  auto strides = [&](const Shape& s, int64_t* result) {
    int64_t stride = 1;
    for (int axis = index.rank - 1; axis >= 0; --axis) {
      const int64_t d = axis - (index.rank - static_cast<int>(s.size()));
      const int64_t size = d >= 0 ? s[d] : 1;
      result[axis] = size == 1 ? 0 : stride;
      stride *= size;
    }
  };
  for (int axis = 0; axis < index.rank; ++axis) index.out_dims[axis] = out[axis];
  strides(x, index.x_strides);
  strides(y, index.y_strides);
  return index;
}

KernelFactory BinaryFactory(const std::string& type, Binary op) {
  return [type, op](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32(type, init.inputs, "input"));
    const Shape &x = init.inputs[0].shape, &y = init.inputs[1].shape, &out = init.outputs[0].shape;
    AF_ASSIGN_OR_RETURN(BroadcastIndex index, IndexOf(x, y, out));
    const bool same = x == out && y == out;
    const int64_t n = NumElements(out);
    return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchBinary(op, c.input(0).as<float>(), c.input(1).as<float>(), c.output(0).as<float>(), n, index, same, stream);
    });
  };
}

KernelFactory AffineFactory(const std::string& type, bool multiply) {
  return [type, multiply](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32(type, init.inputs, "input"));
    const float s = static_cast<float>(init.attrs.GetFloatOr("scalar", 0));
    const int64_t n = init.inputs[0].num_elements();
    return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchAffine(c.input(0).as<float>(), c.output(0).as<float>(), n, multiply ? s : 1.0f, multiply ? 0.0f : s, stream);
    });
  };
}

StatusOr<AxisSplit> BiasSplit(const KernelInit& init, const Shape& x) {
  int64_t axis = init.attrs.GetIntOr("axis", 1);
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  if (axis < 0 || axis >= static_cast<int64_t>(x.size()))
    return InvalidArgument("axis " + std::to_string(init.attrs.GetIntOr("axis", 1)) + " is out of range for " + ShapeToString(x));
  return SplitAt(x, axis);
}

}  // namespace

void RegisterElementwiseCudaKernels(OpRegistry& registry) {
  Add(registry, "add", BinaryFactory("add", Binary::kAdd));
  Add(registry, "sub", BinaryFactory("sub", Binary::kSub));
  Add(registry, "mul", BinaryFactory("mul", Binary::kMul));
  Add(registry, "div", BinaryFactory("div", Binary::kDiv));
  // add_n: out = in0 + in1, then += in2, ... (the CPU kernel's order, so the same sums).
  Add(registry, "add_n", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("add_n", init.inputs, "input"));
    const int64_t n = init.outputs.at(0).num_elements();
    const size_t bytes = init.outputs[0].byte_size();
    const BroadcastIndex unused;
    return CudaKernel("add_n", init, [=](KernelContext& c, cudaStream_t stream) -> cudaError_t {
      float* out = c.output(0).as<float>();
      if (c.num_inputs() == 1) return cudaMemcpyAsync(out, c.input(0).data, bytes, cudaMemcpyDeviceToDevice, stream);
      cudaError_t error = LaunchBinary(Binary::kAdd, c.input(0).as<float>(), c.input(1).as<float>(), out, n, unused, true, stream);
      for (size_t k = 2; k < c.num_inputs() && error == cudaSuccess; ++k) error = LaunchAccumulate(c.input(k).as<float>(), out, n, stream);
      return error;
    });
  });
  // broadcast_like (x, like): x broadcast to like's shape.
  Add(registry, "broadcast_like", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("broadcast_like", {init.inputs.at(0)}, "x"));
    const Shape &x = init.inputs[0].shape, &out = init.outputs.at(0).shape;
    AF_ASSIGN_OR_RETURN(BroadcastIndex index, IndexOf(x, x, out));
    const int64_t n = NumElements(out);
    return CudaKernel("broadcast_like", init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchBroadcast(c.input(0).as<float>(), c.output(0).as<float>(), n, index, stream);
    });
  });
  // reduce_sum_like (x, like): x summed over the axes where like broadcasts to x's shape.
  Add(registry, "reduce_sum_like", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("reduce_sum_like", {init.inputs.at(0)}, "x"));
    const Shape &x = init.inputs[0].shape, &like = init.inputs.at(1).shape;
    if (x.size() > static_cast<size_t>(kMaxRank) || like.size() > x.size())
      return Unimplemented("reduce_sum_like on cuda: x " + ShapeToString(x) + " and like " + ShapeToString(like) +
                           " (rank up to " + std::to_string(kMaxRank) + ")");
    // x's axes in order (row-major), each kept (like has it with the same extent) or summed.
    SumLikeIndex index;
    int64_t stride = 1, summed = 1;
    int kept = 0, summed_axes = 0;
    std::vector<int64_t> strides(x.size());
    for (int axis = static_cast<int>(x.size()) - 1; axis >= 0; --axis) {
      strides[axis] = stride;
      stride *= x[axis];
    }
    for (size_t axis = 0; axis < x.size(); ++axis) {
      const int64_t d = static_cast<int64_t>(axis) - static_cast<int64_t>(x.size() - like.size());
      if (d >= 0 && like[d] == x[axis]) {
        index.kept_dims[kept] = x[axis], index.kept_strides[kept] = strides[axis], ++kept;
      } else {
        index.summed_dims[summed_axes] = x[axis], index.summed_strides[summed_axes] = strides[axis], ++summed_axes;
        summed *= x[axis];
      }
    }
    index.kept_rank = kept, index.summed_rank = summed_axes;
    const int64_t outputs = init.outputs.at(0).num_elements();
    return CudaKernel("reduce_sum_like", init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchSumLike(c.input(0).as<float>(), c.output(0).as<float>(), outputs, summed, index, stream);
    });
  });
  Add(registry, "scalar_add", AffineFactory("scalar_add", false));
  Add(registry, "scalar_mul", AffineFactory("scalar_mul", true));
  Add(registry, "relu", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("relu", init.inputs, "input"));
    const int64_t n = init.inputs[0].num_elements();
    return CudaKernel("relu", init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchRelu(c.input(0).as<float>(), c.output(0).as<float>(), n, stream);
    });
  });
  Add(registry, "relu_grad", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("relu_grad", init.inputs, "input"));
    const int64_t n = init.inputs[0].num_elements();
    return CudaKernel("relu_grad", init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchReluGrad(c.input(0).as<float>(), c.input(1).as<float>(), c.output(0).as<float>(), n, stream);
    });
  });
  Add(registry, "bias_add", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("bias_add", init.inputs, "input"));
    AF_ASSIGN_OR_RETURN(AxisSplit s, BiasSplit(init, init.inputs[0].shape));
    const bool relu = init.attrs.GetBoolOr("fuse_relu", false);
    return CudaKernel("bias_add", init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchBiasAdd(c.input(0).as<float>(), c.input(1).as<float>(), c.output(0).as<float>(), s.outer, s.channels,
                           s.inner, relu, stream);
    });
  });
  Add(registry, "bias_add_grad", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("bias_add_grad", init.inputs, "input"));
    AF_ASSIGN_OR_RETURN(AxisSplit s, BiasSplit(init, init.inputs[0].shape));
    return CudaKernel("bias_add_grad", init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchBiasAddGrad(c.input(0).as<float>(), c.output(0).as<float>(), s.outer, s.channels, s.inner, stream);
    });
  });
  Add(registry, "constant", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("constant", init.outputs, "output"));
    const float value = static_cast<float>(init.attrs.GetFloatOr("value", 0));
    const int64_t n = init.outputs[0].num_elements();
    return CudaKernel("constant", init, [=](KernelContext& c, cudaStream_t stream) {
      return LaunchFill(c.output(0).as<float>(), n, value, stream);
    });
  });
  // clamp / clamp_grad: attrs min, max (absent: no bound, ±inf), inclusive (kernels/clamp.cc).
  for (bool grad : {false, true}) {
    const std::string type = grad ? "clamp_grad" : "clamp";
    Add(registry, type, [type, grad](const KernelInit& init) -> StatusOr<KernelFn> {
      AF_RETURN_IF_ERROR(ExpectFloat32(type, init.inputs, "input"));
      constexpr double kInf = std::numeric_limits<double>::infinity();
      const double low = init.attrs.Has("min") ? init.attrs.GetFloatOr("min", -kInf) : -kInf;
      const double high = init.attrs.Has("max") ? init.attrs.GetFloatOr("max", kInf) : kInf;
      if (std::isnan(low) || std::isnan(high) || low > high)
        return InvalidArgument(type + ": min (" + std::to_string(low) + ") must not exceed max (" + std::to_string(high) + ")");
      const float lo = static_cast<float>(low), hi = static_cast<float>(high);
      const bool inclusive = init.attrs.GetBoolOr("inclusive", true);
      const int64_t n = init.inputs[0].num_elements();
      if (grad)
        return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
          return LaunchClampGrad(c.input(0).as<float>(), c.input(1).as<float>(), c.output(0).as<float>(), n, lo, hi, inclusive,
                                 stream);
        });
      return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
        return LaunchClamp(c.input(0).as<float>(), c.output(0).as<float>(), n, lo, hi, stream);
      });
    });
  }
  // dropout: the CPU kernel's mask, draw for draw (kernels/dropout.cc): act t of a kernel draws
  // numbers t * stream_stride + stream_offset + [0, n) of splitmix64 seeded by attr seed; the
  // position in the stream lives in the kernel (acts of one kernel run one at a time, in order).
  Add(registry, "dropout", [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("dropout", init.inputs, "input"));
    constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
    const double rate = init.attrs.GetFloatOr("rate", 0.5);
    if (!(rate >= 0 && rate < 1)) return InvalidArgument("dropout: rate must be in [0, 1), got " + std::to_string(rate));
    const uint64_t seed = static_cast<uint64_t>(init.attrs.GetIntOr("seed", 0));
    const int64_t n = init.inputs[0].num_elements();
    const int64_t offset = init.attrs.GetIntOr("stream_offset", 0), stride = init.attrs.GetIntOr("stream_stride", n);
    if (offset < 0 || stride < offset + n)
      return InvalidArgument("dropout: stream_offset " + std::to_string(offset) + " and stream_stride " + std::to_string(stride) +
                             " do not hold a share of " + std::to_string(n) + " elements");
    const uint64_t threshold = static_cast<uint64_t>(rate * 9007199254740992.0);  // rate * 2^53
    const float scale = static_cast<float>(1.0 / (1.0 - rate));
    auto next = std::make_shared<uint64_t>(seed + static_cast<uint64_t>(offset) * kGolden);
    return CudaKernel("dropout", init, [=](KernelContext& c, cudaStream_t stream) {
      const uint64_t state = *next;
      *next += static_cast<uint64_t>(stride) * kGolden;
      return LaunchDropout(c.input(0).as<float>(), c.output(0).as<float>(), c.output(1).as<float>(), n, state, threshold, scale,
                           stream);
    });
  });
  // Layout ops that copy their input's bytes (any dtype): one device-to-device copy.
  for (const char* type : {"identity", "reshape", "flatten"}) {
    Add(registry, type, [type = std::string(type)](const KernelInit& init) -> StatusOr<KernelFn> {
      const size_t bytes = init.outputs.at(0).byte_size();
      return CudaKernel(type, init, [=](KernelContext& c, cudaStream_t stream) {
        return cudaMemcpyAsync(c.output(0).data, c.input(0).data, bytes, cudaMemcpyDeviceToDevice, stream);
      });
    });
  }
}

}  // namespace actorflow::cuda

// The CUDA kernels: each compared with the CPU kernel on the same inputs on a GPU. Without one
// (CI), every test asserts what can be checked there: the op has a "cuda" factory, the factory
// refuses to run without a device stream (naming the op), and asking the CUDA device for a
// stream fails clearly, naming the device count found; ACTORFLOW_REQUIRE_GPU=1 (set on GPU
// machines) turns a missing GPU into a failure, so the comparisons cannot go unrun there.
#include <cmath>
#include <cstdlib>
#include <vector>
#include <string>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "actors/device.h"
#include "kernels/testing/test_util.h"

namespace actorflow::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

#define ASSERT_CUDA_OK(call)                                                                               \
  do {                                                                                                     \
    cudaError_t _e = (call);                                                                               \
    ASSERT_EQ(_e, cudaSuccess) << #call << ": " << cudaGetErrorName(_e) << " " << cudaGetErrorString(_e); \
  } while (0)

// Device 0's compute stream; null without a GPU, after checking the no-device error (and
// failing when ACTORFLOW_REQUIRE_GPU=1).
DeviceStream* GpuStream() {
  auto backend = DeviceRegistry::Global().Find(kCudaDevice);
  EXPECT_TRUE(backend.ok()) << "a CUDA build registers the cuda device: " << backend.status().ToString();
  if (!backend.ok()) return nullptr;
  auto stream = backend.value()->ComputeStream(0);
  if (stream.ok()) return stream.value();
  const char* required = std::getenv("ACTORFLOW_REQUIRE_GPU");
  EXPECT_FALSE(required != nullptr && std::string(required) == "1")
      << "ACTORFLOW_REQUIRE_GPU=1 but no CUDA device: " << stream.status().ToString();
  EXPECT_TRUE(Contains(stream.status().message(), "cuda device 0 does not exist: 0 device(s)"))
      << stream.status().message();
  return nullptr;
}

KernelInit CudaInit(const std::vector<HostTensor>& in, const std::vector<TensorDesc>& out, const Attrs& attrs,
                    DeviceStream* stream) {
  KernelInit init;
  for (const HostTensor& t : in) init.inputs.push_back(t.desc);
  init.outputs = out;
  init.attrs = attrs;
  init.device_type = kCudaDevice;
  init.device_id = 0;
  init.device_stream = stream;
  init.stream = stream == nullptr ? nullptr : stream->native_handle();
  return init;
}

StatusOr<std::vector<TensorDesc>> Infer(const std::string& type, const std::vector<HostTensor>& in, const Attrs& attrs) {
  RegisterAllOps();
  AF_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(type));
  InferContext ctx;
  for (const HostTensor& t : in) ctx.inputs.push_back(t.desc);
  ctx.attrs = attrs;
  AF_RETURN_IF_ERROR(def->infer(ctx));
  return ctx.outputs;
}

// What CI can check of `type` on cuda: registered, and no kernel without a device stream.
void CheckWithoutDevice(const std::string& type, const std::vector<HostTensor>& in, const Attrs& attrs) {
  auto out = Infer(type, in, attrs);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(OpRegistry::Global().Find(type).value()->kernel_factories.count(kCudaDevice)) << type;
  auto kernel = MakeKernel(type, CudaInit(in, out.value(), attrs, nullptr));
  ASSERT_FALSE(kernel.ok()) << type;
  EXPECT_TRUE(Contains(kernel.status().message(), type + " on cuda:0: KernelInit::device_stream"))
      << kernel.status().message();
}

// Runs `type` on the GPU: inputs copied in, the kernel run (a direct call waits for the stream),
// outputs copied back; with `in_place`, the inputs are copied back into `in` too.
StatusOr<std::vector<HostTensor>> RunCuda(const std::string& type, std::vector<HostTensor>& in, const Attrs& attrs,
                                          DeviceStream* stream, bool in_place = false) {
  AF_ASSIGN_OR_RETURN(std::vector<TensorDesc> out_descs, Infer(type, in, attrs));
  std::vector<void*> buffers;
  auto release = [&] {
    for (void* b : buffers) cudaFree(b);
  };
  std::vector<TensorView> inputs, outputs;
  auto device_copy = [&](size_t bytes) -> void* {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) return nullptr;
    buffers.push_back(p);
    return p;
  };
  for (HostTensor& t : in) {
    void* p = device_copy(t.bytes.size());
    if (p == nullptr || cudaMemcpy(p, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
      release();
      return Internal("copying an input to the GPU failed");
    }
    inputs.push_back(TensorView{p, t.desc});
  }
  for (const TensorDesc& d : out_descs) outputs.push_back(TensorView{device_copy(d.byte_size()), d});
  auto kernel = MakeKernel(type, CudaInit(in, out_descs, attrs, stream));
  if (!kernel.ok()) {
    release();
    return kernel.status();
  }
  KernelContext context{&inputs, &outputs, 0};
  Status ran = kernel.value()(context);
  std::vector<HostTensor> result;
  for (const TensorDesc& d : out_descs) {
    HostTensor t = HostTensor::Of(d.shape, d.dtype, {});
    cudaMemcpy(t.bytes.data(), outputs[result.size()].data, t.bytes.size(), cudaMemcpyDeviceToHost);
    result.push_back(std::move(t));
  }
  if (in_place)
    for (size_t i = 0; i < in.size(); ++i) cudaMemcpy(in[i].bytes.data(), inputs[i].data, in[i].bytes.size(), cudaMemcpyDeviceToHost);
  release();
  if (!ran.ok()) return ran;
  return result;
}

void ExpectClose(const HostTensor& got, const HostTensor& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.desc, want.desc) << what;
  const int64_t n = want.desc.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    const double g = got.at(i), w = want.at(i);
    if (std::isnan(w)) {
      ASSERT_TRUE(std::isnan(g)) << what << " element " << i;
      continue;
    }
    ASSERT_NEAR(g, w, tolerance * (1.0 + std::fabs(w))) << what << " element " << i;
  }
}

// The GPU result of `type` equals the CPU kernel's on the same inputs (all outputs); without a
// GPU, CheckWithoutDevice.
void CompareWithCpu(const std::string& type, std::vector<HostTensor> in, const Attrs& attrs = {}, double tolerance = 1e-5) {
  DeviceStream* stream = GpuStream();
  if (stream == nullptr) {
    CheckWithoutDevice(type, in, attrs);
    return;
  }
  auto want = RunOp(type, in, attrs);
  ASSERT_TRUE(want.ok()) << type << " on cpu: " << want.status().ToString();
  auto got = RunCuda(type, in, attrs, stream);
  ASSERT_TRUE(got.ok()) << type << " on cuda: " << got.status().ToString();
  ASSERT_EQ(got->size(), want->size());
  for (size_t k = 0; k < want->size(); ++k) ExpectClose((*got)[k], (*want)[k], tolerance, type + " output " + std::to_string(k));
}

// An in-place op (optimizer update): the inputs after the GPU run equal those after the CPU run.
void CompareInPlaceWithCpu(const std::string& type, std::vector<HostTensor> in, const Attrs& attrs) {
  DeviceStream* stream = GpuStream();
  if (stream == nullptr) {
    CheckWithoutDevice(type, in, attrs);
    return;
  }
  std::vector<HostTensor> cpu = in, gpu = in;
  auto want = RunOpInPlace(type, cpu, attrs);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  auto got = RunCuda(type, gpu, attrs, stream, /*in_place=*/true);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (size_t i = 0; i < in.size(); ++i) ExpectClose(gpu[i], cpu[i], 1e-5, type + " input " + std::to_string(i));
}

// An op with outputs and in-place inputs (batch norm's moving statistics): both compared.
void CompareOutputsAndInputsWithCpu(const std::string& type, std::vector<HostTensor> in, const Attrs& attrs, double tolerance) {
  DeviceStream* stream = GpuStream();
  if (stream == nullptr) {
    CheckWithoutDevice(type, in, attrs);
    return;
  }
  std::vector<HostTensor> cpu = in, gpu = in;
  auto want = RunOpInPlace(type, cpu, attrs);
  ASSERT_TRUE(want.ok()) << type << " on cpu: " << want.status().ToString();
  auto got = RunCuda(type, gpu, attrs, stream, /*in_place=*/true);
  ASSERT_TRUE(got.ok()) << type << " on cuda: " << got.status().ToString();
  ASSERT_EQ(got->size(), want->size());
  for (size_t k = 0; k < want->size(); ++k) ExpectClose((*got)[k], (*want)[k], tolerance, type + " output " + std::to_string(k));
  for (size_t i = 0; i < in.size(); ++i) ExpectClose(gpu[i], cpu[i], tolerance, type + " input " + std::to_string(i));
}

TEST(CudaKernels, ElementwiseBinaryAndScalar) {
  for (const char* type : {"add", "sub", "mul", "div"}) {
    CompareWithCpu(type, {F32({100003}), F32({100003}, Positive(100003))});
    CompareWithCpu(type, {F32({4, 1, 5}), F32({3, 1}, Positive(3))});  // broadcast both ways
    CompareWithCpu(type, {F32({2, 3}), F32({}, {1.5})});
  }
  CompareWithCpu("add_n", {F32({1001}), F32({1001}, Positive(1001)), F32({1001}, Ramp(1001, 2.0))}, {}, 0);
  CompareWithCpu("add_n", {F32({7, 3}), F32({7, 3}, Positive(21))}, {}, 0);
  CompareWithCpu("add_n", {F32({5})}, {}, 0);
  CompareWithCpu("broadcast_like", {F32({3, 1}), F32({2, 3, 4})}, {}, 0);
  CompareWithCpu("broadcast_like", {F32({4}), F32({5, 4})}, {}, 0);
  CompareWithCpu("reduce_sum_like", {F32({2, 3, 4}), F32({3, 1})}, {}, 1e-5);  // axes 0 and 2: not contiguous
  CompareWithCpu("reduce_sum_like", {F32({64, 33}), F32({33})}, {}, 1e-5);
  CompareWithCpu("reduce_sum_like", {F32({4, 5}), F32({1, 1})}, {}, 1e-5);
  CompareWithCpu("reduce_sum_like", {F32({4, 5}), F32({4, 5})}, {}, 0);
  CompareWithCpu("scalar_add", {F32({1000})}, Attrs{{"scalar", 0.25}});
  CompareWithCpu("scalar_mul", {F32({1000})}, Attrs{{"scalar", -3.0}});
}

TEST(CudaKernels, ReluBiasAddAndTheirGradients) {
  std::vector<double> with_nan = Ramp(300);
  with_nan[7] = std::nan("");
  CompareWithCpu("relu", {F32({300}, with_nan)});
  CompareWithCpu("relu_grad", {F32({300}), F32({300}, Positive(300))});
  CompareWithCpu("bias_add", {F32({64, 33}), F32({33})});
  CompareWithCpu("bias_add", {F32({64, 33}), F32({33})}, Attrs{{"fuse_relu", true}});
  CompareWithCpu("bias_add", {F32({2, 3, 5}), F32({3})}, Attrs{{"axis", int64_t{1}}});
  CompareWithCpu("bias_add_grad", {F32({300, 17})}, {}, 1e-4);
  CompareWithCpu("bias_add_grad", {F32({4, 3, 50})}, Attrs{{"axis", int64_t{1}}}, 1e-4);
  CompareWithCpu("constant", {}, Attrs{{"shape", std::vector<int64_t>{7, 3}}, {"value", 0.5}});
  CompareWithCpu("identity", {F32({5, 4})});
}

// Matmul operands in [-1, 1]: Ramp's values grow with the index (to ~400 for the 784x512
// operand), so its products cancel catastrophically and any two correct summation orders differ
// by far more than a relative tolerance on the (small) result allows.
HostTensor UnitF32(const Shape& shape) {
  std::vector<double> v(NumElements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i) * 1.7 + 0.4);
  return F32(shape, v);
}

TEST(CudaKernels, MatmulTransposesBatchesAndBiasReluEpilogue) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Attrs attrs{{"transpose_a", ta}, {"transpose_b", tb}};
      CompareWithCpu("matmul", {UnitF32(ta ? Shape{37, 29} : Shape{29, 37}), UnitF32(tb ? Shape{41, 37} : Shape{37, 41})}, attrs,
                     1e-4);
      CompareWithCpu("matmul",
                     {UnitF32(ta ? Shape{3, 37, 29} : Shape{3, 29, 37}), UnitF32(tb ? Shape{3, 41, 37} : Shape{3, 37, 41})}, attrs,
                     1e-4);
      CompareWithCpu("matmul", {UnitF32(ta ? Shape{3, 37, 29} : Shape{3, 29, 37}), UnitF32(tb ? Shape{41, 37} : Shape{37, 41})},
                     attrs, 1e-4);
      CompareWithCpu("matmul", {UnitF32(ta ? Shape{37, 29} : Shape{29, 37}), UnitF32(tb ? Shape{3, 41, 37} : Shape{3, 37, 41})},
                     attrs, 1e-4);
    }
  CompareWithCpu("matmul", {UnitF32({64, 784}), UnitF32({784, 512}), UnitF32({512})},
                 Attrs{{"fuse_bias", true}, {"fuse_relu", true}}, 1e-4);
  CompareWithCpu("matmul", {UnitF32({64, 512}), UnitF32({512, 10}), UnitF32({10})}, Attrs{{"fuse_bias", true}}, 1e-4);
}

TEST(CudaKernels, ReductionsOverContiguousAxes) {
  for (const char* type : {"reduce_sum", "reduce_mean"}) {
    CompareWithCpu(type, {F32({40, 30})}, Attrs{{"axis", std::vector<int64_t>{0}}}, 1e-4);
    CompareWithCpu(type, {F32({40, 30})}, Attrs{{"axis", std::vector<int64_t>{1}}, {"keepdims", true}}, 1e-4);
    CompareWithCpu(type, {F32({4, 5, 6, 7})}, Attrs{{"axis", std::vector<int64_t>{1, 2}}}, 1e-4);
    CompareWithCpu(type, {F32({100000})}, {}, 1e-4);  // everything: few outputs, many inputs
  }
  DeviceStream* stream = GpuStream();
  if (stream == nullptr) return;
  std::vector<HostTensor> in = {F32({4, 5, 6})};
  auto split = RunCuda("reduce_sum", in, Attrs{{"axis", std::vector<int64_t>{0, 2}}}, stream);
  ASSERT_FALSE(split.ok());
  EXPECT_TRUE(Contains(split.status().message(), "not contiguous")) << split.status().message();
}

TEST(CudaKernels, SoftmaxAndSparseCrossEntropyWithGradient) {
  CompareWithCpu("softmax", {F32({33, 1000})});
  CompareWithCpu("softmax", {F32({2, 3, 10})}, Attrs{{"axis", int64_t{-1}}});
  std::vector<double> labels;
  for (int i = 0; i < 64; ++i) labels.push_back(i % 10);
  CompareWithCpu("sparse_softmax_cross_entropy", {I32({64}, labels), F32({64, 10})}, {}, 1e-5);
  CompareWithCpu("sparse_softmax_cross_entropy", {I64({64}, labels), F32({64, 10})}, {}, 1e-5);
  CompareWithCpu("sparse_softmax_cross_entropy_grad", {I32({64}, labels), F32({64, 10}, Positive(640)), F32({64})});
  DeviceStream* stream = GpuStream();
  if (stream == nullptr) return;
  labels[5] = 10;  // out of range: the act fails naming the position, as on the CPU
  std::vector<HostTensor> bad = {I32({64}, labels), F32({64, 10})};
  auto failed = RunCuda("sparse_softmax_cross_entropy", bad, {}, stream);
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(Contains(failed.status().message(), "position 5 is out of range [0, 10)")) << failed.status().message();
}

TEST(CudaKernels, OptimizerUpdatesInPlace) {
  const int64_t n = 10001;
  Attrs attrs{{"weight_decay", 0.01}, {"grad_scale", 0.5}};
  CompareInPlaceWithCpu("sgd_update", {F32({n}), F32({n}, Positive(n)), F32({1}, {0.1})}, attrs);
  CompareInPlaceWithCpu("momentum_update", {F32({n}), F32({n}, Positive(n)), F32({n}, Ramp(n, 1.0)), F32({1}, {0.1})}, attrs);
  for (bool decoupled : {false, true}) {
    Attrs adam = attrs;
    adam.Set("decoupled_weight_decay", decoupled);
    CompareInPlaceWithCpu("adam_update",
                          {F32({n}), F32({n}, Positive(n)), F32({n}, Ramp(n, 1.0)), F32({n}, Positive(n)), F32({1}, {0.01})},
                          adam);
    // [lr, 1/(1-beta1^t), 1/(1-beta2^t)] at t = 3: the bias corrections on the moments.
    CompareInPlaceWithCpu("adam_update",
                          {F32({n}), F32({n}, Positive(n)), F32({n}, Ramp(n, 1.0)), F32({n}, Positive(n)),
                           F32({3}, {0.01, 1.0 / (1.0 - 0.9 * 0.9 * 0.9), 1.0 / (1.0 - 0.999 * 0.999 * 0.999)})},
                          adam);
  }
}

#ifdef ACTORFLOW_WITH_CUDNN
// conv2d and its gradients through cuDNN: padding (symmetric and not), strides, dilation, groups.
TEST(CudaKernels, ConvolutionAndItsGradientsThroughCudnn) {
  struct Case {
    Shape x, filter;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9, 9}, {4, 3, 3, 3}, Attrs{{"padding", std::string("SAME")}}},
      {{2, 3, 9, 9}, {4, 3, 3, 3}, Attrs{{"strides", int64_t{2}}}},
      {{1, 4, 11, 11}, {6, 2, 3, 3}, Attrs{{"groups", int64_t{2}}, {"padding", std::vector<int64_t>{1, 1}}}},
      {{1, 2, 12, 12}, {3, 2, 3, 3}, Attrs{{"dilation_rate", int64_t{2}}}},
      // Asymmetric padding, prepadded before cuDNN: "SAME" with an even filter (the odd pixel
      // at the bottom/right), "SAME" with stride 2 on an even input (seed 001's layer), and
      // explicit [top, bottom, left, right] with more on the top/left.
      {{1, 1, 6, 6}, {1, 1, 2, 2}, Attrs{{"padding", std::string("SAME")}}},
      {{2, 4, 16, 16}, {8, 4, 3, 3}, Attrs{{"padding", std::string("SAME")}, {"strides", int64_t{2}}}},
      {{1, 4, 7, 9}, {4, 2, 3, 3}, Attrs{{"padding", std::vector<int64_t>{2, 0, 1, 3}}, {"groups", int64_t{2}}}},
  };
  for (const Case& k : cases) {
    HostTensor x = F32(k.x), filter = F32(k.filter, Ramp(NumElements(k.filter), 1.3));
    auto y = RunOp("conv2d", {x, filter}, k.attrs);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    HostTensor dy = F32(y.value()[0].desc.shape, Ramp(y.value()[0].desc.num_elements(), 2.1));
    CompareWithCpu("conv2d", {x, filter}, k.attrs, 1e-4);
    CompareWithCpu("conv2d_grad_data", {dy, filter, x}, k.attrs, 1e-4);
    CompareWithCpu("conv2d_grad_filter", {dy, x, filter}, k.attrs, 1e-4);
  }
}
#endif

// Pooling forward and backward: "SAME" with the odd pixel at the bottom/right (asymmetric),
// overlapping windows, explicit padding, rectangular windows, LeNet's 2x2/2 pools, ties (the
// gradient goes to the first maximum) and a NaN (it wins the max and takes the gradient).
TEST(CudaKernels, MaxAndAveragePoolingWithGradients) {
  struct Case {
    Shape x;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9, 9}, Attrs{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}}},
      {{2, 3, 9, 9}, Attrs{{"ksize", int64_t{3}}, {"strides", int64_t{1}}, {"padding", std::string("VALID")}}},
      {{1, 2, 10, 7}, Attrs{{"ksize", int64_t{3}}, {"strides", int64_t{2}}, {"padding", std::vector<int64_t>{1, 1}}}},
      {{1, 2, 11, 12}, Attrs{{"ksize", std::vector<int64_t>{2, 3}}, {"strides", std::vector<int64_t>{1, 2}},
                             {"padding", std::string("SAME")}}},
      {{4, 8, 28, 28}, Attrs{{"ksize", int64_t{2}}, {"strides", int64_t{2}}, {"padding", std::string("SAME")}}},
  };
  for (const Case& k : cases) {
    const int64_t n = NumElements(k.x);
    std::vector<double> ties(n);  // few distinct values: most windows hold their maximum twice
    for (int64_t i = 0; i < n; ++i) ties[i] = std::floor(2.0 * std::sin(static_cast<double>(i) * 1.7 + 0.4));
    std::vector<double> with_nan = Ramp(n);
    with_nan[n / 3] = std::nan("");
    for (const std::vector<double>& values : {Ramp(n), ties, with_nan}) {
      HostTensor x = F32(k.x, values);
      for (const char* type : {"max_pool2d", "avg_pool2d"}) {
        auto y = RunOp(type, {x}, k.attrs);
        ASSERT_TRUE(y.ok()) << y.status().ToString();
        const HostTensor& out = y.value()[0];
        HostTensor dy = F32(out.desc.shape, Ramp(out.desc.num_elements(), 2.1));
        CompareWithCpu(type, {x}, k.attrs);
        if (std::string(type) == "max_pool2d") {
          CompareWithCpu("max_pool2d_grad", {x, out, dy}, k.attrs);
        } else {
          CompareWithCpu("avg_pool2d_grad", {dy, x}, k.attrs);
        }
      }
    }
  }
}

// PyTorch's adaptive windows: dividing (MobileNetV2's global 1x1), overlapping and uneven ones,
// and more outputs than inputs.
TEST(CudaKernels, AdaptiveAveragePoolingWithGradient) {
  struct Case {
    Shape x;
    std::vector<int64_t> size;
  };
  for (const Case& k : std::vector<Case>{{{4, 32, 7, 7}, {1, 1}}, {{2, 3, 10, 7}, {3, 4}}, {{1, 2, 5, 5}, {7, 9}},
                                         {{2, 3, 14, 14}, {7, 7}}}) {
    Attrs attrs{{"output_size", k.size}};
    HostTensor x = F32(k.x);
    CompareWithCpu("adaptive_avg_pool2d", {x}, attrs);
    Shape out{k.x[0], k.x[1], k.size[0], k.size[1]};
    CompareWithCpu("adaptive_avg_pool2d_grad", {F32(out, Ramp(NumElements(out), 2.1)), x}, attrs);
  }
}

// Zero and reflection padding, every side different, and their gradients (reflection adds the
// mirrored cells onto their sources).
TEST(CudaKernels, ZeroAndReflectionPaddingWithGradients) {
  const Shape x{2, 3, 5, 6};
  for (const char* type : {"zero_pad2d", "reflection_pad2d"})
    for (const std::vector<int64_t>& padding : {std::vector<int64_t>{1, 2, 3, 0}, std::vector<int64_t>{4, 5, 4, 2},
                                                std::vector<int64_t>{2}}) {
      Attrs attrs{{"padding", padding}};
      auto y = RunOp(type, {F32(x)}, attrs);
      ASSERT_TRUE(y.ok()) << type << ": " << y.status().ToString();
      const Shape& padded = y.value()[0].desc.shape;
      CompareWithCpu(type, {F32(x)}, attrs, 0);
      CompareWithCpu(std::string(type) + "_grad", {F32(padded, Ramp(NumElements(padded), 2.1)), F32(x)}, attrs, 0);
    }
}

// clamp with both bounds, one bound, and relu6's exclusive gradient; values on the bounds, NaN.
TEST(CudaKernels, ClampAndItsGradient) {
  std::vector<double> v = Ramp(1000);
  for (double& value : v) value *= 8.0;
  v[3] = 0.0, v[4] = 6.0, v[5] = -1.0, v[6] = std::nan("");
  const HostTensor x = F32({1000}, v), dy = F32({1000}, Positive(1000));
  for (const Attrs& attrs : {Attrs{{"min", 0.0}, {"max", 6.0}}, Attrs{{"min", 0.0}, {"max", 6.0}, {"inclusive", false}},
                             Attrs{{"min", -1.0}}, Attrs{{"max", 2.5}}}) {
    CompareWithCpu("clamp", {x}, attrs, 0);
    CompareWithCpu("clamp_grad", {x, dy}, attrs, 0);
  }
}

// Training: batch statistics, the moving statistics updated in place (momentum 0.9: moving =
// 0.9 * moving + 0.1 * batch), mean and inv_std saved; inference: the moving statistics; the
// channel on axis 1 (NCHW) and on the last axis (dense layers); the gradients of both modes.
TEST(CudaKernels, BatchNormalizationTrainingInferenceAndGradient) {
  struct Case {
    Shape x;
    int64_t axis;
  };
  for (const Case& k : std::vector<Case>{{{4, 6, 5, 5}, 1}, {{32, 10}, 1}, {{3, 4, 7}, -1}, {{64, 3, 16, 16}, 1}}) {
    const int64_t channels = k.x[k.axis < 0 ? k.x.size() - 1 : k.axis];
    // Bounded values (Ramp's grow with the index): the CPU's float sums over up to 16384
    // elements per channel stay well within the tolerance of the GPU's double ones.
    std::vector<double> values(NumElements(k.x)), gradient(NumElements(k.x));
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = 2.0 * std::sin(static_cast<double>(i) * 1.7 + 0.4) + 0.5 + 0.1 * static_cast<double>(i % channels);
      gradient[i] = std::sin(static_cast<double>(i) * 1.3 + 2.3);
    }
    const HostTensor x = F32(k.x, values);
    const HostTensor gamma = F32({channels}, Positive(channels)), beta = F32({channels}, Ramp(channels, 1.1));
    const HostTensor moving_mean = F32({channels}, Ramp(channels, 0.7)), moving_variance = F32({channels}, Positive(channels));
    for (bool training : {true, false}) {
      Attrs attrs{{"axis", k.axis}, {"epsilon", 1e-3}, {"momentum", 0.9}, {"training", training}};
      CompareOutputsAndInputsWithCpu("batch_normalization", {x, gamma, beta, moving_mean, moving_variance}, attrs, 1e-5);
      std::vector<HostTensor> state = {x, gamma, beta, moving_mean, moving_variance};
      auto forward = RunOpInPlace("batch_normalization", state, attrs);
      ASSERT_TRUE(forward.ok()) << forward.status().ToString();
      const HostTensor dy = F32(k.x, gradient);
      CompareWithCpu("batch_normalization_grad", {x, dy, forward.value()[1], forward.value()[2], gamma}, attrs, 1e-4);
    }
  }
}

// dropout draws the CPU kernel's random stream: the same masks, act after act (the second act
// continues the stream, so its mask differs from the first); the statistics of the mask; and
// out = x * mask, the mask the gradient (mul(dy, mask)) reads.
TEST(CudaKernels, DropoutDrawsTheCpuMasks) {
  const int64_t n = 100003;
  const double rate = 0.3;
  const Attrs attrs{{"rate", rate}, {"seed", int64_t{1234}}};
  const HostTensor x = F32({n}, Positive(n));
  DeviceStream* stream = GpuStream();
  if (stream == nullptr) {
    CheckWithoutDevice("dropout", {x}, attrs);
    return;
  }
  auto descs = Infer("dropout", {x}, attrs);
  ASSERT_TRUE(descs.ok()) << descs.status().ToString();
  KernelInit cpu_init;
  cpu_init.inputs = {x.desc};
  cpu_init.outputs = descs.value();
  cpu_init.attrs = attrs;
  auto cpu = MakeKernel("dropout", cpu_init);
  auto gpu = MakeKernel("dropout", CudaInit({x}, descs.value(), attrs, stream));
  ASSERT_TRUE(cpu.ok() && gpu.ok()) << cpu.status().ToString() << gpu.status().ToString();
  void *x_device = nullptr, *out_device = nullptr, *mask_device = nullptr;
  const size_t bytes = x.bytes.size();
  ASSERT_CUDA_OK(cudaMalloc(&x_device, bytes));
  ASSERT_CUDA_OK(cudaMalloc(&out_device, bytes));
  ASSERT_CUDA_OK(cudaMalloc(&mask_device, bytes));
  ASSERT_CUDA_OK(cudaMemcpy(x_device, x.bytes.data(), bytes, cudaMemcpyHostToDevice));
  std::vector<TensorView> gpu_in = {TensorView{x_device, x.desc}};
  std::vector<TensorView> gpu_out = {TensorView{out_device, x.desc}, TensorView{mask_device, x.desc}};
  HostTensor first_mask;
  for (int act = 0; act < 2; ++act) {
    HostTensor cpu_out = HostTensor::Of(x.desc.shape, x.desc.dtype, {}), cpu_mask = cpu_out;
    HostTensor input = x;
    std::vector<TensorView> cpu_in = {input.view()}, cpu_outputs = {cpu_out.view(), cpu_mask.view()};
    KernelContext cpu_context{&cpu_in, &cpu_outputs, act}, gpu_context{&gpu_in, &gpu_out, act};
    ASSERT_TRUE(cpu.value()(cpu_context).ok());
    ASSERT_TRUE(gpu.value()(gpu_context).ok());
    HostTensor out = HostTensor::Of(x.desc.shape, x.desc.dtype, {}), mask = out;
    ASSERT_CUDA_OK(cudaMemcpy(out.bytes.data(), out_device, bytes, cudaMemcpyDeviceToHost));
    ASSERT_CUDA_OK(cudaMemcpy(mask.bytes.data(), mask_device, bytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(mask.bytes, cpu_mask.bytes) << "act " << act;
    EXPECT_EQ(out.bytes, cpu_out.bytes) << "act " << act;
    int64_t kept = 0;
    const double scale = static_cast<float>(1.0 / (1.0 - rate));
    for (int64_t i = 0; i < n; ++i) {
      const double m = mask.at(i);
      ASSERT_TRUE(m == 0.0 || m == scale) << "mask " << m << " at " << i;
      kept += m != 0.0;
      ASSERT_EQ(out.at(i), static_cast<double>(static_cast<float>(x.at(i)) * static_cast<float>(m))) << i;
    }
    // Binomial(n, 0.7): the standard deviation of the kept fraction is 0.0015.
    EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - rate, 0.01) << "act " << act;
    if (act == 0) first_mask = mask;
    else EXPECT_NE(mask.bytes, first_mask.bytes) << "the second act repeated the first act's mask";
  }
  ASSERT_CUDA_OK(cudaFree(x_device));
  ASSERT_CUDA_OK(cudaFree(out_device));
  ASSERT_CUDA_OK(cudaFree(mask_device));
  // The gradient, mul(dy, mask), on the GPU with the GPU's mask equals the CPU's.
  CompareWithCpu("mul", {F32({n}, Ramp(n)), first_mask}, {}, 0);
}

// The compiler's copies on the CUDA copy stream: host -> device -> host round trip.
TEST(CudaKernels, HostDeviceCopies) {
  auto backend = DeviceRegistry::Global().Find(kCudaDevice);
  ASSERT_TRUE(backend.ok());
  auto copy_stream = backend.value()->CopyStream(0);
  if (!copy_stream.ok()) {
    ASSERT_EQ(GpuStream(), nullptr);  // the no-device checks
    CheckWithoutDevice("copy_h2d", {F32({8})}, {});
    return;
  }
  HostTensor x = F32({4099});
  std::vector<TensorView> in = {x.view()};
  void* device = nullptr;
  ASSERT_CUDA_OK(cudaMalloc(&device, x.bytes.size()));
  std::vector<TensorView> on_device = {TensorView{device, x.desc}};
  HostTensor back = HostTensor::Of(x.desc.shape, x.desc.dtype, {});
  std::vector<TensorView> out = {back.view()};
  auto h2d = MakeKernel("copy_h2d", CudaInit({x}, {x.desc}, {}, copy_stream.value()));
  auto d2h = MakeKernel("copy_d2h", CudaInit({x}, {x.desc}, {}, copy_stream.value()));
  ASSERT_TRUE(h2d.ok() && d2h.ok());
  KernelContext first{&in, &on_device, 0}, second{&on_device, &out, 0};
  ASSERT_TRUE(h2d.value()(first).ok());
  ASSERT_TRUE(d2h.value()(second).ok());
  EXPECT_EQ(back.bytes, x.bytes);
  ASSERT_CUDA_OK(cudaFree(device));
}

}  // namespace
}  // namespace actorflow::testing

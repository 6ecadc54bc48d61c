// "cuda" factories of conv2d and its gradients (conv2d_grad_data, conv2d_grad_filter) through
// cuDNN: NCHW float32, strides, dilation, groups, padding. cuDNN pads symmetrically; asymmetric
// padding ("SAME" with the odd pixel at the bottom/right, or explicit) pads x by the difference
// first into a buffer of the kernel (zero_pad2d's kernel), and the data gradient is cropped back
// from that buffer. The algorithm is chosen once per kernel (one shape) by cuDNN's heuristics at
// the first act, deterministic ones preferred, with its workspace and padding buffer allocated
// then: acts never allocate. FMA math (no TF32), so results stay close to the CPU kernel's.
#include <cudnn.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/launch.h"
#include "kernels/window.h"

namespace actorflow::cuda {
namespace {

Status CudnnStatus(cudnnStatus_t status, const std::string& what) {
  if (status == CUDNN_STATUS_SUCCESS) return Status::Ok();
  return Internal(what + ": " + cudnnGetErrorString(status));
}

enum class Pass { kForward, kBackwardData, kBackwardFilter };

// The first of cuDNN's ranked algorithms that is usable and deterministic (the same result run
// after run: backward-filter and backward-data algorithms that accumulate with atomics are not),
// else the first usable one; -1 when none is.
template <typename Perf>
int Pick(const Perf* perf, int returned) {
  for (int k = 0; k < returned; ++k)
    if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].determinism == CUDNN_DETERMINISTIC) return k;
  for (int k = 0; k < returned; ++k)
    if (perf[k].status == CUDNN_STATUS_SUCCESS) return k;
  return -1;
}

struct ConvShape {
  Window2d win;
  int64_t out_channels = 0, groups = 1;
  // cuDNN's symmetric padding, and what is padded beforehand on each side (all 0 when the op's
  // padding is symmetric): top = pad_h + extra_top, bottom = pad_h + extra_bottom, etc.
  int64_t pad_h = 0, pad_w = 0, extra_top = 0, extra_bottom = 0, extra_left = 0, extra_right = 0;
  bool prepadded() const { return extra_top + extra_bottom + extra_left + extra_right > 0; }
  // x as cuDNN sees it: prepadded.
  int64_t x_h() const { return win.h + extra_top + extra_bottom; }
  int64_t x_w() const { return win.w + extra_left + extra_right; }
};

// The geometry from the pass's inputs: x and filter (forward), dy/filter/like=x (data),
// dy/x/like=filter (filter).
StatusOr<ConvShape> ReadShape(const std::string& type, Pass pass, const KernelInit& init) {
  const TensorDesc& x = pass == Pass::kForward ? init.inputs.at(0) : pass == Pass::kBackwardData ? init.inputs.at(2) : init.inputs.at(1);
  const TensorDesc& filter = pass == Pass::kForward ? init.inputs.at(1) : pass == Pass::kBackwardData ? init.inputs.at(1) : init.inputs.at(2);
  if (filter.shape.size() != 4) return InvalidArgument(type + ": filter must have rank 4, got " + ShapeToString(filter.shape));
  AF_RETURN_IF_ERROR(CheckNchw(init.attrs));
  ConvShape s;
  AF_ASSIGN_OR_RETURN(s.win, ReadWindow(x.shape, filter.shape[2], filter.shape[3], init.attrs, type, true));
  s.groups = init.attrs.GetIntOr("groups", 1);
  s.out_channels = filter.shape[0];
  s.pad_h = std::min(s.win.top, s.win.bottom);
  s.pad_w = std::min(s.win.left, s.win.right);
  s.extra_top = s.win.top - s.pad_h, s.extra_bottom = s.win.bottom - s.pad_h;
  s.extra_left = s.win.left - s.pad_w, s.extra_right = s.win.right - s.pad_w;
  return s;
}

// Descriptors, handle, algorithm and workspace of one kernel, made at its first act.
class CudnnConv {
 public:
  CudnnConv(std::string type, Pass pass, ConvShape shape) : type_(std::move(type)), pass_(pass), s_(shape) {}
  ~CudnnConv() {
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (padded_ != nullptr) cudaFree(padded_);
    if (conv_ != nullptr) cudnnDestroyConvolutionDescriptor(conv_);
    if (filter_ != nullptr) cudnnDestroyFilterDescriptor(filter_);
    if (x_ != nullptr) cudnnDestroyTensorDescriptor(x_);
    if (y_ != nullptr) cudnnDestroyTensorDescriptor(y_);
    if (handle_ != nullptr) cudnnDestroy(handle_);
  }

  Status Run(const void* a, const void* b, void* out, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    if (handle_ == nullptr) AF_RETURN_IF_ERROR(Setup(stream));
    const float one = 1.0f, zero = 0.0f;
    switch (pass_) {
      case Pass::kForward: {  // a = x, b = filter
        const void* x = a;
        if (padded_ != nullptr) {
          AF_RETURN_IF_ERROR(CudaStatus(LaunchPad(false, static_cast<const float*>(a), padded_, pad_window_, stream), "padding x"));
          x = padded_;
        }
        return CudnnStatus(cudnnConvolutionForward(handle_, &one, x_, x, filter_, b, conv_, forward_, workspace_, workspace_bytes_,
                                                   &zero, y_, out),
                           "cudnnConvolutionForward");
      }
      case Pass::kBackwardData: {  // a = dy, b = filter
        void* dx = padded_ != nullptr ? padded_ : out;
        AF_RETURN_IF_ERROR(CudnnStatus(cudnnConvolutionBackwardData(handle_, &one, filter_, b, y_, a, conv_, backward_data_,
                                                                    workspace_, workspace_bytes_, &zero, x_, dx),
                                       "cudnnConvolutionBackwardData"));
        if (padded_ == nullptr) return Status::Ok();
        // The gradient of the prepadded x, cropped to x's positions.
        return CudaStatus(LaunchPadGrad(false, padded_, static_cast<float*>(out), pad_window_, stream), "cropping dx");
      }
      case Pass::kBackwardFilter: {  // a = dy, b = x
        const void* x = b;
        if (padded_ != nullptr) {
          AF_RETURN_IF_ERROR(CudaStatus(LaunchPad(false, static_cast<const float*>(b), padded_, pad_window_, stream), "padding x"));
          x = padded_;
        }
        return CudnnStatus(cudnnConvolutionBackwardFilter(handle_, &one, x_, x, y_, a, conv_, backward_filter_, workspace_,
                                                          workspace_bytes_, &zero, filter_, out),
                           "cudnnConvolutionBackwardFilter");
      }
    }
    return Internal("unknown convolution pass");
  }

 private:
  Status Setup(cudaStream_t stream) {
    const Window2d& w = s_.win;
    auto i = [](int64_t v) { return static_cast<int>(v); };
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnCreate(&handle_), "cudnnCreate"));
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnSetStream(handle_, stream), "cudnnSetStream"));
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnCreateTensorDescriptor(&x_), "cudnnCreateTensorDescriptor"));
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnCreateTensorDescriptor(&y_), "cudnnCreateTensorDescriptor"));
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnCreateFilterDescriptor(&filter_), "cudnnCreateFilterDescriptor"));
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnCreateConvolutionDescriptor(&conv_), "cudnnCreateConvolutionDescriptor"));
    AF_RETURN_IF_ERROR(CudnnStatus(
        cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(w.n), i(w.c), i(s_.x_h()), i(s_.x_w())),
        "x descriptor"));
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnSetFilter4dDescriptor(filter_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(s_.out_channels),
                                                              i(w.c / s_.groups), i(w.kh), i(w.kw)),
                                   "filter descriptor"));
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnSetConvolution2dDescriptor(conv_, i(s_.pad_h), i(s_.pad_w), i(w.sh), i(w.sw), i(w.dh), i(w.dw),
                                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                                   "convolution descriptor"));
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnSetConvolutionGroupCount(conv_, i(s_.groups)), "cudnnSetConvolutionGroupCount"));
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnSetConvolutionMathType(conv_, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType"));
    int n = 0, c = 0, h = 0, wd = 0;
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnGetConvolution2dForwardOutputDim(conv_, x_, filter_, &n, &c, &h, &wd),
                                   "cudnnGetConvolution2dForwardOutputDim"));
    if (n != w.n || c != s_.out_channels || h != w.oh || wd != w.ow)
      return Unimplemented("cuDNN's output shape (" + std::to_string(n) + "," + std::to_string(c) + "," + std::to_string(h) + "," +
                           std::to_string(wd) + ") differs from the op's (" + std::to_string(w.n) + "," +
                           std::to_string(s_.out_channels) + "," + std::to_string(w.oh) + "," + std::to_string(w.ow) + ")");
    AF_RETURN_IF_ERROR(CudnnStatus(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, wd), "y descriptor"));
    // The heuristics' first usable algorithm, deterministic ones first.
    int returned = 0;
    switch (pass_) {
      case Pass::kForward: {
        cudnnConvolutionFwdAlgoPerf_t perf[8];
        AF_RETURN_IF_ERROR(CudnnStatus(cudnnGetConvolutionForwardAlgorithm_v7(handle_, x_, filter_, conv_, y_, 8, &returned, perf),
                                       "cudnnGetConvolutionForwardAlgorithm_v7"));
        const int k = Pick(perf, returned);
        if (k < 0) return Unimplemented("cuDNN offers no forward algorithm for this convolution");
        forward_ = perf[k].algo;
        AF_RETURN_IF_ERROR(CudnnStatus(
            cudnnGetConvolutionForwardWorkspaceSize(handle_, x_, filter_, conv_, y_, forward_, &workspace_bytes_), "workspace size"));
        break;
      }
      case Pass::kBackwardData: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[8];
        AF_RETURN_IF_ERROR(CudnnStatus(
            cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_, filter_, y_, conv_, x_, 8, &returned, perf),
            "cudnnGetConvolutionBackwardDataAlgorithm_v7"));
        const int k = Pick(perf, returned);
        if (k < 0) return Unimplemented("cuDNN offers no backward-data algorithm for this convolution");
        backward_data_ = perf[k].algo;
        AF_RETURN_IF_ERROR(CudnnStatus(cudnnGetConvolutionBackwardDataWorkspaceSize(handle_, filter_, y_, conv_, x_, backward_data_,
                                                                                    &workspace_bytes_),
                                       "workspace size"));
        break;
      }
      case Pass::kBackwardFilter: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[8];
        AF_RETURN_IF_ERROR(CudnnStatus(
            cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle_, x_, y_, conv_, filter_, 8, &returned, perf),
            "cudnnGetConvolutionBackwardFilterAlgorithm_v7"));
        const int k = Pick(perf, returned);
        if (k < 0) return Unimplemented("cuDNN offers no backward-filter algorithm for this convolution");
        backward_filter_ = perf[k].algo;
        AF_RETURN_IF_ERROR(CudnnStatus(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle_, x_, y_, conv_, filter_,
                                                                                      backward_filter_, &workspace_bytes_),
                                       "workspace size"));
        break;
      }
    }
    if (workspace_bytes_ > 0)
      AF_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&workspace_, workspace_bytes_),
                                    "cudaMalloc of a " + std::to_string(workspace_bytes_) + "-byte cuDNN workspace"));
    if (s_.prepadded()) {
      // x (or its gradient) with the asymmetric part of the padding: (N*C) planes of x_h * x_w.
      pad_window_.planes = w.n * w.c, pad_window_.h = w.h, pad_window_.w = w.w;
      pad_window_.oh = s_.x_h(), pad_window_.ow = s_.x_w(), pad_window_.top = s_.extra_top, pad_window_.left = s_.extra_left;
      const size_t bytes = static_cast<size_t>(pad_window_.planes * pad_window_.oh * pad_window_.ow) * sizeof(float);
      void* buffer = nullptr;
      AF_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&buffer, std::max<size_t>(bytes, 1)),
                                    "cudaMalloc of a " + std::to_string(bytes) + "-byte padded x"));
      padded_ = static_cast<float*>(buffer);
    }
    return Status::Ok();
  }

  const std::string type_;
  const Pass pass_;
  const ConvShape s_;
  std::mutex mu_;
  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t filter_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t forward_{};
  cudnnConvolutionBwdDataAlgo_t backward_data_{};
  cudnnConvolutionBwdFilterAlgo_t backward_filter_{};
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  float* padded_ = nullptr;  // prepadded x or its gradient; null when the padding is symmetric
  PoolWindow pad_window_;    // x -> padded_ (zero_pad2d's geometry)
};

KernelFactory ConvFactory(const std::string& type, Pass pass) {
  return [type, pass](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32(type, init.inputs, "input"));
    AF_ASSIGN_OR_RETURN(ConvShape shape, ReadShape(type, pass, init));
    auto conv = std::make_shared<CudnnConv>(type, pass, shape);
    return CudaKernelWithStatus(type, init, [conv](KernelContext& c, cudaStream_t stream) {
      return conv->Run(c.input(0).data, c.input(1).data, c.output(0).data, stream);
    });
  };
}

}  // namespace

void RegisterConvCudaKernels(OpRegistry& registry) {
  for (auto [type, pass] : {std::pair{"conv2d", Pass::kForward}, std::pair{"conv2d_grad_data", Pass::kBackwardData},
                            std::pair{"conv2d_grad_filter", Pass::kBackwardFilter}}) {
    Status added = registry.AddKernelFactory(type, kCudaDevice, ConvFactory(type, pass));
    if (!added.ok()) throw std::logic_error(added.message());
  }
}

}  // namespace actorflow::cuda

// "cuda" factory of matmul: cuBLAS SGEMM (strided batched for 3-D operands), transposes as the
// CPU kernel's attrs say, and the fusion pass's epilogue (fuse_bias, fuse_relu) as one bias
// kernel over the product. FP32 math (no TF32), so results match the CPU kernel closely.
#include <memory>
#include <mutex>

#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/launch.h"

namespace actorflow::cuda {
namespace {

const char* CublasName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}

Status CublasStatus(cublasStatus_t status, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(what + ": " + CublasName(status) + " (" + std::to_string(static_cast<int>(status)) + ")");
}

// One cuBLAS handle per kernel, bound to its stream, made on the first act (on the device);
// cuBLAS itself is opened then too (cublas_library.h).
class CublasHandle {
 public:
  ~CublasHandle() {
    if (handle_ != nullptr) library_->destroy(handle_);
  }
  // The library and the handle; valid while this object lives.
  StatusOr<std::pair<const CublasLibrary*, cublasHandle_t>> Get(cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    if (handle_ == nullptr) {
      AF_ASSIGN_OR_RETURN(const CublasLibrary* library, Cublas());
      cublasHandle_t handle = nullptr;
      AF_RETURN_IF_ERROR(CublasStatus(library->create(&handle), "cublasCreate"));
      library_ = library;
      handle_ = handle;
      AF_RETURN_IF_ERROR(CublasStatus(library->set_stream(handle_, stream), "cublasSetStream"));
      AF_RETURN_IF_ERROR(CublasStatus(library->set_math_mode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
    }
    return std::make_pair(library_, handle_);
  }

 private:
  std::mutex mu_;
  const CublasLibrary* library_ = nullptr;
  cublasHandle_t handle_ = nullptr;
};

struct Dims {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool a_batched = false, b_batched = false;
};

StatusOr<Dims> ReadDims(const Shape& a, const Shape& b, bool ta, bool tb) {
  if (a.size() < 2 || a.size() > 3 || b.size() < 2 || b.size() > 3)
    return InvalidArgument("matmul on cuda: operands of rank 2 or 3 expected, got " + ShapeToString(a) + " and " +
                           ShapeToString(b));
  Dims d;
  d.a_batched = a.size() == 3;
  d.b_batched = b.size() == 3;
  if (d.a_batched && d.b_batched && a[0] != b[0])
    return InvalidArgument("matmul on cuda: batch sizes differ: " + ShapeToString(a) + " and " + ShapeToString(b));
  d.batch = d.a_batched ? a[0] : d.b_batched ? b[0] : 1;
  const size_t ra = a.size(), rb = b.size();
  d.m = ta ? a[ra - 1] : a[ra - 2];
  d.k = ta ? a[ra - 2] : a[ra - 1];
  const int64_t kb = tb ? b[rb - 1] : b[rb - 2];
  d.n = tb ? b[rb - 2] : b[rb - 1];
  if (kb != d.k) return InvalidArgument("matmul on cuda: inner dimensions differ (" + std::to_string(d.k) + " vs " + std::to_string(kb) + ")");
  return d;
}

}  // namespace

void RegisterMatmulCudaKernels(OpRegistry& registry) {
  Status added = registry.AddKernelFactory("matmul", kCudaDevice, [](const KernelInit& init) -> StatusOr<KernelFn> {
    AF_RETURN_IF_ERROR(ExpectFloat32("matmul", init.inputs, "input"));
    const bool ta = init.attrs.GetBoolOr("transpose_a", false), tb = init.attrs.GetBoolOr("transpose_b", false);
    AF_ASSIGN_OR_RETURN(Dims d, ReadDims(init.inputs[0].shape, init.inputs[1].shape, ta, tb));
    const bool fuse_bias = init.attrs.GetBoolOr("fuse_bias", false), fuse_relu = init.attrs.GetBoolOr("fuse_relu", false);
    if (fuse_bias && (init.inputs.size() != 3 || init.inputs[2].shape != Shape{d.n}))
      return InvalidArgument("matmul with fuse_bias needs a third input 'bias' of shape (" + std::to_string(d.n) + ",), got " +
                             (init.inputs.size() == 3 ? init.inputs[2].ToString() : "none"));
    if (fuse_relu && !fuse_bias) return InvalidArgument("matmul: fuse_relu needs fuse_bias");
    // A batched, untransposed a against a shared b is one (B*M,K)x(K,N) GEMM.
    if (d.a_batched && !d.b_batched && !ta) {
      d.m *= d.batch;
      d.batch = 1;
    }
    for (int64_t v : {d.m, d.n, d.k, d.batch})
      if (v > 2147483647) return Unimplemented("matmul on cuda: a dimension exceeds cuBLAS's int range");
    auto handle = std::make_shared<CublasHandle>();
    return CudaKernelWithStatus("matmul", init, [=](KernelContext& c, cudaStream_t stream) -> Status {
      AF_ASSIGN_OR_RETURN(auto library_and_handle, handle->Get(stream));
      const auto& [cublas, handle_of_stream] = library_and_handle;
      const float alpha = 1.0f, beta = 0.0f;
      const float* a = c.input(0).as<float>();
      const float* b = c.input(1).as<float>();
      float* out = c.output(0).as<float>();
      // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
      const int m = static_cast<int>(d.m), n = static_cast<int>(d.n), k = static_cast<int>(d.k);
      const int lda = ta ? m : k, ldb = tb ? k : n;
      const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
      cublasStatus_t status;
      if (d.batch == 1) {
        status = cublas->sgemm(handle_of_stream, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, out, n);
      } else {
        status = cublas->sgemm_strided_batched(handle_of_stream, op_b, op_a, n, m, k, &alpha, b, ldb,
                                               d.b_batched ? d.k * d.n : 0, a, lda, d.a_batched ? d.m * d.k : 0, &beta,
                                               out, n, d.m * d.n, static_cast<int>(d.batch));
      }
      AF_RETURN_IF_ERROR(CublasStatus(status, d.batch == 1 ? "cublasSgemm" : "cublasSgemmStridedBatched"));
      if (!fuse_bias) return Status::Ok();
      return CudaStatus(LaunchBiasAdd(out, c.input(2).as<float>(), out, d.m * d.batch, d.n, 1, fuse_relu, stream),
                        "bias epilogue");
    });
  });
  if (!added.ok()) throw std::logic_error(added.message());
}

}  // namespace actorflow::cuda

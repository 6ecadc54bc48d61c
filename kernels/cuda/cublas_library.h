// cuBLAS, opened on first use (dlopen) instead of linked: loading libcublas maps and initialises
// libcublasLt, ~148 MiB resident, so linking it cost every `import actorflow` of a CUDA build
// that much memory on hosts that never run a GPU matmul (its whole import was ~199 MiB).
// Thread-safe; the library stays loaded until the process ends.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "actors/status.h"

namespace actorflow::cuda {

// The cuBLAS entry points the "cuda" kernels call (names as in cublas_v2.h).
struct CublasLibrary {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
};

// Opens libcublas.so.<CUBLAS_VER_MAJOR> (the dynamic loader's search path, then the directory
// of the CUDA runtime this process loaded) and resolves every entry point, once; later calls
// return the same table or the same error (FailedPrecondition naming the library, the paths
// tried and dlerror's reason).
StatusOr<const CublasLibrary*> Cublas();

// Whether this process has loaded libcublas (by Cublas() or otherwise). For tests.
bool CublasLoaded();

}  // namespace actorflow::cuda

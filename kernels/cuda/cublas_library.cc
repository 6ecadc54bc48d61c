#include "kernels/cuda/cublas_library.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <mutex>

namespace actorflow::cuda {
namespace {

#define AF_CUBLAS_STRING(name) #name
// The exported symbol a cublas_v2.h name stands for (cublasCreate -> "cublasCreate_v2").
#define AF_CUBLAS_SYMBOL(name) AF_CUBLAS_STRING(name)

const std::string& LibraryName() {
  static const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  return name;
}

// The directory of the CUDA runtime library this process runs (cuBLAS ships beside it).
std::string CudartDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

template <typename Fn>
Status Resolve(void* library, const char* symbol, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (*out != nullptr) return Status::Ok();
  return FailedPrecondition(LibraryName() + " has no symbol '" + symbol + "' (expected cuBLAS " +
                            std::to_string(CUBLAS_VER_MAJOR) + ", the version actorflow was built with)");
}

StatusOr<const CublasLibrary*> Open() {
  std::string tried = LibraryName();
  void* library = dlopen(LibraryName().c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string reason = library == nullptr ? dlerror() : "";
  if (library == nullptr) {
    const std::string beside_cudart = CudartDirectory() + LibraryName();
    if (beside_cudart != LibraryName()) {
      tried += ", " + beside_cudart;
      library = dlopen(beside_cudart.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (library == nullptr) reason += "; " + std::string(dlerror());
    }
  }
  if (library == nullptr)
    return FailedPrecondition("cuBLAS is needed by the \"cuda\" matmul kernels but could not be opened (tried " +
                              tried + "): " + reason);
  static CublasLibrary table;
  AF_RETURN_IF_ERROR(Resolve(library, AF_CUBLAS_SYMBOL(cublasCreate), &table.create));
  AF_RETURN_IF_ERROR(Resolve(library, AF_CUBLAS_SYMBOL(cublasDestroy), &table.destroy));
  AF_RETURN_IF_ERROR(Resolve(library, AF_CUBLAS_SYMBOL(cublasSetStream), &table.set_stream));
  AF_RETURN_IF_ERROR(Resolve(library, AF_CUBLAS_SYMBOL(cublasSetMathMode), &table.set_math_mode));
  AF_RETURN_IF_ERROR(Resolve(library, AF_CUBLAS_SYMBOL(cublasSgemm), &table.sgemm));
  AF_RETURN_IF_ERROR(Resolve(library, AF_CUBLAS_SYMBOL(cublasSgemmStridedBatched), &table.sgemm_strided_batched));
  return &table;
}

}  // namespace

StatusOr<const CublasLibrary*> Cublas() {
  static const StatusOr<const CublasLibrary*> opened = Open();
  return opened;
}

bool CublasLoaded() {
  void* library = dlopen(LibraryName().c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return false;
  dlclose(library);  // drops the reference RTLD_NOLOAD took
  return true;
}

}  // namespace actorflow::cuda

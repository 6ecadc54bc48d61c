// cuBLAS opened on first use (cublas_library.h): no GPU needed, only the library.
#include "kernels/cuda/cublas_library.h"

#include <gtest/gtest.h>

namespace actorflow::cuda {
namespace {

TEST(CublasLibrary, OpensOnFirstUseAndResolvesEveryEntryPoint) {
  // This binary links the kernels, which no longer link cuBLAS: nothing loaded it yet.
  EXPECT_FALSE(CublasLoaded());
  StatusOr<const CublasLibrary*> library = Cublas();
  ASSERT_TRUE(library.ok()) << library.status().ToString();
  const CublasLibrary& table = **library;
  EXPECT_NE(table.create, nullptr);
  EXPECT_NE(table.destroy, nullptr);
  EXPECT_NE(table.set_stream, nullptr);
  EXPECT_NE(table.set_math_mode, nullptr);
  EXPECT_NE(table.sgemm, nullptr);
  EXPECT_NE(table.sgemm_strided_batched, nullptr);
  EXPECT_TRUE(CublasLoaded());
  StatusOr<const CublasLibrary*> again = Cublas();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *library);
}

}  // namespace
}  // namespace actorflow::cuda

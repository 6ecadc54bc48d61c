// Tensor descriptions and non-owning tensor views over register memory.
// Registers own memory; kernels only ever see TensorView (pointer + desc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/status.h"

namespace actorflow {

// The C++ spelling of the plan's DataType (actors/proto/plan.proto); actors/plan_dtype.h
// converts between them and fails to compile if they ever disagree.
enum class DType : int32_t { kInvalid = 0, kFloat32 = 1, kFloat64 = 2, kInt8 = 3, kInt32 = 4, kInt64 = 5, kUInt8 = 6 };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);  // "float32", "int32", ...

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);  // "(100, 784)"

struct TensorDesc {
  Shape shape;
  DType dtype = DType::kFloat32;
  int64_t num_elements() const { return NumElements(shape); }
  size_t byte_size() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype); }
  std::string ToString() const;  // "float32(100, 784)"
  bool operator==(const TensorDesc& o) const { return shape == o.shape && dtype == o.dtype; }
  bool operator!=(const TensorDesc& o) const { return !(*this == o); }
};

// OK when `desc` has a known dtype and no negative dimension; otherwise an InvalidArgument
// naming `what` ("input 'x'"), what was expected and what came.
Status ValidateTensorDesc(const TensorDesc& desc, const std::string& what);

// A view of contiguous, row-major tensor memory. Does not own `data`.
struct TensorView {
  void* data = nullptr;
  TensorDesc desc;
  template <typename T> T* as() const { return static_cast<T*>(data); }
  int64_t num_elements() const { return desc.num_elements(); }
  size_t byte_size() const { return desc.byte_size(); }
  const Shape& shape() const { return desc.shape; }
  DType dtype() const { return desc.dtype; }
};

}  // namespace actorflow

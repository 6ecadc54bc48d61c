// Small helpers shared by the op families: dtype dispatch and inference checks.
#pragma once

#include <string>

#include "actors/status.h"
#include "actors/tensor.h"
#include "kernels/op_registry.h"

namespace actorflow {

inline Status ExpectFloat(const TensorDesc& desc, const char* what) {
  if (desc.dtype == DType::kFloat32 || desc.dtype == DType::kFloat64) return Status::Ok();
  return InvalidArgument(std::string(what) + " must be float32 or float64, got " + DTypeName(desc.dtype));
}

inline Status ExpectSameDType(const TensorDesc& a, const TensorDesc& b, const char* what_a, const char* what_b) {
  if (a.dtype == b.dtype) return Status::Ok();
  return InvalidArgument(std::string(what_a) + " is " + DTypeName(a.dtype) + " but " + what_b + " is " + DTypeName(b.dtype));
}

inline Status ExpectRank(const TensorDesc& desc, size_t rank, const char* what) {
  if (desc.shape.size() == rank) return Status::Ok();
  return InvalidArgument(std::string(what) + " must have rank " + std::to_string(rank) + ", got shape " +
                         ShapeToString(desc.shape));
}

// Calls body.template operator()<T>() with T = float or double by dtype.
template <typename Body>
auto DispatchFloat(DType dtype, Body&& body) {
  if (dtype == DType::kFloat64) return body.template operator()<double>();
  return body.template operator()<float>();
}

// A kernel built from a per-dtype lambda: [](KernelContext&) -> Status.
#define AF_FLOAT_KERNEL(init, T, ...)                                   \
  DispatchFloat((init).inputs.empty() ? (init).outputs[0].dtype : (init).inputs[0].dtype, \
                [&]<typename T>() -> StatusOr<KernelFn> { return KernelFn(__VA_ARGS__); })

}  // namespace actorflow

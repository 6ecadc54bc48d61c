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

// NaN semantics follow NumPy: max, max pooling and relu of a NaN are NaN (NaN compares false,
// so `a > b ? a : b` alone would drop it). Both are selects, so loops still vectorize.
// max(a, b), NaN if either is NaN (np.maximum).
template <typename T>
inline T NanMax(T a, T b) {
  return (a > b || a != a) ? a : b;
}
// Whether `v` replaces `best` in an argmax scan: larger, or the first NaN (np.argmax).
template <typename T>
inline bool NanBeats(T v, T best) {
  return v > best || (v != v && best == best);
}
// Whether `x` is the maximum `y` a max chose (equal, or both NaN): where its gradient goes.
template <typename T>
inline bool NanSame(T x, T y) {
  return x == y || (x != x && y != y);
}
// relu that keeps NaN (np.maximum(x, 0)); -0.0 stays -0.0.
template <typename T>
inline T NanRelu(T x) {
  return x < T(0) ? T(0) : x;
}

// A tensor viewed as (outer, C, inner) around `axis`.
struct AxisSplit {
  int64_t outer = 1, channels = 1, inner = 1;
};
inline AxisSplit SplitAt(const Shape& s, int64_t axis) {
  AxisSplit a;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    if (i < axis) a.outer *= s[i];
    else if (i == axis) a.channels = s[i];
    else a.inner *= s[i];
  }
  return a;
}

// Resolves a negative axis against `rank`; error names the attribute and the valid range.
inline StatusOr<int64_t> NormalizeAxis(int64_t axis, size_t rank, const char* what) {
  int64_t r = static_cast<int64_t>(rank);
  int64_t a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r)
    return InvalidArgument(std::string(what) + " " + std::to_string(axis) + " is out of range for a tensor of rank " +
                           std::to_string(rank) + " (valid: " + std::to_string(-r) + " to " + std::to_string(r - 1) + ")");
  return a;
}

// Error for an attribute string outside its set of valid values.
inline Status BadChoice(const std::string& attr, const std::string& got, const std::string& valid) {
  return InvalidArgument("attribute '" + attr + "' is \"" + got + "\"; valid values: " + valid);
}

// "float32" / "float" / "float64" / "double" / "int8" / "int32" / "int64" / "uint8" (misc.cc).
StatusOr<DType> ParseDType(const std::string& name);

// Calls body.template operator()<T>() with T = float or double by dtype; other dtypes give an
// InvalidArgument naming the dtype (body returns StatusOr<KernelFn>).
template <typename Body>
auto DispatchFloat(DType dtype, Body&& body) -> decltype(body.template operator()<float>()) {
  if (dtype == DType::kFloat64) return body.template operator()<double>();
  if (dtype == DType::kFloat32) return body.template operator()<float>();
  return InvalidArgument(std::string("expected float32 or float64, got ") + DTypeName(dtype));
}

// As DispatchFloat, plus int32 and int64.
template <typename Body>
auto DispatchNumeric(DType dtype, Body&& body) -> decltype(body.template operator()<float>()) {
  if (dtype == DType::kInt32) return body.template operator()<int32_t>();
  if (dtype == DType::kInt64) return body.template operator()<int64_t>();
  return DispatchFloat(dtype, std::forward<Body>(body));
}

}  // namespace actorflow

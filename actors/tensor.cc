#include "actors/tensor.h"

#include <sstream>

namespace actorflow {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt8: return 1;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
    default: return 0;
  }
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt8: return "int8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
    default: return "invalid";
  }
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) out << ",";
  out << ")";
  return out.str();
}

Status ValidateTensorDesc(const TensorDesc& desc, const std::string& what) {
  if (DTypeSize(desc.dtype) == 0)
    return InvalidArgument(what + ": unknown dtype " + std::to_string(static_cast<int32_t>(desc.dtype)));
  for (size_t i = 0; i < desc.shape.size(); ++i)
    if (desc.shape[i] < 0)
      return InvalidArgument(what + ": dimension " + std::to_string(i) + " of shape " + ShapeToString(desc.shape) +
                             " is negative (expected >= 0)");
  return Status::Ok();
}

std::string TensorDesc::ToString() const { return std::string(DTypeName(dtype)) + ShapeToString(shape); }

}  // namespace actorflow

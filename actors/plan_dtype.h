// The one conversion between the plan's DataType (actors/proto/plan.proto, the schema) and
// actorflow::DType (actors/tensor.h, its C++ spelling). The static_asserts make a change to
// either enum that breaks the correspondence a compile error, not a silent mismatch.
#pragma once

#include "actors/proto/plan.pb.h"
#include "actors/tensor.h"

namespace actorflow {

static_assert(static_cast<int>(DType::kInvalid) == plan::DT_INVALID);
static_assert(static_cast<int>(DType::kFloat32) == plan::DT_FLOAT32);
static_assert(static_cast<int>(DType::kFloat64) == plan::DT_FLOAT64);
static_assert(static_cast<int>(DType::kInt8) == plan::DT_INT8);
static_assert(static_cast<int>(DType::kInt32) == plan::DT_INT32);
static_assert(static_cast<int>(DType::kInt64) == plan::DT_INT64);
static_assert(static_cast<int>(DType::kUInt8) == plan::DT_UINT8);
static_assert(plan::DataType_MAX == static_cast<int>(DType::kUInt8), "a DataType without a DType");

inline plan::DataType ToProtoDType(DType dtype) { return static_cast<plan::DataType>(static_cast<int>(dtype)); }
// A value outside the enum (a plan from a newer writer) becomes kInvalid, which every size
// check rejects.
inline DType FromProtoDType(int dtype) {
  return plan::DataType_IsValid(dtype) ? static_cast<DType>(dtype) : DType::kInvalid;
}

}  // namespace actorflow

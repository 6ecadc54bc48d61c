// Conversion between the registry's Attrs (kernels/op_registry.h) and the protobuf AttrValue
// shared by job.proto and plan.proto. Lossless both ways.
#pragma once

#include <google/protobuf/map.h>

#include "actors/tensor.h"
#include "actors/plan_dtype.h"
#include "actors/proto/plan.pb.h"
#include "kernels/op_registry.h"

namespace actorflow {
namespace graph {

plan::AttrValue ToProtoAttr(const AttrValue& value);
AttrValue FromProtoAttr(const plan::AttrValue& value);
void AttrsToProto(const Attrs& attrs, google::protobuf::Map<std::string, plan::AttrValue>* out);
Attrs AttrsFromProto(const google::protobuf::Map<std::string, plan::AttrValue>& attrs);

// "float32" -> kFloat32; InvalidArgument naming the string and the accepted ones otherwise.
StatusOr<DType> ParseDType(const std::string& name);

}  // namespace graph
}  // namespace actorflow

#include "graph/attr_convert.h"

namespace actorflow {
namespace graph {

plan::AttrValue ToProtoAttr(const AttrValue& value) {
  plan::AttrValue out;
  if (auto* i = std::get_if<int64_t>(&value)) out.set_i(*i);
  else if (auto* f = std::get_if<double>(&value)) out.set_f(*f);
  else if (auto* b = std::get_if<bool>(&value)) out.set_b(*b);
  else if (auto* s = std::get_if<std::string>(&value)) out.set_s(*s);
  else if (auto* is = std::get_if<std::vector<int64_t>>(&value)) for (int64_t v : *is) out.mutable_ints()->add_values(v);
  else if (auto* fs = std::get_if<std::vector<double>>(&value)) for (double v : *fs) out.mutable_floats()->add_values(v);
  return out;
}

AttrValue FromProtoAttr(const plan::AttrValue& value) {
  switch (value.value_case()) {
    case plan::AttrValue::kI: return value.i();
    case plan::AttrValue::kF: return value.f();
    case plan::AttrValue::kB: return value.b();
    case plan::AttrValue::kS: return value.s();
    case plan::AttrValue::kInts: return std::vector<int64_t>(value.ints().values().begin(), value.ints().values().end());
    case plan::AttrValue::kFloats:
      return std::vector<double>(value.floats().values().begin(), value.floats().values().end());
    default: return std::vector<int64_t>{};  // an empty list set from Python has no element type
  }
}

void AttrsToProto(const Attrs& attrs, google::protobuf::Map<std::string, plan::AttrValue>* out) {
  for (const auto& [name, value] : attrs.values()) (*out)[name] = ToProtoAttr(value);
}

Attrs AttrsFromProto(const google::protobuf::Map<std::string, plan::AttrValue>& attrs) {
  Attrs out;
  for (const auto& [name, value] : attrs) out.Set(name, FromProtoAttr(value));
  return out;
}


StatusOr<DType> ParseDType(const std::string& name) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kInt32, DType::kInt64, DType::kUInt8})
    if (name == DTypeName(d)) return d;
  if (name == "float") return DType::kFloat32;
  if (name == "double") return DType::kFloat64;
  return InvalidArgument("unknown dtype '" + name + "' (expected one of float32, float64, int8, int32, int64, uint8)");
}

}  // namespace graph
}  // namespace actorflow

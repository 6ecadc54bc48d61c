#include "kernels/op_registry.h"

#include <algorithm>
#include <mutex>
#include <optional>

namespace actorflow {
namespace {

template <typename T>
const char* KindName() {
  if constexpr (std::is_same_v<T, int64_t>) return "an int";
  if constexpr (std::is_same_v<T, double>) return "a float";
  if constexpr (std::is_same_v<T, bool>) return "a bool";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) return "a list of ints";
  return "a list of floats";
}

template <typename T>
StatusOr<T> Get(const std::map<std::string, AttrValue>& values, const std::string& name) {
  auto it = values.find(name);
  if (it == values.end()) return InvalidArgument("missing attribute '" + name + "'");
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  return InvalidArgument("attribute '" + name + "' must be " + KindName<T>());
}

}  // namespace

namespace {

// The conversions every getter accepts (a bool as an int, an int as a float or a bool); null
// where the value has another type.
std::optional<int64_t> AsInt(const AttrValue& value) {
  if (const int64_t* i = std::get_if<int64_t>(&value)) return *i;
  if (const bool* b = std::get_if<bool>(&value)) return static_cast<int64_t>(*b);
  return std::nullopt;
}
std::optional<double> AsFloat(const AttrValue& value) {
  if (const double* d = std::get_if<double>(&value)) return *d;
  if (const int64_t* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
  return std::nullopt;
}
std::optional<bool> AsBool(const AttrValue& value) {
  if (const bool* b = std::get_if<bool>(&value)) return *b;
  if (const int64_t* i = std::get_if<int64_t>(&value)) return *i != 0;
  return std::nullopt;
}

}  // namespace

StatusOr<int64_t> Attrs::GetInt(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end())
    if (auto v = AsInt(it->second)) return *v;
  return Get<int64_t>(values_, name);
}
StatusOr<double> Attrs::GetFloat(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end())
    if (auto v = AsFloat(it->second)) return *v;
  return Get<double>(values_, name);
}
StatusOr<bool> Attrs::GetBool(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end())
    if (auto v = AsBool(it->second)) return *v;
  return Get<bool>(values_, name);
}
StatusOr<std::string> Attrs::GetString(const std::string& name) const { return Get<std::string>(values_, name); }
StatusOr<std::vector<int64_t>> Attrs::GetInts(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end())
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return std::vector<int64_t>{*i};
  if (it != values_.end())  // an empty list carries no element type
    if (const auto* f = std::get_if<std::vector<double>>(&it->second); f && f->empty()) return std::vector<int64_t>{};
  return Get<std::vector<int64_t>>(values_, name);
}
StatusOr<std::vector<double>> Attrs::GetFloats(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end())
    if (const auto* i = std::get_if<std::vector<int64_t>>(&it->second)) return std::vector<double>(i->begin(), i->end());
  return Get<std::vector<double>>(values_, name);
}
// The *Or getters answer the fallback without building the error a Get* would return: a
// compile asks for many attributes an op does not set (fusion flags, layouts), once per op.
int64_t Attrs::GetIntOr(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : AsInt(it->second).value_or(fallback);
}
double Attrs::GetFloatOr(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : AsFloat(it->second).value_or(fallback);
}
bool Attrs::GetBoolOr(const std::string& name, bool fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : AsBool(it->second).value_or(fallback);
}
std::string Attrs::GetStringOr(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (const std::string* v = std::get_if<std::string>(&it->second)) return *v;
  return fallback;
}

StatusOr<std::string> GradBuilder::AddOp1(const std::string& type, const std::vector<std::string>& inputs,
                                          const Attrs& attrs) {
  AF_ASSIGN_OR_RETURN(std::vector<std::string> outputs, AddOp(type, inputs, attrs));
  if (outputs.empty()) return Internal("op " + type + " has no outputs");
  return outputs[0];
}

OpRegistry& OpRegistry::Global() {
  static OpRegistry registry;
  return registry;
}

void OpRegistry::Register(OpDef def) {
  std::string type = def.type;
  defs_[type] = std::move(def);
}

Status OpRegistry::AddKernelFactory(const std::string& type, const std::string& device_type, KernelFactory factory) {
  auto it = defs_.find(type);
  if (it == defs_.end()) return NotFound("cannot add a '" + device_type + "' kernel to unknown op type '" + type + "'");
  if (it->second.kernel_factories.count(device_type))
    return InvalidArgument("op '" + type + "' already has a '" + device_type + "' kernel");
  it->second.kernel_factories[device_type] = std::move(factory);
  return Status::Ok();
}

StatusOr<const OpDef*> OpRegistry::Find(const std::string& type) const {
  auto it = defs_.find(type);
  if (it != defs_.end()) return &it->second;
  std::string near;
  for (const auto& [name, def] : defs_)
    if (name.find(type) != std::string::npos || type.find(name) != std::string::npos) near += (near.empty() ? "" : ", ") + name;
  return NotFound("unknown op type '" + type + "'" + (near.empty() ? "" : " (did you mean: " + near + "?)"));
}

std::vector<std::string> OpRegistry::Types() const {
  std::vector<std::string> types;
  for (const auto& [name, def] : defs_) types.push_back(name);
  return types;
}

StatusOr<KernelFn> MakeKernel(const std::string& type, const KernelInit& init) {
  RegisterAllOps();
  AF_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(type));
  auto factory = def->kernel_factories.find(init.device_type);
  if (factory == def->kernel_factories.end() || !factory->second) {
    std::string devices;
    for (const auto& [device, unused] : def->kernel_factories) devices += (devices.empty() ? "" : ", ") + device;
    return Unimplemented("op '" + type + "' has no kernel for device type '" + init.device_type + "' (has: " +
                         (devices.empty() ? "none" : devices) + ")");
  }
  return factory->second(init);
}

StatusOr<KernelFn> MakeCpuKernel(const std::string& type, const KernelInit& init) {
  if (init.device_type == kCpuDevice) return MakeKernel(type, init);  // no copy of the descs and attributes
  KernelInit cpu = init;
  cpu.device_type = kCpuDevice;
  return MakeKernel(type, cpu);
}

StatusOr<std::vector<SbpSignature>> CandidateSbpSignatures(const OpDef& def, const SbpContext& context) {
  const size_t num_inputs = context.inputs.size(), num_outputs = context.outputs.size();
  if (!def.sbp) {
    SbpSignature whole;
    whole.inputs.assign(num_inputs, Sbp::Broadcast());
    whole.outputs.assign(num_outputs, Sbp::Broadcast());
    return std::vector<SbpSignature>{whole};
  }
  AF_ASSIGN_OR_RETURN(std::vector<SbpSignature> signatures, def.sbp(context));
  for (const SbpSignature& s : signatures) {
    if (s.inputs.size() != num_inputs || s.outputs.size() != num_outputs || s.repeat_last_input ||
        !s.condition.empty())
      return Internal("op type '" + def.type + "': SBP function gave '" + s.ToString() + "' for " +
                      std::to_string(num_inputs) + " inputs and " + std::to_string(num_outputs) +
                      " outputs (a concrete signature lists each one, without condition)");
    for (const std::vector<Sbp>* list : {&s.inputs, &s.outputs})
      for (const Sbp& sbp : *list)
        if (sbp.kind == SbpKind::kSplit && sbp.axis == Sbp::kEachAxis)
          return Internal("op type '" + def.type + "': SBP function gave '" + s.ToString() + "' with an unresolved axis");
  }
  return signatures;
}

StatusOr<Attrs> PhysicalAttrs(const OpDef& def, const PhysicalContext& context) {
  if (!def.physical_attrs) return context.attrs;
  return def.physical_attrs(context);
}

}  // namespace actorflow

#include "kernels/testing/eager_grad.h"

#include <cmath>
#include <cstring>

namespace actorflow::testing {

HostTensor HostTensor::Of(const Shape& shape, DType dtype, const std::vector<double>& values) {
  HostTensor t;
  t.desc = TensorDesc{shape, dtype};
  t.bytes.assign(t.desc.byte_size(), 0);
  for (int64_t i = 0; i < t.desc.num_elements() && i < static_cast<int64_t>(values.size()); ++i) t.set(i, values[i]);
  return t;
}

double HostTensor::at(int64_t i) const {
  switch (desc.dtype) {
    case DType::kFloat32: return reinterpret_cast<const float*>(bytes.data())[i];
    case DType::kFloat64: return reinterpret_cast<const double*>(bytes.data())[i];
    case DType::kInt8: return reinterpret_cast<const int8_t*>(bytes.data())[i];
    case DType::kUInt8: return reinterpret_cast<const uint8_t*>(bytes.data())[i];
    case DType::kInt32: return reinterpret_cast<const int32_t*>(bytes.data())[i];
    case DType::kInt64: return static_cast<double>(reinterpret_cast<const int64_t*>(bytes.data())[i]);
    default: return 0;
  }
}

void HostTensor::set(int64_t i, double v) {
  switch (desc.dtype) {
    case DType::kFloat32: reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(v); break;
    case DType::kFloat64: reinterpret_cast<double*>(bytes.data())[i] = v; break;
    case DType::kInt8: reinterpret_cast<int8_t*>(bytes.data())[i] = static_cast<int8_t>(v); break;
    case DType::kUInt8: reinterpret_cast<uint8_t*>(bytes.data())[i] = static_cast<uint8_t>(v); break;
    case DType::kInt32: reinterpret_cast<int32_t*>(bytes.data())[i] = static_cast<int32_t>(v); break;
    case DType::kInt64: reinterpret_cast<int64_t*>(bytes.data())[i] = static_cast<int64_t>(v); break;
    default: break;
  }
}

StatusOr<std::vector<HostTensor>> RunOp(const std::string& type, std::vector<HostTensor> inputs, const Attrs& attrs) {
  return RunOpInPlace(type, inputs, attrs);
}

StatusOr<std::vector<HostTensor>> RunOpInPlace(const std::string& type, std::vector<HostTensor>& inputs, const Attrs& attrs) {
  RegisterAllOps();
  AF_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(type));
  InferContext infer;
  for (const HostTensor& t : inputs) infer.inputs.push_back(t.desc);
  infer.attrs = attrs;
  AF_RETURN_IF_ERROR(def->infer(infer));
  KernelInit init{infer.inputs, infer.outputs, attrs, 1};
  AF_ASSIGN_OR_RETURN(KernelFn kernel, def->kernel_factories.at(kCpuDevice)(init));
  std::vector<HostTensor> outputs;
  for (const TensorDesc& d : infer.outputs) outputs.push_back(HostTensor::Of(d.shape, d.dtype, {}));
  std::vector<TensorView> in_views, out_views;
  for (HostTensor& t : inputs) in_views.push_back(t.view());
  for (HostTensor& t : outputs) out_views.push_back(t.view());
  KernelContext ctx{&in_views, &out_views, 0};
  AF_RETURN_IF_ERROR(kernel(ctx));
  return outputs;
}

namespace {

// Holds eager tensors by reference name; AddOp runs immediately.
class EagerGradBuilder : public GradBuilder {
 public:
  EagerGradBuilder(const std::string& type, const Attrs& attrs, std::map<std::string, HostTensor>* tensors, int num_inputs,
                   int num_outputs, std::vector<int> checked, int weighted)
      : type_(type), attrs_(attrs), tensors_(tensors), num_inputs_(num_inputs), num_outputs_(num_outputs),
        checked_(std::move(checked)), grads_(num_inputs), weighted_(weighted) {}
  const std::string& op_name() const override { return type_; }
  const Attrs& attrs() const override { return attrs_; }
  int num_inputs() const override { return num_inputs_; }
  int num_outputs() const override { return num_outputs_; }
  std::string input(int i) const override { return "in" + std::to_string(i); }
  std::string output(int i) const override { return "out" + std::to_string(i); }
  std::string output_grad(int i) const override { return i < weighted_ ? "dout" + std::to_string(i) : ""; }
  const TensorDesc& input_desc(int i) const override { return tensors_->at(input(i)).desc; }
  const TensorDesc& output_desc(int i) const override { return tensors_->at(output(i)).desc; }
  bool needs_input_grad(int i) const override {
    for (int c : checked_) if (c == i) return true;
    return false;
  }
  StatusOr<std::vector<std::string>> AddOp(const std::string& type, const std::vector<std::string>& inputs,
                                           const Attrs& attrs) override {
    std::vector<HostTensor> in;
    for (const std::string& name : inputs) {
      auto it = tensors_->find(name);
      if (it == tensors_->end()) return Internal("eager: unknown tensor " + name);
      in.push_back(it->second);
    }
    AF_ASSIGN_OR_RETURN(std::vector<HostTensor> out, RunOp(type, in, attrs));
    std::vector<std::string> names;
    for (HostTensor& t : out) {
      std::string name = "t" + std::to_string(counter_++);
      tensors_->emplace(name, std::move(t));
      names.push_back(name);
    }
    return names;
  }
  void SetInputGrad(int i, const std::string& ref) override { grads_[i] = ref; }
  const std::vector<std::string>& grads() const { return grads_; }

 private:
  std::string type_;
  Attrs attrs_;
  std::map<std::string, HostTensor>* tensors_;
  int num_inputs_, num_outputs_;
  std::vector<int> checked_;
  std::vector<std::string> grads_;
  int weighted_;
  int counter_ = 0;
};

double Weight(int64_t k, int64_t i) { return std::sin(0.7 * static_cast<double>(i) + 1.3 * static_cast<double>(k) + 0.1); }

StatusOr<double> Objective(const std::string& type, const std::vector<HostTensor>& inputs, const Attrs& attrs,
                           int num_differentiable_outputs) {
  AF_ASSIGN_OR_RETURN(std::vector<HostTensor> out, RunOp(type, inputs, attrs));
  double total = 0;
  for (int k = 0; k < num_differentiable_outputs; ++k)
    for (int64_t i = 0; i < out[k].desc.num_elements(); ++i) total += out[k].at(i) * Weight(k, i);
  return total;
}

}  // namespace

StatusOr<double> GradientError(const std::string& type, const std::vector<HostTensor>& inputs, const Attrs& attrs,
                               const std::vector<int>& check_inputs, double eps, int weighted_outputs) {
  AF_ASSIGN_OR_RETURN(std::vector<HostTensor> outputs, RunOp(type, inputs, attrs));
  AF_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().Find(type));
  if (!def->grad) return FailedPrecondition(type + " has no gradient rule");
  int weighted = weighted_outputs < 0 ? static_cast<int>(outputs.size()) : weighted_outputs;
  std::map<std::string, HostTensor> tensors;
  for (size_t i = 0; i < inputs.size(); ++i) tensors["in" + std::to_string(i)] = inputs[i];
  for (size_t k = 0; k < outputs.size(); ++k) {
    tensors["out" + std::to_string(k)] = outputs[k];
    HostTensor d = HostTensor::Of(outputs[k].desc.shape, outputs[k].desc.dtype, {});
    for (int64_t i = 0; i < d.desc.num_elements(); ++i) d.set(i, static_cast<int>(k) < weighted ? Weight(k, i) : 0.0);
    tensors["dout" + std::to_string(k)] = d;
  }
  EagerGradBuilder builder(type, attrs, &tensors, static_cast<int>(inputs.size()), static_cast<int>(outputs.size()), check_inputs,
                           weighted);
  AF_RETURN_IF_ERROR(def->grad(builder));
  double worst = 0;
  for (int i : check_inputs) {
    if (builder.grads()[i].empty()) return Internal("gradient rule set no gradient for input " + std::to_string(i));
    const HostTensor& analytic = tensors.at(builder.grads()[i]);
    if (analytic.desc != inputs[i].desc)
      return Internal("gradient of input " + std::to_string(i) + " is " + analytic.desc.ToString() + ", expected " +
                      inputs[i].desc.ToString());
    for (int64_t e = 0; e < inputs[i].desc.num_elements(); ++e) {
      std::vector<HostTensor> plus = inputs, minus = inputs;
      plus[i].set(e, inputs[i].at(e) + eps);
      minus[i].set(e, inputs[i].at(e) - eps);
      AF_ASSIGN_OR_RETURN(double fp, Objective(type, plus, attrs, weighted));
      AF_ASSIGN_OR_RETURN(double fm, Objective(type, minus, attrs, weighted));
      double numeric = (fp - fm) / (2 * eps), a = analytic.at(e);
      worst = std::max(worst, std::abs(numeric - a) / std::max(1.0, std::abs(numeric)));
    }
  }
  return worst;
}

}  // namespace actorflow::testing

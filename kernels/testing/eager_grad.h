// Test-only: runs an op and its gradient rule eagerly (every AddOp executes at once through
// its CPU kernel), to check gradients against central finite differences.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kernels/op_registry.h"

namespace actorflow::testing {

// A host tensor of doubles (or ints for labels) with its desc.
struct HostTensor {
  TensorDesc desc;
  std::vector<char> bytes;
  static HostTensor Of(const Shape& shape, DType dtype, const std::vector<double>& values);
  double at(int64_t i) const;
  void set(int64_t i, double v);
  TensorView view() { return TensorView{bytes.data(), desc}; }
};

// Runs `type` forward; returns outputs or an error.
StatusOr<std::vector<HostTensor>> RunOp(const std::string& type, std::vector<HostTensor> inputs, const Attrs& attrs);
// RunOp on `inputs` themselves: what an in-place op writes (optimizer updates, moving
// statistics) stays visible in them.
StatusOr<std::vector<HostTensor>> RunOpInPlace(const std::string& type, std::vector<HostTensor>& inputs, const Attrs& attrs);

// Max relative error between the gradient rule's input gradients and central differences of
// L = sum_k sum(output_k * weight_k) with fixed pseudo-random weights, over `check_inputs`.
// Only the first `weighted_outputs` outputs carry weight (-1: all); the others get an empty
// output_grad, as the autodiff pass gives outputs saved only for backward (e.g. xent's prob).
StatusOr<double> GradientError(const std::string& type, const std::vector<HostTensor>& inputs, const Attrs& attrs,
                               const std::vector<int>& check_inputs, double eps = 1e-6, int weighted_outputs = -1);

}  // namespace actorflow::testing

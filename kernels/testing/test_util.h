// Test-only helpers shared by the kernels' *_test.cc files: deterministic inputs and a
// one-line gradient check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/testing/eager_grad.h"

namespace actorflow::testing {

// Deterministic values in about [-1, 1] with no repeats (max/argmax ties would be ambiguous).
inline std::vector<double> Ramp(int64_t n, double phase = 0.4) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<double>(i) * 1.7 + phase) * (1.0 + 1e-3 * static_cast<double>(i));
  return v;
}
inline std::vector<double> Positive(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.5 + 0.1 * static_cast<double>(i % 7) + 1e-3 * static_cast<double>(i);
  return v;
}
inline HostTensor F64(const Shape& s, std::vector<double> v = {}) {
  if (v.empty()) v = Ramp(NumElements(s));
  return HostTensor::Of(s, DType::kFloat64, v);
}
inline HostTensor F32(const Shape& s, std::vector<double> v = {}) {
  if (v.empty()) v = Ramp(NumElements(s));
  return HostTensor::Of(s, DType::kFloat32, v);
}
inline HostTensor I32(const Shape& s, std::vector<double> v) { return HostTensor::Of(s, DType::kInt32, v); }
inline HostTensor I64(const Shape& s, std::vector<double> v) { return HostTensor::Of(s, DType::kInt64, v); }

// Max relative error of the op's gradient rule against central differences (1e9 on error).
inline double Grad(const std::string& type, const std::vector<HostTensor>& in, const Attrs& attrs,
                   const std::vector<int>& check, int weighted_outputs = -1) {
  auto err = GradientError(type, in, attrs, check, 1e-6, weighted_outputs);
  EXPECT_TRUE(err.ok()) << type << ": " << err.status().ToString();
  return err.ok() ? err.value() : 1e9;
}

// Runs a single-output op, failing the test on error.
inline HostTensor Run1(const std::string& type, const std::vector<HostTensor>& in, const Attrs& attrs = {}) {
  auto out = RunOp(type, in, attrs);
  EXPECT_TRUE(out.ok()) << type << ": " << out.status().ToString();
  return out.ok() ? out.value()[0] : HostTensor{};
}

// The error message of an op that must fail (inference or kernel), "" if it succeeded.
inline std::string ErrorOf(const std::string& type, const std::vector<HostTensor>& in, const Attrs& attrs = {}) {
  auto out = RunOp(type, in, attrs);
  return out.ok() ? std::string() : out.status().message();
}

constexpr double kGradTol = 1e-6;

}  // namespace actorflow::testing

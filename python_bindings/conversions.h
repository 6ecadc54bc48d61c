// Conversions between Python/numpy values and actorflow types for the _C module.
// All functions need the GIL. Failures throw py::value_error naming what was wrong.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "actors/status.h"
#include "actors/tensor.h"
#include "kernels/op_registry.h"

namespace actorflow {
namespace python {

namespace py = pybind11;

// InvalidArgument/NotFound -> ValueError; anything else -> RuntimeError.
[[noreturn]] void ThrowStatus(const Status& status);
inline void Check(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}
template <typename T>
T Unwrap(StatusOr<T> value) {
  if (!value.ok()) ThrowStatus(value.status());
  return std::move(value).value();
}

DType ParseDTypeOrThrow(const std::string& name);
py::dtype ToNumpyDType(DType dtype);
// The DType of a numpy array; ValueError naming `what` if numpy's dtype has no counterpart.
DType FromNumpyDType(const py::dtype& dtype, const std::string& what);
Shape ToShape(const py::iterable& shape, const std::string& what);
py::list ShapeToList(const Shape& shape);

// A dict of attribute values: bool, int, float, str and lists of them.
Attrs ToAttrs(const py::dict& attrs, const std::string& what);

// A C-contiguous array matching `desc` (converted from a non-contiguous one, never from
// another dtype or shape: ValueError naming the input instead).
py::array CheckedInput(const py::handle& value, const std::string& name, const TensorDesc& desc);
py::array EmptyArray(const TensorDesc& desc);
TensorView ViewOf(const py::array& array, const TensorDesc& desc);

}  // namespace python
}  // namespace actorflow

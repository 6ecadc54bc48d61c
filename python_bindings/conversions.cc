#include "python_bindings/conversions.h"

#include "graph/attr_convert.h"

namespace actorflow {
namespace python {

void ThrowStatus(const Status& status) {
  if (status.code() == StatusCode::kInvalidArgument || status.code() == StatusCode::kNotFound)
    throw py::value_error(status.message());
  throw std::runtime_error(status.message());
}

DType ParseDTypeOrThrow(const std::string& name) { return Unwrap(graph::ParseDType(name)); }

// From numpy's type numbers, not by parsing the name: every job call makes its output arrays.
py::dtype ToNumpyDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return py::dtype::of<float>();
    case DType::kFloat64: return py::dtype::of<double>();
    case DType::kInt8: return py::dtype::of<int8_t>();
    case DType::kInt32: return py::dtype::of<int32_t>();
    case DType::kInt64: return py::dtype::of<int64_t>();
    case DType::kUInt8: return py::dtype::of<uint8_t>();
    default: return py::dtype(std::string(DTypeName(dtype)));
  }
}

DType FromNumpyDType(const py::dtype& dtype, const std::string& what) {
  char kind = dtype.kind();
  auto size = dtype.itemsize();
  if (kind == 'f' && size == 4) return DType::kFloat32;
  if (kind == 'f' && size == 8) return DType::kFloat64;
  if (kind == 'i' && size == 1) return DType::kInt8;
  if (kind == 'i' && size == 4) return DType::kInt32;
  if (kind == 'i' && size == 8) return DType::kInt64;
  if (kind == 'u' && size == 1) return DType::kUInt8;
  throw py::value_error(what + ": numpy dtype " + py::repr(dtype).cast<std::string>() +
                        " is not supported (float32, float64, int8, int32, int64, uint8)");
}

Shape ToShape(const py::iterable& shape, const std::string& what) {
  Shape out;
  for (py::handle d : shape) {
    if (!PyIndex_Check(d.ptr()) || py::isinstance<py::bool_>(d))
      throw py::value_error(what + ": shape entries must be integers, got " + py::repr(shape).cast<std::string>());
    out.push_back(py::int_(py::reinterpret_borrow<py::object>(d)).cast<int64_t>());
  }
  return out;
}

py::list ShapeToList(const Shape& shape) {
  py::list out;
  for (int64_t d : shape) out.append(d);
  return out;
}

namespace {
bool IsInt(py::handle v) { return !py::isinstance<py::bool_>(v) && PyIndex_Check(v.ptr()); }
bool IsFloat(py::handle v) { return PyFloat_Check(v.ptr()) || py::hasattr(v, "__float__"); }
}  // namespace

Attrs ToAttrs(const py::dict& attrs, const std::string& what) {
  Attrs out;
  for (auto [key, value] : attrs) {
    std::string name = py::str(key).cast<std::string>();
    auto bad = [&]() {
      throw py::value_error(what + ": attribute '" + name + "' has unsupported value " + py::repr(value).cast<std::string>() +
                            " (bool, int, float, str or a list of ints/floats)");
    };
    if (py::isinstance<py::bool_>(value) || (py::hasattr(value, "dtype") && py::str(value.attr("dtype")).cast<std::string>() == "bool")) {
      out.Set(name, value.cast<bool>());
    } else if (py::isinstance<py::str>(value)) {
      out.Set(name, value.cast<std::string>());
    } else if (IsInt(value)) {
      out.Set(name, py::int_(py::reinterpret_borrow<py::object>(value)).cast<int64_t>());
    } else if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
      bool all_int = true;
      for (py::handle v : value) {
        if (IsInt(v) || py::isinstance<py::bool_>(v)) continue;
        if (!IsFloat(v)) bad();
        all_int = false;
      }
      if (all_int) {
        std::vector<int64_t> ints;
        for (py::handle v : value) ints.push_back(py::int_(py::reinterpret_borrow<py::object>(v)).cast<int64_t>());
        out.Set(name, ints);
      } else {
        std::vector<double> floats;
        for (py::handle v : value) floats.push_back(py::float_(py::reinterpret_borrow<py::object>(v)).cast<double>());
        out.Set(name, floats);
      }
    } else if (IsFloat(value)) {
      out.Set(name, py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>());
    } else {
      bad();
    }
  }
  return out;
}

py::array CheckedInput(const py::handle& value, const std::string& name, const TensorDesc& desc) {
  if (!py::isinstance<py::array>(value))
    throw py::value_error("input '" + name + "': expected a numpy.ndarray " + desc.ToString() + ", got " +
                          py::str(py::type::of(value)).cast<std::string>());
  py::array array = py::reinterpret_borrow<py::array>(value);
  DType dtype = FromNumpyDType(array.dtype(), "input '" + name + "'");
  Shape shape(array.shape(), array.shape() + array.ndim());
  TensorDesc got{shape, dtype};
  if (got != desc) throw py::value_error("input '" + name + "': expected " + desc.ToString() + ", got " + got.ToString());
  if (!(array.flags() & py::array::c_style) || !(array.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_))
    array = py::module_::import("numpy").attr("ascontiguousarray")(array).cast<py::array>();
  return array;
}

py::array EmptyArray(const TensorDesc& desc) {
  std::vector<py::ssize_t> shape(desc.shape.begin(), desc.shape.end());
  return py::array(ToNumpyDType(desc.dtype), shape);
}

TensorView ViewOf(const py::array& array, const TensorDesc& desc) {
  TensorView view;
  view.data = const_cast<void*>(array.data());
  view.desc = desc;
  return view;
}

}  // namespace python
}  // namespace actorflow

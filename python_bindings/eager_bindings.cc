// actorflow._C's eager part: EagerTensor (data + autograd record), EagerOp (an op type with
// fixed attributes, prepared once, run at once) and grad mode. The Python Tensor
// (actorflow/_tensor.py) wraps an EagerTensor; every eager op goes through EagerOp.run.
// Small ops keep the GIL (releasing and taking it back costs more than they do); large ones and
// backward release it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "python_bindings/conversions.h"
#include "session/eager.h"
#include "session/eager_autograd.h"

namespace actorflow {
namespace python {
namespace {

EagerTensorPtr FromNumpy(const py::object& value) {
  py::array array = py::array::ensure(value, py::array::c_style);
  if (!array) throw py::value_error("EagerTensor.from_numpy: expected an array, got " + py::repr(value).cast<std::string>());
  TensorDesc desc{Shape(array.shape(), array.shape() + array.ndim()), FromNumpyDType(array.dtype(), "tensor data")};
  return EagerTensor::FromBytes(desc, array.data());
}

py::array ToNumpy(const EagerTensor& t) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  py::array out(ToNumpyDType(t.dtype()), shape);
  if (t.desc().byte_size() > 0) std::memcpy(out.mutable_data(), t.data(), t.desc().byte_size());
  return out;
}

py::object Item(const EagerTensor& t) {
  if (t.desc().num_elements() != 1)
    throw py::value_error("item(): only a one-element tensor converts to a Python number, this one is " + t.desc().ToString());
  switch (t.dtype()) {
    case DType::kFloat32: return py::float_(*static_cast<const float*>(t.data()));
    case DType::kFloat64: return py::float_(*static_cast<const double*>(t.data()));
    case DType::kInt8: return py::int_(*static_cast<const int8_t*>(t.data()));
    case DType::kInt32: return py::int_(*static_cast<const int32_t*>(t.data()));
    case DType::kInt64: return py::int_(*static_cast<const int64_t*>(t.data()));
    case DType::kUInt8: return py::int_(*static_cast<const uint8_t*>(t.data()));
    default: throw py::value_error("item(): invalid dtype");
  }
}

// Ops reading at least this many input elements run without the GIL (a DataLoader's prefetching
// thread keeps working meanwhile); smaller ones keep it: releasing costs more than they do.
constexpr int64_t kReleaseGilElements = 32768;

std::vector<EagerTensorPtr> RunOp(const EagerOp& op, const std::vector<EagerTensorPtr>& inputs) {
  int64_t elements = 0;
  for (const EagerTensorPtr& t : inputs)
    if (t) elements += t->desc().num_elements();
  if (elements < kReleaseGilElements) return Unwrap(op.Run(inputs));
  StatusOr<std::vector<EagerTensorPtr>> out = Status(StatusCode::kInternal, "not run");
  {
    py::gil_scoped_release release;
    out = op.Run(inputs);
  }
  return Unwrap(std::move(out));
}

py::tuple ShapeTuple(const Shape& shape) {
  py::tuple out(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) out[i] = py::int_(shape[i]);
  return out;
}

}  // namespace

void BindEager(py::module_& m) {
  py::class_<EagerTensor, std::shared_ptr<EagerTensor>>(m, "EagerTensor")
      .def_static("from_numpy", &FromNumpy, py::arg("array"), "a tensor holding a copy of the array's data")
      .def_static(
          "empty",
          [](const py::iterable& shape, const std::string& dtype, bool zero) {
            return EagerTensor::Empty(TensorDesc{ToShape(shape, "shape"), ParseDTypeOrThrow(dtype)}, zero);
          },
          py::arg("shape"), py::arg("dtype") = "float32", py::arg("zero") = false)
      .def_static(
          "full",
          [](const py::iterable& shape, const std::string& dtype, double value) {
            auto t = EagerTensor::Empty(TensorDesc{ToShape(shape, "shape"), ParseDTypeOrThrow(dtype)});
            t->Fill(value);
            return t;
          },
          py::arg("shape"), py::arg("dtype"), py::arg("value"))
      .def("numpy", &ToNumpy, "a copy of the data")
      .def("item", &Item)
      .def(
          "numpy_view",
          [](const std::shared_ptr<EagerTensor>& t) {
            // Shares the storage (writes go to the tensor); the capsule keeps it alive.
            std::vector<py::ssize_t> shape(t->shape().begin(), t->shape().end());
            auto* owner = new std::shared_ptr<void>(t->storage());
            py::capsule base(owner, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
            return py::array(ToNumpyDType(t->dtype()), shape, t->data(), base);
          },
          "a NumPy array over the tensor's own storage (no copy)")
      .def_property_readonly("shape", [](const EagerTensor& t) { return ShapeTuple(t.shape()); })
      .def_property_readonly("dtype", [](const EagerTensor& t) { return std::string(DTypeName(t.dtype())); })
      .def_property_readonly("numel", [](const EagerTensor& t) { return t.desc().num_elements(); })
      .def_property_readonly("ndim", [](const EagerTensor& t) { return t.shape().size(); })
      .def_property_readonly("data_ptr", [](const EagerTensor& t) { return reinterpret_cast<uintptr_t>(t.data()); })
      .def_property(
          "requires_grad", [](const EagerTensor& t) { return t.requires_grad(); },
          [](EagerTensor& t, bool v) { Check(t.SetRequiresGrad(v)); })
      .def_property_readonly("is_leaf", [](const EagerTensor& t) { return t.is_leaf(); })
      .def_property_readonly("grad_fn",
                             [](const EagerTensor& t) -> py::object {
                               if (!t.grad_fn()) return py::none();
                               return py::str(t.grad_fn()->type());
                             })
      .def_property(
          "grad", [](const EagerTensor& t) { return t.grad(); },
          [](EagerTensor& t, std::shared_ptr<EagerTensor> g) { Check(t.SetGrad(std::move(g))); })
      .def_property_readonly("retains_grad", [](const EagerTensor& t) { return t.retains_grad(); })
      .def("retain_grad", [](EagerTensor& t) { t.RetainGrad(); })
      .def("detach", [](const EagerTensor& t) { return t.Detached(); })
      .def("view_as", [](const EagerTensor& t, const py::iterable& shape) { return Unwrap(t.ViewAs(ToShape(shape, "view shape"))); })
      .def("copy_", [](EagerTensor& t, const EagerTensor& src) { Check(t.CopyFrom(src)); })
      .def("fill_", [](EagerTensor& t, double v) { t.Fill(v); })
      .def_property_readonly("version", [](const EagerTensor& t) { return t.version(); })
      .def("bump_version", [](EagerTensor& t) { t.BumpVersion(); }, "call after writing through numpy_view()")
      .def("shares_storage", [](const EagerTensor& t, const EagerTensor& o) { return t.storage() == o.storage(); })
      .def(
          "backward",
          [](const std::shared_ptr<EagerTensor>& t, std::shared_ptr<EagerTensor> gradient, bool retain_graph) {
            Status status;
            {
              py::gil_scoped_release release;  // runs only C++ gradient ops; other Python threads go on
              status = Backward(t, gradient, retain_graph);
            }
            Check(status);
          },
          py::arg("gradient") = nullptr, py::arg("retain_graph") = false);

  py::class_<EagerOp, std::shared_ptr<EagerOp>>(m, "EagerOp")
      .def(py::init([](const std::string& type, const py::dict& attrs) {
             return Unwrap(EagerOp::Create(type, ToAttrs(attrs, "op '" + type + "'")));
           }),
           py::arg("type"), py::arg("attrs") = py::dict())
      .def_property_readonly("type", &EagerOp::type)
      .def("run", [](const EagerOp& op, const std::vector<EagerTensorPtr>& inputs) { return RunOp(op, inputs); })
      .def("run1",
           [](const EagerOp& op, const std::vector<EagerTensorPtr>& inputs) {
             std::vector<EagerTensorPtr> out = RunOp(op, inputs);
             return out.empty() ? EagerTensorPtr() : out[0];
           })
      .def("run_unary",
           [](const EagerOp& op, const EagerTensorPtr& x) {
             std::vector<EagerTensorPtr> out = RunOp(op, {x});
             return out.empty() ? EagerTensorPtr() : out[0];
           })
      .def("run_binary", [](const EagerOp& op, const EagerTensorPtr& x, const EagerTensorPtr& y) {
        // The operand list is reused (the hottest call: arithmetic and matmul); Run copies what
        // it keeps, and nothing in it calls back into Python, so it is free again on return.
        thread_local std::vector<EagerTensorPtr> operands(2);
        operands[0] = x;
        operands[1] = y;
        std::vector<EagerTensorPtr> out;
        try {
          out = RunOp(op, operands);
        } catch (...) {
          operands[0] = operands[1] = nullptr;
          throw;
        }
        operands[0] = operands[1] = nullptr;
        return out.empty() ? EagerTensorPtr() : out[0];
      });

  m.def("set_grad_enabled", &SetEagerGradEnabled);
  m.def("is_grad_enabled", &EagerGradEnabled);
  m.def("set_eager_threads", &SetEagerThreads);
  m.def("eager_threads", &EagerThreads);
  m.def("eager_kernel_cache_stats", [] {
    EagerKernelCacheStats s = GetEagerKernelCacheStats();
    py::dict d;
    d["entries"] = s.entries;
    d["builds"] = s.builds;
    d["hits"] = s.hits;
    return d;
  });
  m.def("set_eager_kernel_cache_capacity", &SetEagerKernelCacheCapacity);
}

}  // namespace python
}  // namespace actorflow

// Binding of SwiGLU's gate kernel (elementwise over C-contiguous arrays).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

template <class T>
void swiglu(CArray<T> gate, CArray<T> up, CArray<T> out) {
  require(up.size() == gate.size() && out.size() == gate.size(), "up and out must have as many elements as gate");
  SwigluArgs<T> a{gate.data(), up.data(), out.mutable_data(), gate.size()};
  py::gil_scoped_release release;
  active_kernels().get<T>().swiglu(a);
}

}  // namespace

void bind_swiglu(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("swiglu", &swiglu<T>, py::arg("gate").noconvert(), py::arg("up").noconvert(), py::arg("out").noconvert());
  });
}

}  // namespace attnkit

// Bindings of the GELU kernels, forward and backward (elementwise over C-contiguous arrays).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

template <class T>
void gelu(CArray<T> x, CArray<T> out, bool exact) {
  require(out.size() == x.size(), "out must have as many elements as x");
  GeluArgs<T> a{x.data(), nullptr, out.mutable_data(), x.size(), exact};
  py::gil_scoped_release release;
  active_kernels().get<T>().gelu(a);
}

template <class T>
void gelu_backward(CArray<T> x, CArray<T> dy, CArray<T> dx, bool exact) {
  require(dy.size() == x.size() && dx.size() == x.size(), "dy and dx must have as many elements as x");
  GeluArgs<T> a{x.data(), dy.data(), dx.mutable_data(), x.size(), exact};
  py::gil_scoped_release release;
  active_kernels().get<T>().gelu_backward(a);
}

}  // namespace

void bind_gelu(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("gelu", &gelu<T>, py::arg("x").noconvert(), py::arg("out").noconvert(), py::arg("exact"));
    m.def("gelu_backward", &gelu_backward<T>, py::arg("x").noconvert(), py::arg("dy").noconvert(),
          py::arg("dx").noconvert(), py::arg("exact"));
  });
}

}  // namespace attnkit

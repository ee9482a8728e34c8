// Bindings of the softmax kernels.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

template <class T>
void softmax(CArray<T> x, CArray<T> out, bool log) {
  require(x.ndim() == 2, "x must be 2-D (rows, n)");
  require(out.ndim() == 2 && out.shape(0) == x.shape(0) && out.shape(1) == x.shape(1),
          "out must have the shape of x");
  SoftmaxArgs<T> a{x.data(), out.mutable_data(), x.shape(0), x.shape(1), log};
  py::gil_scoped_release release;
  active_kernels().get<T>().softmax(a);
}

}  // namespace

void bind_softmax(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("softmax", &softmax<T>, py::arg("x").noconvert(), py::arg("out").noconvert(), py::arg("log"));
  });
}

}  // namespace attnkit

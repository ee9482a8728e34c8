// Bindings of the softmax kernels, forward and backward.
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

// float32 rows normalised into float64 (SoftmaxArgs::x_float).
void softmax_widened(CArray<float> x, CArray<double> out, bool log) {
  require(x.ndim() == 2, "x must be 2-D (rows, n)");
  require(out.ndim() == 2 && out.shape(0) == x.shape(0) && out.shape(1) == x.shape(1),
          "out must have the shape of x");
  SoftmaxArgs<double> a{nullptr, out.mutable_data(), x.shape(0), x.shape(1), log, x.data()};
  py::gil_scoped_release release;
  active_kernels().get<double>().softmax(a);
}

template <class T>
void softmax_backward(CArray<T> y, CArray<T> dy, CArray<T> dx, bool log) {
  require(y.ndim() == 2, "y must be 2-D (rows, n)");
  for (const auto* arr : {&dy, &dx})
    require(arr->ndim() == 2 && arr->shape(0) == y.shape(0) && arr->shape(1) == y.shape(1),
            "dy and dx must have the shape of y");
  SoftmaxBackwardArgs<T> a{y.data(), dy.data(), dx.mutable_data(), y.shape(0), y.shape(1), log};
  py::gil_scoped_release release;
  active_kernels().get<T>().softmax_backward(a);
}

}  // namespace

void bind_softmax(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("softmax", &softmax<T>, py::arg("x").noconvert(), py::arg("out").noconvert(), py::arg("log"));
    m.def("softmax_backward", &softmax_backward<T>, py::arg("y").noconvert(), py::arg("dy").noconvert(),
          py::arg("dx").noconvert(), py::arg("log"));
  });
  m.def("softmax", &softmax_widened, py::arg("x").noconvert(), py::arg("out").noconvert(), py::arg("log"));
}

}  // namespace attnkit

// Bindings of the softmax kernels, forward and backward.
#include <type_traits>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

using Indices = py::array_t<std::int64_t, py::array::c_style>;

// x (rows, n) of S normalised into out of T: S = T, or float32 into float64 (SoftmaxArgs::x_float); with
// argmax, each row's index of its largest output too.
template <class S, class T>
void softmax(py::array_t<S, py::array::c_style> x, CArray<T> out, bool log, const py::object& argmax) {
  require(x.ndim() == 2, "x must be 2-D (rows, n)");
  require(out.ndim() == 2 && out.shape(0) == x.shape(0) && out.shape(1) == x.shape(1),
          "out must have the shape of x");
  SoftmaxArgs<T> a{nullptr, out.mutable_data(), x.shape(0), x.shape(1), log};
  if constexpr (std::is_same_v<S, T>) a.x = x.data();
  else a.x_float = x.data();
  Indices best;
  if (!argmax.is_none()) {
    best = exactly<Indices>(argmax, "argmax");
    require(best.ndim() == 1 && best.shape(0) == x.shape(0), "argmax must be (rows,)");
    a.argmax = best.mutable_data();
  }
  py::gil_scoped_release release;
  active_kernels().get<T>().softmax(a);
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
    m.def("softmax", &softmax<T, T>, py::arg("x").noconvert(), py::arg("out").noconvert(), py::arg("log"),
          py::arg("argmax") = py::none());
    m.def("softmax_backward", &softmax_backward<T>, py::arg("y").noconvert(), py::arg("dy").noconvert(),
          py::arg("dx").noconvert(), py::arg("log"));
  });
  m.def("softmax", &softmax<float, double>, py::arg("x").noconvert(), py::arg("out").noconvert(), py::arg("log"),
        py::arg("argmax") = py::none());
}

}  // namespace attnkit

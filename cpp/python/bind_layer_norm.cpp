// Bindings of the layer normalisation kernels, forward and backward, and of RMS normalisation (the same
// kernels with the mean fixed at 0).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

// obj as a C-contiguous (size,) array of T. exactly() never converts, so its data is the caller's
// array, valid while the call holds obj.
template <class T>
CArray<T> vector_of(const py::object& obj, py::ssize_t size, const char* name) {
  auto arr = exactly<CArray<T>>(obj, name);
  require(arr.ndim() == 1 && arr.shape(0) == size, std::string(name) + " has the wrong shape");
  return arr;
}

// Optional arguments: the data of vector_of(obj), or null when obj is None.
template <class T>
const T* optional_input(const py::object& obj, py::ssize_t size, const char* name) {
  return obj.is_none() ? nullptr : vector_of<T>(obj, size, name).data();
}

template <class T>
T* optional_output(const py::object& obj, py::ssize_t size, const char* name) {
  return obj.is_none() ? nullptr : vector_of<T>(obj, size, name).mutable_data();
}

template <class T>
void layer_norm(CArray<T> x, const py::object& gamma, const py::object& beta, CArray<T> y,
                const py::object& mean, const py::object& rstd, double eps) {
  require(x.ndim() == 2, "x must be 2-D (rows, n)");
  const auto rows = x.shape(0), n = x.shape(1);
  require(y.ndim() == 2 && y.shape(0) == rows && y.shape(1) == n, "y must have the shape of x");
  LayerNormArgs<T> a;
  a.x = x.data();
  a.gamma = optional_input<T>(gamma, n, "gamma");
  a.beta = optional_input<T>(beta, n, "beta");
  a.y = y.mutable_data();
  a.mean = optional_output<T>(mean, rows, "mean");
  a.rstd = optional_output<T>(rstd, rows, "rstd");
  a.rows = rows;
  a.n = n;
  a.eps = T(eps);
  py::gil_scoped_release release;
  active_kernels().get<T>().layer_norm(a);
}

template <class T>
void layer_norm_backward(CArray<T> dy, CArray<T> x, const py::object& gamma, CArray<T> mean, CArray<T> rstd,
                         CArray<T> dx, const py::object& dgamma, const py::object& dbeta) {
  require(x.ndim() == 2, "x must be 2-D (rows, n)");
  const auto rows = x.shape(0), n = x.shape(1);
  for (const auto* arr : {&dy, &dx})
    require(arr->ndim() == 2 && arr->shape(0) == rows && arr->shape(1) == n, "dy and dx must have the shape of x");
  require(mean.ndim() == 1 && mean.shape(0) == rows && rstd.ndim() == 1 && rstd.shape(0) == rows,
          "mean and rstd must be (rows,)");
  LayerNormBackwardArgs<T> a;
  a.dy = dy.data();
  a.x = x.data();
  a.gamma = optional_input<T>(gamma, n, "gamma");
  a.mean = mean.data();
  a.rstd = rstd.data();
  a.dx = dx.mutable_data();
  a.dgamma = optional_output<T>(dgamma, n, "dgamma");
  a.dbeta = optional_output<T>(dbeta, n, "dbeta");
  a.rows = rows;
  a.n = n;
  py::gil_scoped_release release;
  active_kernels().get<T>().layer_norm_backward(a);
}

template <class T>
void rms_norm(CArray<T> x, const py::object& gamma, CArray<T> y, const py::object& rstd, double eps) {
  require(x.ndim() == 2, "x must be 2-D (rows, n)");
  const auto rows = x.shape(0), n = x.shape(1);
  require(y.ndim() == 2 && y.shape(0) == rows && y.shape(1) == n, "y must have the shape of x");
  LayerNormArgs<T> a;
  a.x = x.data();
  a.gamma = optional_input<T>(gamma, n, "gamma");
  a.y = y.mutable_data();
  a.rstd = optional_output<T>(rstd, rows, "rstd");
  a.rows = rows;
  a.n = n;
  a.eps = T(eps);
  a.rms = true;
  py::gil_scoped_release release;
  active_kernels().get<T>().layer_norm(a);
}

template <class T>
void rms_norm_backward(CArray<T> dy, CArray<T> x, const py::object& gamma, CArray<T> rstd, CArray<T> dx,
                       const py::object& dgamma) {
  require(x.ndim() == 2, "x must be 2-D (rows, n)");
  const auto rows = x.shape(0), n = x.shape(1);
  for (const auto* arr : {&dy, &dx})
    require(arr->ndim() == 2 && arr->shape(0) == rows && arr->shape(1) == n, "dy and dx must have the shape of x");
  require(rstd.ndim() == 1 && rstd.shape(0) == rows, "rstd must be (rows,)");
  LayerNormBackwardArgs<T> a;
  a.dy = dy.data();
  a.x = x.data();
  a.gamma = optional_input<T>(gamma, n, "gamma");
  a.mean = nullptr;
  a.rstd = rstd.data();
  a.dx = dx.mutable_data();
  a.dgamma = optional_output<T>(dgamma, n, "dgamma");
  a.rows = rows;
  a.n = n;
  a.rms = true;
  py::gil_scoped_release release;
  active_kernels().get<T>().layer_norm_backward(a);
}

}  // namespace

void bind_layer_norm(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("layer_norm", &layer_norm<T>, py::arg("x").noconvert(), py::arg("gamma"), py::arg("beta"),
          py::arg("y").noconvert(), py::arg("mean"), py::arg("rstd"), py::arg("eps"));
    m.def("layer_norm_backward", &layer_norm_backward<T>, py::arg("dy").noconvert(), py::arg("x").noconvert(),
          py::arg("gamma"), py::arg("mean").noconvert(), py::arg("rstd").noconvert(), py::arg("dx").noconvert(),
          py::arg("dgamma"), py::arg("dbeta"));
    m.def("rms_norm", &rms_norm<T>, py::arg("x").noconvert(), py::arg("gamma"), py::arg("y").noconvert(),
          py::arg("rstd"), py::arg("eps"));
    m.def("rms_norm_backward", &rms_norm_backward<T>, py::arg("dy").noconvert(), py::arg("x").noconvert(),
          py::arg("gamma"), py::arg("rstd").noconvert(), py::arg("dx").noconvert(), py::arg("dgamma"));
  });
}

}  // namespace attnkit

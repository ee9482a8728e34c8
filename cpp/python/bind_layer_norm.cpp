// Bindings of the layer normalisation kernels, forward and backward.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

// obj as a C-contiguous (size,) array of T, or an empty handle when obj is None.
template <class T>
CArray<T> optional_vector(const py::object& obj, py::ssize_t size, const char* name) {
  if (obj.is_none()) return CArray<T>();
  auto arr = exactly<CArray<T>>(obj, name);
  require(arr.ndim() == 1 && arr.shape(0) == size, std::string(name) + " has the wrong shape");
  return arr;
}

template <class T>
const T* data_or_null(const CArray<T>& arr) {
  return arr ? arr.data() : nullptr;
}

template <class T>
T* mutable_data_or_null(CArray<T>& arr) {
  return arr ? arr.mutable_data() : nullptr;
}

template <class T>
void layer_norm(CArray<T> x, const py::object& gamma, const py::object& beta, CArray<T> y,
                const py::object& mean, const py::object& rstd, double eps) {
  require(x.ndim() == 2, "x must be 2-D (rows, n)");
  const auto rows = x.shape(0), n = x.shape(1);
  require(y.ndim() == 2 && y.shape(0) == rows && y.shape(1) == n, "y must have the shape of x");
  auto g = optional_vector<T>(gamma, n, "gamma"), b = optional_vector<T>(beta, n, "beta");
  auto mu = optional_vector<T>(mean, rows, "mean"), rs = optional_vector<T>(rstd, rows, "rstd");
  LayerNormArgs<T> a{x.data(), data_or_null(g), data_or_null(b), y.mutable_data(),
                     mutable_data_or_null(mu), mutable_data_or_null(rs), rows, n, T(eps)};
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
  auto g = optional_vector<T>(gamma, n, "gamma");
  auto dg = optional_vector<T>(dgamma, n, "dgamma"), db = optional_vector<T>(dbeta, n, "dbeta");
  LayerNormBackwardArgs<T> a{dy.data(), x.data(), data_or_null(g), mean.data(), rstd.data(), dx.mutable_data(),
                             mutable_data_or_null(dg), mutable_data_or_null(db), rows, n};
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
  });
}

}  // namespace attnkit

// Binding of the matrix product kernel. a and b are read in place through their strides, whatever
// their layout; out must have contiguous rows. The op layer copies an input that overlaps out.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

// Element stride of axis ax (0 for a length-1 axis, whose stride NumPy does not define).
template <class T>
std::int64_t element_stride(const py::array_t<T>& arr, py::ssize_t ax, const char* name) {
  if (arr.shape(ax) <= 1) return 0;
  const auto item = static_cast<py::ssize_t>(sizeof(T));
  require(arr.strides(ax) % item == 0, std::string(name) + ": strides must be whole elements");
  return arr.strides(ax) / item;
}

template <class T>
void matmul(py::array_t<T> a, py::array_t<T> b, const py::object& bias, py::array_t<T> out, bool accumulate,
            const py::object& b_column_sums) {
  require(a.ndim() == 2 && b.ndim() == 2 && a.shape(1) == b.shape(0), "a must be (m, k) and b (k, n)");
  const auto m = a.shape(0), k = a.shape(1), n = b.shape(1);
  require(out.ndim() == 2 && out.shape(0) == m && out.shape(1) == n, "out must be (m, n)");
  require(out.writeable(), "out must be writeable");
  require(m == 0 || n <= 1 || out.strides(1) == static_cast<py::ssize_t>(sizeof(T)), "out: rows must be contiguous");
  MatmulArgs<T> g;
  CArray<T> bias_array;
  if (!bias.is_none()) {
    bias_array = exactly<CArray<T>>(bias, "bias");
    require(bias_array.ndim() == 1 && bias_array.shape(0) == n, "bias must be (n,)");
    g.bias = bias_array.data();
  }
  CArray<T> sums_array;
  if (!b_column_sums.is_none()) {
    sums_array = exactly<CArray<T>>(b_column_sums, "b_column_sums");
    require(sums_array.ndim() == 1 && sums_array.shape(0) == n, "b_column_sums must be (n,)");
    g.b_column_sums = sums_array.mutable_data();
  }
  g.a = a.data(), g.b = b.data(), g.c = out.mutable_data();
  g.m = m, g.k = k, g.n = n;
  g.a_row_stride = element_stride(a, 0, "a"), g.a_col_stride = element_stride(a, 1, "a");
  g.b_row_stride = element_stride(b, 0, "b"), g.b_col_stride = element_stride(b, 1, "b");
  g.c_row_stride = element_stride(out, 0, "out");
  g.accumulate = accumulate;
  py::gil_scoped_release release;
  active_kernels().get<T>().matmul(g);
}

}  // namespace

void bind_matmul(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("matmul", &matmul<T>, py::arg("a").noconvert(), py::arg("b").noconvert(), py::arg("bias"),
          py::arg("out").noconvert(), py::arg("accumulate"),
          py::arg("b_column_sums") = py::none());
  });
}

}  // namespace attnkit

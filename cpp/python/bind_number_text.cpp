// Binding of the rows-as-JSON-text formatter (a server's float arrays).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "arrays.h"
#include "attnkit/number_text.h"
#include "bindings.h"

namespace attnkit {

namespace {

template <class T>
std::vector<std::string> rows_text(CArray<T> x) {
  require(x.ndim() == 2, "x must be 2-D");
  const T* data = x.data();
  const std::int64_t rows = x.shape(0), cols = x.shape(1);
  py::gil_scoped_release release;
  return rows_as_text(data, rows, cols);
}

}  // namespace

void bind_number_text(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("rows_text", &rows_text<T>, py::arg("x").noconvert());
  });
}

}  // namespace attnkit

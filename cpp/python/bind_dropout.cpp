// Binding of the dropout kernel (elementwise over C-contiguous arrays; out may be x).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

template <class T>
void dropout(CArray<T> x, CArray<T> out, std::uint64_t key, std::uint32_t threshold, T scale) {
  require(out.size() == x.size(), "out must have as many elements as x");
  DropoutArgs<T> a{x.data(), out.mutable_data(), x.size(), key, threshold, scale};
  py::gil_scoped_release release;
  active_kernels().get<T>().dropout(a);
}

}  // namespace

void bind_dropout(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("dropout", &dropout<T>, py::arg("x").noconvert(), py::arg("out").noconvert(), py::arg("key"),
          py::arg("threshold"), py::arg("scale"));
  });
}

}  // namespace attnkit

// Binding of the sinusoidal positions kernel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

template <class T>
void positions(CArray<T> out, double base, double start) {
  require(out.ndim() == 2 && out.shape(1) % 2 == 0, "out must be (n, d) with d even");
  PositionsArgs<T> a{out.mutable_data(), out.shape(0), out.shape(1), base, start};
  py::gil_scoped_release release;
  active_kernels().get<T>().positions(a);
}

}  // namespace

void bind_positions(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("positions", &positions<T>, py::arg("out").noconvert(), py::arg("base"), py::arg("start"));
  });
}

}  // namespace attnkit

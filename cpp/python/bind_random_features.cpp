// Binding of the fused random-feature transform.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

template <class T>
void random_features(CArray<T> z, const py::object& offset, const py::object& row_log, CArray<T> out,
                     double scale, int kind) {
  require(z.ndim() == 2, "z must be (n, D)");
  require(kind >= 0 && kind <= 2, "kind must be 0 (cos), 1 (sincos) or 2 (exp)");
  const auto n = z.shape(0), D = z.shape(1);
  const auto fk = static_cast<FeatureKind>(kind);
  const auto width = fk == FeatureKind::sincos ? 2 * D : D;
  require(out.ndim() == 2 && out.shape(0) == n && out.shape(1) == width, "out has the wrong shape");
  require(fk != FeatureKind::sincos || static_cast<const void*>(out.data()) != static_cast<const void*>(z.data()),
          "sincos output cannot alias z");
  RandomFeaturesArgs<T> a{z.data(), nullptr, nullptr, out.mutable_data(), n, D, T(scale), fk};
  CArray<T> off, rl;
  if (!offset.is_none()) {
    off = exactly<CArray<T>>(offset, "offset");
    require(off.ndim() == 1 && off.shape(0) == D, "offset must be (D,)");
    a.offset = off.data();
  }
  if (!row_log.is_none()) {
    rl = exactly<CArray<T>>(row_log, "row_log");
    require(rl.ndim() == 1 && rl.shape(0) == n, "row_log must be (n,)");
    a.row_log = rl.data();
  }
  py::gil_scoped_release release;
  active_kernels().get<T>().random_features(a);
}

}  // namespace

void bind_random_features(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("random_features", &random_features<T>, py::arg("z").noconvert(), py::arg("offset"),
          py::arg("row_log"), py::arg("out").noconvert(), py::arg("scale"), py::arg("kind"));
  });
}

}  // namespace attnkit

// Bindings of the fused random-feature transform: from projections z, or from x and w.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

// Checks out, the optional offset and row_log, and runs the kernel on args with z or x/w set.
template <class T>
void run(RandomFeaturesArgs<T> a, const py::object& offset, const py::object& row_log, CArray<T> out,
         int kind) {
  require(kind >= 0 && kind <= 2, "kind must be 0 (cos), 1 (sincos) or 2 (exp)");
  a.kind = static_cast<FeatureKind>(kind);
  const auto width = a.kind == FeatureKind::sincos ? 2 * a.D : a.D;
  require(out.ndim() == 2 && out.shape(0) == a.n && out.shape(1) == width, "out has the wrong shape");
  const void* o = out.data();
  require(o != static_cast<const void*>(a.x) && (a.kind != FeatureKind::sincos || o != static_cast<const void*>(a.z)),
          "out cannot alias x, nor z for sincos");
  a.out = out.mutable_data();
  CArray<T> off, rl;
  if (!offset.is_none()) {
    off = exactly<CArray<T>>(offset, "offset");
    require(off.ndim() == 1 && off.shape(0) == a.D, "offset must be (D,)");
    a.offset = off.data();
  }
  if (!row_log.is_none()) {
    rl = exactly<CArray<T>>(row_log, "row_log");
    require(rl.ndim() == 1 && rl.shape(0) == a.n, "row_log must be (n,)");
    a.row_log = rl.data();
  }
  py::gil_scoped_release release;
  active_kernels().get<T>().random_features(a);
}

template <class T>
void random_features(CArray<T> z, const py::object& offset, const py::object& row_log, CArray<T> out,
                     double scale, int kind) {
  require(z.ndim() == 2, "z must be (n, D)");
  RandomFeaturesArgs<T> a;
  a.z = z.data(), a.n = z.shape(0), a.D = z.shape(1), a.scale = T(scale);
  run(a, offset, row_log, out, kind);
}

template <class T>
void projected_random_features(CArray<T> x, CArray<T> w, const py::object& offset, const py::object& row_log,
                               CArray<T> out, double scale, int kind) {
  require(x.ndim() == 2 && w.ndim() == 2 && w.shape(0) == x.shape(1), "x must be (n, f) and w (f, D)");
  RandomFeaturesArgs<T> a;
  a.x = x.data(), a.w = w.data(), a.n = x.shape(0), a.f = x.shape(1), a.D = w.shape(1), a.scale = T(scale);
  run(a, offset, row_log, out, kind);
}

}  // namespace

void bind_random_features(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("random_features", &random_features<T>, py::arg("z").noconvert(), py::arg("offset"),
          py::arg("row_log"), py::arg("out").noconvert(), py::arg("scale"), py::arg("kind"));
    m.def("projected_random_features", &projected_random_features<T>, py::arg("x").noconvert(),
          py::arg("w").noconvert(), py::arg("offset"), py::arg("row_log"), py::arg("out").noconvert(),
          py::arg("scale"), py::arg("kind"));
  });
}

}  // namespace attnkit

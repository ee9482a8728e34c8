// Binding of the fused softmax cross-entropy kernel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

template <class T>
void cross_entropy(CArray<T> logits, Offsets targets, const py::object& weight, CArray<T> loss,
                   const py::object& dlogits, std::int64_t ignore_index, double label_smoothing) {
  require(logits.ndim() == 2, "logits must be 2-D (rows, C)");
  const auto rows = logits.shape(0), classes = logits.shape(1);
  require(targets.ndim() == 1 && targets.shape(0) == rows, "targets must be (rows,)");
  require(loss.ndim() == 1 && loss.shape(0) == rows, "loss must be (rows,)");
  // The kernel indexes logits with the targets: a bad one would reach outside the row.
  const auto* t = targets.data();
  for (py::ssize_t r = 0; r < rows; ++r)
    require(t[r] == ignore_index || (t[r] >= 0 && t[r] < classes),
            "targets[" + std::to_string(r) + "] = " + std::to_string(t[r]) + " is not a class index");
  CrossEntropyArgs<T> a{logits.data(), t, nullptr, loss.mutable_data(), nullptr, rows, classes,
                        ignore_index, T(label_smoothing)};
  CArray<T> w, d;
  if (!weight.is_none()) {
    w = exactly<CArray<T>>(weight, "weight");
    require(w.ndim() == 1 && w.shape(0) == rows, "weight must be (rows,)");
    a.weight = w.data();
  }
  if (!dlogits.is_none()) {
    d = exactly<CArray<T>>(dlogits, "dlogits");
    require(d.ndim() == 2 && d.shape(0) == rows && d.shape(1) == classes, "dlogits must be (rows, C)");
    a.dlogits = d.mutable_data();
  }
  py::gil_scoped_release release;
  active_kernels().get<T>().cross_entropy(a);
}

}  // namespace

void bind_cross_entropy(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("cross_entropy", &cross_entropy<T>, py::arg("logits").noconvert(), py::arg("targets").noconvert(),
          py::arg("weight"), py::arg("loss").noconvert(), py::arg("dlogits"), py::arg("ignore_index"),
          py::arg("label_smoothing"));
  });
}

}  // namespace attnkit

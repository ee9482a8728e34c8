// Binding of the int8 linear kernel and of the switch between its VNNI and exact-pmaddwd variants.
// The op layer quantises and packs the weights (ops/int8_linear.py); this file only checks that every
// view stays inside its array.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

std::int64_t round_up(std::int64_t x, std::int64_t q) { return (x + q - 1) / q * q; }

void int8_linear(CArray<float> x, CArray<std::int8_t> w, CArray<float> w_scale, CArray<std::int32_t> w_colsum,
                 const py::object& bias, const py::object& out, const py::object& acc) {
  require(x.ndim() == 2, "x must be (m, k)");
  const auto m = x.shape(0), k = x.shape(1), n = w_scale.ndim() == 1 ? w_scale.shape(0) : -1;
  require(n >= 0 && w_colsum.ndim() == 1 && w_colsum.shape(0) == n, "w_scale and w_colsum must be (n,)");
  require(w.ndim() == 1 && w.shape(0) == round_up(k, 4) * round_up(n, kInt8ColumnPadding),
          "w must be the packed (k, n) weights");
  Int8LinearArgs g;
  CArray<float> bias_array, out_array;
  CArray<std::int32_t> acc_array;
  if (!bias.is_none()) {
    bias_array = exactly<CArray<float>>(bias, "bias");
    require(bias_array.ndim() == 1 && bias_array.shape(0) == n, "bias must be (n,)");
    g.bias = bias_array.data();
  }
  require(out.is_none() != acc.is_none(), "exactly one of out and acc");
  if (!out.is_none()) {
    out_array = exactly<CArray<float>>(out, "out");
    require(out_array.ndim() == 2 && out_array.shape(0) == m && out_array.shape(1) == n, "out must be (m, n)");
    require(out_array.writeable(), "out must be writeable");
    g.c = out_array.mutable_data();
  } else {
    acc_array = exactly<CArray<std::int32_t>>(acc, "acc");
    require(acc_array.ndim() == 2 && acc_array.shape(0) == m && acc_array.shape(1) == n, "acc must be (m, n)");
    require(acc_array.writeable(), "acc must be writeable");
    g.acc = acc_array.mutable_data();
  }
  g.x = x.data(), g.w = w.data(), g.w_scale = w_scale.data(), g.w_colsum = w_colsum.data();
  g.m = m, g.k = k, g.n = n;
  g.x_row_stride = k, g.c_row_stride = n;
  const Int8LinearKernel kernel = active_int8_linear();
  py::gil_scoped_release release;
  kernel(g);
}

}  // namespace

void bind_int8_linear(py::module_& m) {
  m.def("int8_linear", &int8_linear, py::arg("x").noconvert(), py::arg("w").noconvert(),
        py::arg("w_scale").noconvert(), py::arg("w_colsum").noconvert(), py::arg("bias"), py::arg("out"),
        py::arg("acc"));
  m.def("int8_vnni_available", &int8_vnni_available, "Whether this CPU and build have an int8 VNNI kernel.");
  m.def("int8_vnni_isas", &int8_vnni_isas,
        "The ISAs whose int8 kernels have a VNNI variant on this CPU and build (avx2: AVX-VNNI, avx512: AVX512-VNNI).");
  m.def("set_int8_vnni", &set_int8_vnni, py::arg("enabled"),
        "Use the int8 VNNI kernels where the active ISA has one (for tests).");
  m.def("get_int8_variant", &active_int8_variant, "The int8 kernel variant in use.");
}

}  // namespace attnkit

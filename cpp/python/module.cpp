// attnkit._core: the only place pybind11 appears. Arguments are converted and checked with the GIL
// held; kernels run with it released. Arrays are taken exactly as given (noconvert): ops.py lays them
// out, so a hidden conversion copy fails loudly instead. std::invalid_argument -> ValueError,
// std::bad_alloc -> MemoryError.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>

#include "arrays.h"
#include "attnkit/isa.h"

namespace attnkit {
std::map<std::string, std::string> build_info();
}

namespace py = pybind11;
using namespace attnkit;

namespace {

template <class T>
void softmax(CArray<T> x, CArray<T> out, bool log) {
  require(x.ndim() == 2, "x must be 2-D (rows, n)");
  require(out.ndim() == 2 && out.shape(0) == x.shape(0) && out.shape(1) == x.shape(1),
          "out must have the shape of x");
  SoftmaxArgs<T> a{x.data(), out.mutable_data(), x.shape(0), x.shape(1), log};
  py::gil_scoped_release release;
  active_kernels().get<T>().softmax(a);
}

template <class T>
AttentionArgs<T> attention_args(const py::tuple& q, const py::tuple& k, const py::object& v,
                                const py::object& mask, const py::object& bias,
                                const py::object& key_lengths, bool causal, double scale,
                                std::int64_t batch, std::int64_t nq, std::int64_t nk, std::int64_t d,
                                std::int64_t dv) {
  require(batch >= 0 && nq >= 0 && nk >= 0 && d >= 0 && dv >= 0, "sizes must be non-negative");
  AttentionArgs<T> a;
  a.batch = batch, a.nq = nq, a.nk = nk, a.d = d, a.dv = dv;
  a.q = batched_rows<T>(q, batch, nq, d, "q");
  a.k = batched_rows<T>(k, batch, nk, d, "k");
  if (!v.is_none()) a.v = batched_rows<T>(v.cast<py::tuple>(), batch, nk, dv, "v");
  if (!mask.is_none()) a.mask = batched_rows<std::uint8_t>(mask.cast<py::tuple>(), batch, nq, nk, "mask");
  if (!bias.is_none()) a.bias = batched_rows<T>(bias.cast<py::tuple>(), batch, nq, nk, "bias");
  if (!key_lengths.is_none()) {
    auto kl = exactly<Offsets>(key_lengths, "key_lengths");
    require(kl.ndim() == 1 && kl.shape(0) == batch, "key_lengths: one entry per batch item expected");
    for (std::int64_t b = 0; b < batch; ++b)
      require(kl.data()[b] >= 0 && kl.data()[b] <= nk, "key_lengths: values must lie in [0, nk]");
    a.key_length = kl.data();
  }
  a.causal = causal;
  a.scale = T(scale);
  return a;
}

template <class T>
void attention(const py::tuple& q, const py::tuple& k, const py::tuple& v, const py::object& mask,
               const py::object& bias, const py::object& key_lengths, bool causal, double scale,
               CArray<T> out, const py::object& lse) {
  require(out.ndim() == 3, "out must be (batch, nq, dv)");
  const auto batch = out.shape(0), nq = out.shape(1), dv = out.shape(2);
  const auto qa = q[0].cast<py::array>(), ka = k[0].cast<py::array>();
  require(qa.ndim() >= 2 && ka.ndim() >= 2, "q and k must be at least 2-D");
  const auto d = qa.shape(qa.ndim() - 1), nk = ka.shape(ka.ndim() - 2);
  require(qa.shape(qa.ndim() - 2) == nq && ka.shape(ka.ndim() - 1) == d, "q/k/out shapes disagree");
  AttentionArgs<T> a = attention_args<T>(q, k, v, mask, bias, key_lengths, causal, scale, batch, nq, nk, d, dv);
  a.out = out.mutable_data();
  CArray<T> lse_arr;
  if (!lse.is_none()) {
    lse_arr = exactly<CArray<T>>(lse, "lse");
    require(lse_arr.ndim() == 2 && lse_arr.shape(0) == batch && lse_arr.shape(1) == nq, "lse must be (batch, nq)");
    a.lse = lse_arr.mutable_data();
  }
  py::gil_scoped_release release;
  active_kernels().get<T>().attention(a);
}

template <class T>
void attention_weights(const py::tuple& q, const py::tuple& k, const py::object& mask,
                       const py::object& bias, const py::object& key_lengths, bool causal,
                       double scale, CArray<T> lse, CArray<T> weights) {
  require(weights.ndim() == 3, "weights must be (batch, nq, nk)");
  const auto batch = weights.shape(0), nq = weights.shape(1), nk = weights.shape(2);
  const auto qa = q[0].cast<py::array>();
  require(qa.ndim() >= 2, "q must be at least 2-D");
  const auto d = qa.shape(qa.ndim() - 1);
  require(lse.ndim() == 2 && lse.shape(0) == batch && lse.shape(1) == nq, "lse must be (batch, nq)");
  AttentionWeightsArgs<T> w;
  w.attn = attention_args<T>(q, k, py::none(), mask, bias, key_lengths, causal, scale, batch, nq, nk, d, 0);
  w.attn.lse = lse.mutable_data();
  w.weights = weights.mutable_data();
  py::gil_scoped_release release;
  active_kernels().get<T>().attention_weights(w);
}

template <class T>
void positions(CArray<T> out, double base, double start) {
  require(out.ndim() == 2 && out.shape(1) % 2 == 0, "out must be (n, d) with d even");
  PositionsArgs<T> a{out.mutable_data(), out.shape(0), out.shape(1), base, start};
  py::gil_scoped_release release;
  active_kernels().get<T>().positions(a);
}

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

template <class T>
void causal_linear_attention(CArray<T> phi_q, CArray<T> phi_k, CArray<T> v, CArray<T> out, double eps,
                             const py::object& state_s, const py::object& state_z) {
  require(phi_q.ndim() == 3 && phi_k.ndim() == 3 && v.ndim() == 3 && out.ndim() == 3,
          "phi_q, phi_k, v and out must be 3-D");
  const auto batch = phi_q.shape(0), n = phi_q.shape(1), D = phi_q.shape(2), dv = v.shape(2);
  require(phi_k.shape(0) == batch && phi_k.shape(1) == n && phi_k.shape(2) == D, "phi_k must match phi_q");
  require(v.shape(0) == batch && v.shape(1) == n, "v must be (batch, n, dv)");
  require(out.shape(0) == batch && out.shape(1) == n && out.shape(2) == dv, "out must be (batch, n, dv)");
  CausalLinearArgs<T> a{phi_q.data(), phi_k.data(), v.data(), out.mutable_data(), batch, n, D, dv, T(eps)};
  CArray<double> s, z;
  if (!state_s.is_none()) {
    s = exactly<CArray<double>>(state_s, "state_s");
    z = exactly<CArray<double>>(state_z, "state_z");
    require(s.ndim() == 3 && s.shape(0) == batch && s.shape(1) == D && s.shape(2) == dv, "state_s must be (batch, D, dv)");
    require(z.ndim() == 2 && z.shape(0) == batch && z.shape(1) == D, "state_z must be (batch, D)");
    a.state_s = s.mutable_data();
    a.state_z = z.mutable_data();
  }
  py::gil_scoped_release release;
  active_kernels().get<T>().causal_linear_attention(a);
}

template <class T>
void def_typed(py::module_& m) {
  m.def("softmax", &softmax<T>, py::arg("x").noconvert(), py::arg("out").noconvert(), py::arg("log"));
  m.def("attention", &attention<T>, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask"),
        py::arg("bias"), py::arg("key_lengths"), py::arg("causal"), py::arg("scale"),
        py::arg("out").noconvert(), py::arg("lse"));
  m.def("attention_weights", &attention_weights<T>, py::arg("q"), py::arg("k"), py::arg("mask"),
        py::arg("bias"), py::arg("key_lengths"), py::arg("causal"), py::arg("scale"),
        py::arg("lse").noconvert(), py::arg("weights").noconvert());
  m.def("positions", &positions<T>, py::arg("out").noconvert(), py::arg("base"), py::arg("start"));
  m.def("random_features", &random_features<T>, py::arg("z").noconvert(), py::arg("offset"),
        py::arg("row_log"), py::arg("out").noconvert(), py::arg("scale"), py::arg("kind"));
  m.def("causal_linear_attention", &causal_linear_attention<T>, py::arg("phi_q").noconvert(),
        py::arg("phi_k").noconvert(), py::arg("v").noconvert(), py::arg("out").noconvert(),
        py::arg("eps"), py::arg("state_s"), py::arg("state_z"));
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "attnkit compiled kernels (private: use attnkit.ops)";
  def_typed<float>(m);
  def_typed<double>(m);
  m.def("available_isas", &available_isas, "ISA variants compiled in and supported by this CPU.");
  m.def("get_isa", &active_isa, "The ISA variant in use.");
  m.def("set_isa", &attnkit::set_isa, py::arg("name"), "Switch the ISA variant (for tests).");
  m.def("build_info", &build_info);
  m.def("set_num_threads", &attnkit::set_num_threads, py::arg("n"));
  m.def("get_num_threads", &attnkit::get_num_threads);
  m.attr("__version__") = ATTNKIT_VERSION;
}

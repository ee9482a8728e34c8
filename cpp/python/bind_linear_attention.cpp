// Bindings of linear attention, causal and not.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <vector>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

// The keep bytes (batch, n) uint8 or None (null), and a LinearFeatures code, checked.
const std::uint8_t* keep_bytes(const py::object& keep, py::ssize_t batch, py::ssize_t n) {
  if (keep.is_none()) return nullptr;
  auto m = exactly<CArray<std::uint8_t>>(keep, "keep");
  require(m.ndim() == 2 && m.shape(0) == batch && m.shape(1) == n, "keep must be (batch, n) like k's rows");
  return m.data();  // keep (the caller's argument) owns the memory
}
LinearFeatures checked_features(int features) {
  require(features >= 0 && features <= 2, "features must be 0 (precomputed), 1 (elu) or 2 (relu)");
  return static_cast<LinearFeatures>(features);
}

// A projected map from (w (d, m), sincos, scale, key_norm, query_norm, query_max) (see ProjectedMap),
// with its w^T, which the caller keeps alive through the call.
template <class T>
ProjectedMap<T> projected_map(const py::object& projection, std::int64_t d, std::vector<T>& wt) {
  const auto p = projection.cast<py::tuple>();
  require(p.size() == 6, "projection: expected (w, sincos, scale, key_norm, query_norm, query_max)");
  auto w = exactly<CArray<T>>(p[0], "projection weights");
  ProjectedMap<T> map;
  map.sincos = p[1].cast<bool>();
  map.m = w.ndim() == 2 ? w.shape(1) : 0;
  require(w.ndim() == 2 && w.shape(0) == d && map.m > 0, "projection weights must be (d, m) with m >= 1");
  map.w = w.data();  // the caller's tuple owns the memory
  map.scale = T(p[2].cast<double>()), map.key_norm = T(p[3].cast<double>());
  map.query_norm = T(p[4].cast<double>()), map.query_max = p[5].cast<bool>();
  wt.resize(std::size_t(map.m * d));
  for (std::int64_t j = 0; j < map.m; ++j)
    for (std::int64_t c = 0; c < d; ++c) wt[std::size_t(j * d + c)] = map.w[c * map.m + j];
  map.wt = wt.data();
  return map;
}

// a.phi, its map and a.D from features, row_map and the rows' width d. row_map: None for elementwise
// features, (w, sincos, scale, key_norm, query_norm, query_max) for projected ones (see projected_map),
// (degree, c0, c1, c2) for polynomial ones (see PolynomialMap).
template <class Args, class T>
void set_features(Args& a, int features, const py::object& row_map, std::int64_t d, std::vector<T>& wt) {
  a.d = d;
  if (row_map.is_none()) {
    a.phi = checked_features(features);
    a.D = d;
    return;
  }
  if (features == int(LinearFeatures::projected)) {
    a.phi = LinearFeatures::projected;
    a.map = projected_map<T>(row_map, d, wt);
    a.D = (a.map.sincos ? 2 : 1) * a.map.m;
    return;
  }
  require(features == int(LinearFeatures::polynomial), "a row map needs features 3 (projected) or 4 (polynomial)");
  const auto p = row_map.cast<py::tuple>();
  require(p.size() == 4, "polynomial map: expected (degree, c0, c1, c2)");
  a.phi = LinearFeatures::polynomial;
  a.poly.degree = p[0].cast<int>();
  require(a.poly.degree == 1 || a.poly.degree == 2, "polynomial map: degree must be 1 or 2");
  a.poly.c0 = T(p[1].cast<double>()), a.poly.c1 = T(p[2].cast<double>()), a.poly.c2 = T(p[3].cast<double>());
  a.D = 1 + d + (a.poly.degree == 2 ? d * d : 0);
}

// Views of the causal problem: q, k (batch, n, d), v (batch, n, dv), keep (batch, n) uint8 or None,
// out (batch, n, dv); features and row_map as in set_features (whose w^T goes into wt).
template <class T>
CausalLinearArgs<T> causal_args(const CArray<T>& q, const CArray<T>& k, const CArray<T>& v, const py::object& keep,
                                const CArray<T>& out, int features, double eps, const py::object& row_map,
                                std::vector<T>& wt) {
  require(q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3 && out.ndim() == 3, "q, k, v and out must be 3-D");
  const auto batch = q.shape(0), n = q.shape(1), d = q.shape(2), dv = v.shape(2);
  require(k.shape(0) == batch && k.shape(1) == n && k.shape(2) == d, "k must be shaped like q (batch, n, d)");
  require(v.shape(0) == batch && v.shape(1) == n, "v must be (batch, n, dv)");
  require(out.shape(0) == batch && out.shape(1) == n && out.shape(2) == dv, "out must be (batch, n, dv)");
  CausalLinearArgs<T> a;
  a.q = q.data(), a.k = k.data(), a.v = v.data(), a.out = const_cast<T*>(out.data());
  a.keep = keep_bytes(keep, batch, n);
  a.batch = batch, a.n = n, a.dv = dv;
  set_features(a, features, row_map, d, wt);
  a.eps = T(eps);
  return a;
}

template <class T>
void causal_linear_attention(CArray<T> q, CArray<T> k, CArray<T> v, const py::object& keep, CArray<T> out,
                             int features, double eps, const py::object& row_map, const py::object& state_s,
                             const py::object& state_z) {
  std::vector<T> wt;
  CausalLinearArgs<T> a = causal_args(q, k, v, keep, out, features, eps, row_map, wt);
  a.out = out.mutable_data();
  CArray<double> s, z;
  if (!state_s.is_none()) {
    s = exactly<CArray<double>>(state_s, "state_s");
    z = exactly<CArray<double>>(state_z, "state_z");
    require(s.ndim() == 3 && s.shape(0) == a.batch && s.shape(1) == a.D && s.shape(2) == a.dv,
            "state_s must be (batch, D, dv)");
    require(z.ndim() == 2 && z.shape(0) == a.batch && z.shape(1) == a.D, "state_z must be (batch, D)");
    a.state_s = s.mutable_data();
    a.state_z = z.mutable_data();
  }
  py::gil_scoped_release release;
  active_kernels().get<T>().causal_linear_attention(a);
}

template <class T>
void causal_linear_attention_backward(CArray<T> q, CArray<T> k, CArray<T> v, const py::object& keep, CArray<T> out,
                                      int features, double eps, const py::object& row_map, CArray<T> dout,
                                      CArray<T> dq, CArray<T> dk, CArray<T> dv) {
  std::vector<T> wt;
  CausalLinearBackwardArgs<T> g;
  g.fwd = causal_args(q, k, v, keep, out, features, eps, row_map, wt);
  auto same = [](const CArray<T>& x, const CArray<T>& like) {
    return x.ndim() == 3 && x.shape(0) == like.shape(0) && x.shape(1) == like.shape(1) && x.shape(2) == like.shape(2);
  };
  require(same(dout, out), "dout must be shaped like out (batch, n, dv)");
  require(same(dq, q) && same(dk, k) && same(dv, v), "dq, dk and dv must be shaped like q, k and v");
  g.dout = dout.data();
  g.dq = dq.mutable_data(), g.dk = dk.mutable_data(), g.dv = dv.mutable_data();
  py::gil_scoped_release release;
  active_kernels().get<T>().causal_linear_attention_backward(g);
}

// Views of the non-causal problem: q (batch, nq, d), k (batch, nk, d), v (batch, nk, dv), keep
// (batch, nk) uint8 or None, out (batch, nq, dv), s (batch, D, dv), z (batch, D); features: a
// LinearFeatures value and row_map as in set_features (whose w^T goes into wt).
template <class T>
LinearArgs<T> linear_args(const CArray<T>& q, const CArray<T>& k, const CArray<T>& v, const py::object& keep,
                          const CArray<T>& out, const CArray<T>& s, const CArray<T>& z, int features, double eps,
                          const py::object& row_map, std::vector<T>& wt) {
  require(q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3 && out.ndim() == 3 && s.ndim() == 3 && z.ndim() == 2,
          "q, k, v, out and s must be 3-D, z 2-D");
  const auto batch = q.shape(0), nq = q.shape(1), d = q.shape(2), nk = k.shape(1), dv = v.shape(2);
  require(k.shape(0) == batch && k.shape(2) == d, "k must be (batch, nk, d) like q");
  require(v.shape(0) == batch && v.shape(1) == nk, "v must be (batch, nk, dv)");
  require(out.shape(0) == batch && out.shape(1) == nq && out.shape(2) == dv, "out must be (batch, nq, dv)");
  LinearArgs<T> a;
  set_features(a, features, row_map, d, wt);
  const auto D = a.D;
  require(s.shape(0) == batch && s.shape(1) == D && s.shape(2) == dv, "s must be (batch, D, dv)");
  require(z.shape(0) == batch && z.shape(1) == D, "z must be (batch, D)");
  a.q = q.data(), a.k = k.data(), a.v = v.data();
  a.out = const_cast<T*>(out.data()), a.s = const_cast<T*>(s.data()), a.z = const_cast<T*>(z.data());
  a.keep = keep_bytes(keep, batch, nk);
  a.batch = batch, a.nq = nq, a.nk = nk, a.dv = dv;
  a.eps = T(eps);
  return a;
}

template <class T>
void linear_attention(CArray<T> q, CArray<T> k, CArray<T> v, const py::object& keep, CArray<T> out,
                      CArray<T> s, CArray<T> z, int features, double eps, const py::object& row_map) {
  std::vector<T> wt;
  LinearArgs<T> a = linear_args(q, k, v, keep, out, s, z, features, eps, row_map, wt);
  a.out = out.mutable_data(), a.s = s.mutable_data(), a.z = z.mutable_data();
  py::gil_scoped_release release;
  active_kernels().get<T>().linear_attention(a);
}

template <class T>
void linear_attention_backward(CArray<T> q, CArray<T> k, CArray<T> v, const py::object& keep, CArray<T> out,
                               CArray<T> s, CArray<T> z, int features, double eps, const py::object& row_map,
                               CArray<T> dout, CArray<T> dq, CArray<T> dk, CArray<T> dv) {
  std::vector<T> wt;
  LinearBackwardArgs<T> g;
  g.fwd = linear_args(q, k, v, keep, out, s, z, features, eps, row_map, wt);
  auto same = [](const CArray<T>& x, const CArray<T>& like) {
    return x.ndim() == 3 && x.shape(0) == like.shape(0) && x.shape(1) == like.shape(1) && x.shape(2) == like.shape(2);
  };
  require(same(dout, out), "dout must be shaped like out (batch, nq, dv)");
  require(same(dq, q) && same(dk, k) && same(dv, v), "dq, dk and dv must be shaped like q, k and v");
  g.dout = dout.data();
  g.dq = dq.mutable_data(), g.dk = dk.mutable_data(), g.dv = dv.mutable_data();
  py::gil_scoped_release release;
  active_kernels().get<T>().linear_attention_backward(g);
}

}  // namespace

void bind_linear_attention(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("causal_linear_attention", &causal_linear_attention<T>, py::arg("q").noconvert(), py::arg("k").noconvert(),
          py::arg("v").noconvert(), py::arg("keep"), py::arg("out").noconvert(), py::arg("features"), py::arg("eps"),
          py::arg("row_map"), py::arg("state_s"), py::arg("state_z"));
    m.def("causal_linear_attention_backward", &causal_linear_attention_backward<T>, py::arg("q").noconvert(),
          py::arg("k").noconvert(), py::arg("v").noconvert(), py::arg("keep"), py::arg("out").noconvert(),
          py::arg("features"), py::arg("eps"), py::arg("row_map"), py::arg("dout").noconvert(),
          py::arg("dq").noconvert(), py::arg("dk").noconvert(), py::arg("dv").noconvert());
    m.def("linear_attention", &linear_attention<T>, py::arg("q").noconvert(), py::arg("k").noconvert(),
          py::arg("v").noconvert(), py::arg("keep"), py::arg("out").noconvert(), py::arg("s").noconvert(),
          py::arg("z").noconvert(), py::arg("features"), py::arg("eps"), py::arg("row_map"));
    m.def("linear_attention_backward", &linear_attention_backward<T>, py::arg("q").noconvert(),
          py::arg("k").noconvert(), py::arg("v").noconvert(), py::arg("keep"), py::arg("out").noconvert(),
          py::arg("s").noconvert(), py::arg("z").noconvert(), py::arg("features"), py::arg("eps"),
          py::arg("row_map"), py::arg("dout").noconvert(), py::arg("dq").noconvert(), py::arg("dk").noconvert(),
          py::arg("dv").noconvert());
  });
}

}  // namespace attnkit

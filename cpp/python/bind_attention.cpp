// Bindings of the tiled attention kernels: operands arrive as (array, batch offsets, row stride).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

template <class T>
AttentionArgs<T> attention_args(const py::tuple& q, const py::tuple& k, const py::object& v,
                                const py::object& mask, const py::object& bias,
                                const py::object& key_lengths, bool causal, std::int64_t window_left,
                                std::int64_t window_right, double scale,
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
  require(window_left >= -1 && window_right >= -1, "window sides must be >= 0, or -1 for unbounded");
  a.causal = causal;
  a.window_left = window_left, a.window_right = window_right;
  a.scale = T(scale);
  return a;
}

// The args of a problem whose output is out (batch, nq, dv): sizes read off q, k and out, checked to agree.
template <class T>
AttentionArgs<T> output_args(const py::tuple& q, const py::tuple& k, const py::tuple& v, const py::object& mask,
                             const py::object& bias, const py::object& key_lengths, bool causal,
                             std::int64_t window_left, std::int64_t window_right, double scale, CArray<T>& out) {
  require(out.ndim() == 3, "out must be (batch, nq, dv)");
  const auto batch = out.shape(0), nq = out.shape(1), dv = out.shape(2);
  const auto qa = q[0].cast<py::array>(), ka = k[0].cast<py::array>();
  require(qa.ndim() >= 2 && ka.ndim() >= 2, "q and k must be at least 2-D");
  const auto d = qa.shape(qa.ndim() - 1), nk = ka.shape(ka.ndim() - 2);
  require(qa.shape(qa.ndim() - 2) == nq && ka.shape(ka.ndim() - 1) == d, "q/k/out shapes disagree");
  AttentionArgs<T> a = attention_args<T>(q, k, v, mask, bias, key_lengths, causal, window_left, window_right, scale,
                                         batch, nq, nk, d, dv);
  a.out = out.mutable_data();
  return a;
}

template <class T>
void attention(const py::tuple& q, const py::tuple& k, const py::tuple& v, const py::object& mask,
               const py::object& bias, const py::object& key_lengths, bool causal, std::int64_t window_left,
               std::int64_t window_right, double scale, CArray<T> out, const py::object& lse) {
  AttentionArgs<T> a =
      output_args<T>(q, k, v, mask, bias, key_lengths, causal, window_left, window_right, scale, out);
  const auto batch = a.batch, nq = a.nq;
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
void argmax_attention(const py::tuple& q, const py::tuple& k, const py::tuple& v, const py::object& mask,
                      const py::object& bias, const py::object& key_lengths, bool causal, std::int64_t window_left,
                      std::int64_t window_right, double scale, CArray<T> out) {
  const AttentionArgs<T> a =
      output_args<T>(q, k, v, mask, bias, key_lengths, causal, window_left, window_right, scale, out);
  py::gil_scoped_release release;
  active_kernels().get<T>().argmax_attention(a);
}

template <class T>
void attention_weights(const py::tuple& q, const py::tuple& k, const py::object& mask,
                       const py::object& bias, const py::object& key_lengths, bool causal,
                       std::int64_t window_left, std::int64_t window_right, double scale, CArray<T> lse,
                       CArray<T> weights) {
  require(weights.ndim() == 3, "weights must be (batch, nq, nk)");
  const auto batch = weights.shape(0), nq = weights.shape(1), nk = weights.shape(2);
  const auto qa = q[0].cast<py::array>();
  require(qa.ndim() >= 2, "q must be at least 2-D");
  const auto d = qa.shape(qa.ndim() - 1);
  require(lse.ndim() == 2 && lse.shape(0) == batch && lse.shape(1) == nq, "lse must be (batch, nq)");
  AttentionWeightsArgs<T> w;
  w.attn = attention_args<T>(q, k, py::none(), mask, bias, key_lengths, causal, window_left, window_right, scale, batch,
                             nq, nk, d, 0);
  w.attn.lse = lse.mutable_data();
  w.weights = weights.mutable_data();
  py::gil_scoped_release release;
  active_kernels().get<T>().attention_weights(w);
}

template <class T>
void attention_backward(const py::tuple& q, const py::tuple& k, const py::tuple& v, const py::object& mask,
                        const py::object& bias, const py::object& key_lengths, bool causal, std::int64_t window_left,
               std::int64_t window_right, double scale,
                        CArray<T> lse, CArray<T> dout, CArray<T> delta, CArray<T> dq, CArray<T> dk, CArray<T> dv,
                        const py::object& dbias) {
  require(dq.ndim() == 3 && dk.ndim() == 3 && dv.ndim() == 3, "dq, dk, dv must be 3-D");
  const auto batch = dq.shape(0), nq = dq.shape(1), d = dq.shape(2), nk = dk.shape(1), dvw = dv.shape(2);
  require(dk.shape(0) == batch && dk.shape(2) == d && dv.shape(0) == batch && dv.shape(1) == nk,
          "dq (batch, nq, d), dk (batch, nk, d), dv (batch, nk, dv) disagree");
  require(dout.ndim() == 3 && dout.shape(0) == batch && dout.shape(1) == nq && dout.shape(2) == dvw,
          "dout must be (batch, nq, dv)");
  require(lse.ndim() == 2 && lse.shape(0) == batch && lse.shape(1) == nq, "lse must be (batch, nq)");
  require(delta.ndim() == 2 && delta.shape(0) == batch && delta.shape(1) == nq, "delta must be (batch, nq)");
  AttentionBackwardArgs<T> g;
  g.attn = attention_args<T>(q, k, v, mask, bias, key_lengths, causal, window_left, window_right, scale, batch, nq,
                             nk, d, dvw);
  g.attn.lse = const_cast<T*>(lse.data());  // read only: the forward's output slot, reused
  g.dout = dout.data();
  g.delta = delta.data();
  g.dq = dq.mutable_data();
  g.dk = dk.mutable_data();
  g.dv = dv.mutable_data();
  CArray<T> dbias_arr;
  if (!dbias.is_none()) {
    dbias_arr = exactly<CArray<T>>(dbias, "dbias");
    require(dbias_arr.ndim() == 3 && dbias_arr.shape(0) == batch && dbias_arr.shape(1) == nq &&
                dbias_arr.shape(2) == nk,
            "dbias must be (batch, nq, nk)");
    g.dbias = dbias_arr.mutable_data();
  }
  py::gil_scoped_release release;
  active_kernels().get<T>().attention_backward(g);
}

// Self-attention of items packed end to end: item b has lengths[b] queries and keys (rows of q, k,
// v and out at the operands' offsets); rows past an item's length are neither read nor written.
template <class T>
void packed_attention(const py::tuple& q, const py::tuple& k, const py::tuple& v, Offsets lengths,
                      bool causal, std::int64_t window_left, std::int64_t window_right, double scale,
                      std::int64_t d, std::int64_t dv, CArray<T> out,
                      Offsets out_offsets) {
  require(lengths.ndim() == 1, "lengths must be 1-D");
  const std::int64_t batch = lengths.shape(0);
  const std::int64_t* n = lengths.data();
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    require(n[b] >= 0, "lengths must be non-negative");
    longest = n[b] > longest ? n[b] : longest;
  }
  require(d > 0 && dv >= 0, "d must be positive and dv non-negative");
  AttentionArgs<T> a;
  a.batch = batch, a.nq = longest, a.nk = longest, a.d = d, a.dv = dv;
  a.q = batched_rows<T>(q, batch, longest, d, "q", n);
  a.k = batched_rows<T>(k, batch, longest, d, "k", n);
  a.v = batched_rows<T>(v, batch, longest, dv, "v", n);
  require(out.ndim() == 2, "out must be 2-D: (rows, width)");
  const BatchedRows<T> o = batched_rows<T>(py::make_tuple(out, out_offsets, out.shape(1)), batch, longest, dv,
                                           "out", n);
  a.out = out.mutable_data();
  a.out_offset = o.batch_offset;
  a.out_row_stride = o.row_stride;
  a.key_length = n;
  a.query_length = n;
  require(window_left >= -1 && window_right >= -1, "window sides must be >= 0, or -1 for unbounded");
  a.causal = causal;
  a.window_left = window_left, a.window_right = window_right;
  a.scale = T(scale);
  py::gil_scoped_release release;
  active_kernels().get<T>().attention(a);
}

}  // namespace

void bind_attention(py::module_& m) {
  for_each_dtype([&m](auto tag) {
    using T = typename decltype(tag)::type;
    m.def("attention", &attention<T>, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask"),
          py::arg("bias"), py::arg("key_lengths"), py::arg("causal"),
          py::arg("window_left"), py::arg("window_right"), py::arg("scale"),
          py::arg("out").noconvert(), py::arg("lse"));
    m.def("argmax_attention", &argmax_attention<T>, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask"),
          py::arg("bias"), py::arg("key_lengths"), py::arg("causal"), py::arg("window_left"),
          py::arg("window_right"), py::arg("scale"), py::arg("out").noconvert());
    m.def("attention_weights", &attention_weights<T>, py::arg("q"), py::arg("k"), py::arg("mask"),
          py::arg("bias"), py::arg("key_lengths"), py::arg("causal"),
          py::arg("window_left"), py::arg("window_right"), py::arg("scale"),
          py::arg("lse").noconvert(), py::arg("weights").noconvert());
    m.def("attention_backward", &attention_backward<T>, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask"),
          py::arg("bias"), py::arg("key_lengths"), py::arg("causal"),
          py::arg("window_left"), py::arg("window_right"), py::arg("scale"), py::arg("lse").noconvert(),
          py::arg("dout").noconvert(), py::arg("delta").noconvert(), py::arg("dq").noconvert(),
          py::arg("dk").noconvert(), py::arg("dv").noconvert(), py::arg("dbias"));
    m.def("packed_attention", &packed_attention<T>, py::arg("q"), py::arg("k"), py::arg("v"),
          py::arg("lengths").noconvert(), py::arg("causal"), py::arg("window_left"),
          py::arg("window_right"), py::arg("scale"), py::arg("d"), py::arg("dv"),
          py::arg("out").noconvert(), py::arg("out_offsets").noconvert());
  });
}

}  // namespace attnkit

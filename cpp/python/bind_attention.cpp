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

// The args of a problem with batch items of nq queries and dv output columns: d and nk read off q and k.
template <class T>
AttentionArgs<T> problem_args(const py::tuple& q, const py::tuple& k, const py::object& v, const py::object& mask,
                              const py::object& bias, const py::object& key_lengths, bool causal,
                              std::int64_t window_left, std::int64_t window_right, double scale, std::int64_t batch,
                              std::int64_t nq, std::int64_t dv) {
  const auto qa = q[0].cast<py::array>(), ka = k[0].cast<py::array>();
  require(qa.ndim() >= 2 && ka.ndim() >= 2, "q and k must be at least 2-D");
  const auto d = qa.shape(qa.ndim() - 1), nk = ka.shape(ka.ndim() - 2);
  require(qa.shape(qa.ndim() - 2) == nq && ka.shape(ka.ndim() - 1) == d, "q/k/out shapes disagree");
  return attention_args<T>(q, k, v, mask, bias, key_lengths, causal, window_left, window_right, scale, batch, nq, nk,
                           d, dv);
}

// The (batch, nq, dv) result is written through the operand (out, out_offsets, out_row_stride): out is typed, so
// that the overload of its dtype is the one called.
template <class T>
void attention(const py::tuple& q, const py::tuple& k, const py::tuple& v, const py::object& mask,
               const py::object& bias, const py::object& key_lengths, bool causal, std::int64_t window_left,
               std::int64_t window_right, double scale, py::array_t<T> out, Offsets out_offsets,
               std::int64_t out_row_stride, std::int64_t nq, std::int64_t dv, const py::object& lse) {
  const std::int64_t batch = out_offsets.ndim() == 1 ? out_offsets.shape(0) : -1;
  AttentionArgs<T> a =
      problem_args<T>(q, k, v, mask, bias, key_lengths, causal, window_left, window_right, scale, batch, nq, dv);
  const BatchedRowsOut<T> o = output_rows<T>(py::make_tuple(out, out_offsets, out_row_stride), batch, nq, dv, "out");
  a.out = o.data, a.out_offset = o.batch_offset, a.out_row_stride = o.row_stride;
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
  require(out.ndim() == 3, "out must be (batch, nq, dv)");
  AttentionArgs<T> a = problem_args<T>(q, k, v, mask, bias, key_lengths, causal, window_left, window_right, scale,
                                       out.shape(0), out.shape(1), out.shape(2));
  a.out = out.mutable_data();
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

// dout and out are read, dq, dk and dv written, through (array, batch offsets, row stride) operands.
template <class T>
void attention_backward(const py::tuple& q, const py::tuple& k, const py::tuple& v, const py::object& mask,
                        const py::object& bias, const py::object& key_lengths, bool causal, std::int64_t window_left,
                        std::int64_t window_right, double scale, CArray<T> lse, const py::tuple& dout,
                        const py::tuple& out, const py::tuple& dq, const py::tuple& dk, const py::tuple& dv,
                        std::int64_t batch, std::int64_t nq, std::int64_t dvw, const py::object& dbias) {
  require(lse.ndim() == 2 && lse.shape(0) == batch && lse.shape(1) == nq, "lse must be (batch, nq)");
  AttentionBackwardArgs<T> g;
  g.attn = problem_args<T>(q, k, v, mask, bias, key_lengths, causal, window_left, window_right, scale, batch, nq, dvw);
  const auto nk = g.attn.nk, d = g.attn.d;
  g.attn.lse = const_cast<T*>(lse.data());  // read only: the forward's output slot, reused
  g.dout = batched_rows<T>(dout, batch, nq, dvw, "dout");
  g.out = batched_rows<T>(out, batch, nq, dvw, "out");
  g.dq = output_rows<T>(dq, batch, nq, d, "dq");
  g.dk = output_rows<T>(dk, batch, nk, d, "dk");
  g.dv = output_rows<T>(dv, batch, nk, dvw, "dv");
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
          py::arg("out").noconvert(), py::arg("out_offsets").noconvert(), py::arg("out_row_stride"), py::arg("nq"),
          py::arg("dv"), py::arg("lse"));
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
          py::arg("dout"), py::arg("out"), py::arg("dq"), py::arg("dk"), py::arg("dv"), py::arg("batch"),
          py::arg("nq"), py::arg("dv_width"), py::arg("dbias"));
    m.def("packed_attention", &packed_attention<T>, py::arg("q"), py::arg("k"), py::arg("v"),
          py::arg("lengths").noconvert(), py::arg("causal"), py::arg("window_left"),
          py::arg("window_right"), py::arg("scale"), py::arg("d"), py::arg("dv"),
          py::arg("out").noconvert(), py::arg("out_offsets").noconvert());
  });
}

}  // namespace attnkit

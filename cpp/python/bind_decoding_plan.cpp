// Binding of the decoding plan (attnkit/decoding_plan.h). The op layer (ops/decoding_plan.py) lays the weights
// out; this file checks every array's dtype, layout and shape once at construction (keeping a reference to
// each, since the plan holds their pointers) and the cache buffers at every step, then releases the GIL for
// the whole step.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "attnkit/decoding_plan.h"
#include "bindings.h"

namespace attnkit {

namespace {

class PyDecodingPlan {
 public:
  PyDecodingPlan(std::int64_t d_model, std::int64_t n_heads, std::int64_t n_kv_heads, std::int64_t d_head,
                 std::int64_t d_ff, const std::string& norm, double eps, const std::string& activation,
                 double rotary_base, const py::sequence& layers, const py::object& final_gamma,
                 const py::object& final_beta) {
    require(d_model > 0 && n_heads > 0 && n_kv_heads > 0 && d_head > 0 && d_ff > 0,
            "d_model, n_heads, n_kv_heads, d_head and d_ff must be positive");
    require(n_heads % n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads");
    require(norm == "layer" || norm == "rms", "norm must be 'layer' or 'rms', got '" + norm + "'");
    require(rotary_base >= 0.0, "rotary_base must be >= 0 (0: none)");
    require(rotary_base == 0.0 || d_head % 2 == 0, "rotary positions need an even d_head");
    PlanShape s;
    s.d_model = d_model, s.n_heads = n_heads, s.n_kv_heads = n_kv_heads, s.d_head = d_head, s.d_ff = d_ff;
    s.rms = norm == "rms", s.eps = float(eps), s.rotary_base = rotary_base;
    if (activation == "gelu_tanh") s.activation = PlanActivation::gelu_tanh;
    else if (activation == "gelu") s.activation = PlanActivation::gelu;
    else if (activation == "relu") s.activation = PlanActivation::relu;
    else if (activation == "swiglu") s.activation = PlanActivation::swiglu;
    else require(false, "activation must be 'gelu_tanh', 'gelu', 'relu' or 'swiglu', got '" + activation + "'");
    shape_ = s;

    const std::int64_t inner = n_heads * d_head, kv_inner = n_kv_heads * d_head;
    const std::int64_t hidden = s.activation == PlanActivation::swiglu ? 2 * d_ff : d_ff;
    std::vector<PlanLayer> plan_layers;
    for (const py::handle entry : layers) {
      const auto t = entry.cast<py::tuple>();
      require(t.size() == 16, "each layer must be (norm1 gamma, beta, norm2 gamma, beta, wq, bq, wk, bk, wv, bv, "
                              "wo, bo, w1, b1, w2, b2)");
      PlanLayer p;
      p.norm1 = plan_norm(t[0], t[1], "norm1");
      p.norm2 = plan_norm(t[2], t[3], "norm2");
      p.wq = weight(t[4], t[5], d_model, inner, "wq");
      p.wk = weight(t[6], t[7], d_model, kv_inner, "wk");
      p.wv = weight(t[8], t[9], d_model, kv_inner, "wv");
      p.wo = weight(t[10], t[11], inner, d_model, "wo");
      p.w1 = weight(t[12], t[13], d_model, hidden, "w1");
      p.w2 = weight(t[14], t[15], d_ff, d_model, "w2");
      plan_layers.push_back(p);
    }
    require(!plan_layers.empty(), "layers must hold at least one layer");
    const PlanNorm final_norm = plan_norm(final_gamma, final_beta, "final norm");
    plan_ = std::make_unique<DecodingPlan>(s, std::move(plan_layers), final_norm);
  }

  // positions: one per row of x (int64), each >= 0 and below every buffer's capacity. sequences (None: row b's
  // own): each row's cache row, no two rows at one (sequence, position).
  py::array_t<float> step(CArray<float> x, CArray<std::int64_t> positions, const py::sequence& keys,
                          const py::sequence& values, const py::object& sequences) {
    const PlanShape& s = shape_;
    require(x.ndim() == 2 && x.shape(1) == s.d_model, "x must be (batch, d_model)");
    const std::int64_t batch = x.shape(0), n_layers = plan_->n_layers();
    require(batch >= 1, "x must hold at least one row");
    require(std::int64_t(keys.size()) == n_layers && std::int64_t(values.size()) == n_layers,
            "keys and values must hold one buffer per layer");
    require(positions.ndim() == 1 && positions.shape(0) == batch, "positions must hold one position per row of x");
    const std::int64_t* at = positions.data();
    const std::int64_t last = *std::max_element(at, at + batch);
    require(*std::min_element(at, at + batch) >= 0, "positions must be >= 0");
    std::int64_t cache_rows = batch;
    const std::int64_t* seq = nullptr;
    CArray<std::int64_t> rows;
    if (!sequences.is_none()) {
      rows = exactly<CArray<std::int64_t>>(sequences, "sequences");
      require(rows.ndim() == 1 && rows.shape(0) == batch, "sequences must hold one cache row per row of x");
      cache_rows = exactly<CArray<float>>(keys[0], "keys").shape(0);
      seq = rows.data();
      std::vector<std::pair<std::int64_t, std::int64_t>> pairs(static_cast<std::size_t>(batch));
      for (std::int64_t b = 0; b < batch; ++b) {
        require(seq[b] >= 0 && seq[b] < cache_rows, "sequences must be cache rows in [0, keys' batch)");
        pairs[std::size_t(b)] = {seq[b], at[b]};
      }
      std::sort(pairs.begin(), pairs.end());
      require(std::adjacent_find(pairs.begin(), pairs.end()) == pairs.end(),
              "no two rows may write one (sequence, position)");
    }
    std::vector<PlanCache> caches(static_cast<std::size_t>(n_layers));  // per call: two threads may step one plan
    for (std::int64_t l = 0; l < n_layers; ++l) {
      auto k = exactly<CArray<float>>(keys[py::size_t(l)], "keys");
      auto v = exactly<CArray<float>>(values[py::size_t(l)], "values");
      for (const auto* a : {&k, &v}) {
        require(a->ndim() == 4 && a->shape(0) == cache_rows && a->shape(1) == s.n_kv_heads && a->shape(3) == s.d_head,
                "keys and values must be (batch, n_kv_heads, capacity, d_head)");
        require(a->writeable(), "keys and values must be writeable");
      }
      require(k.shape(2) == v.shape(2) && last < k.shape(2), "keys and values must have room at every position");
      caches[std::size_t(l)] = {k.mutable_data(), v.mutable_data(), k.shape(2)};
    }
    py::array_t<float> out({batch, s.d_model});
    float* o = out.mutable_data();
    const float* xs = x.data();
    {
      py::gil_scoped_release release;
      plan_->step(xs, o, batch, at, seq, caches.data());
    }
    return out;
  }

 private:
  PlanNorm plan_norm(const py::handle& gamma, const py::handle& beta, const char* name) {
    PlanNorm p;
    p.gamma = vector(gamma, shape_.d_model, name);
    require(shape_.rms == beta.is_none(), std::string(name) + ": a beta with LayerNorm, none with RMSNorm");
    if (!beta.is_none()) p.beta = vector(beta, shape_.d_model, name);
    return p;
  }

  const float* vector(const py::handle& obj, std::int64_t n, const char* name) {
    auto a = exactly<CArray<float>>(obj, name);
    require(a.ndim() == 1 && a.shape(0) == n, std::string(name) + ": expected a vector of " + std::to_string(n));
    keep_.append(a);
    return a.data();
  }

  // A float32 (n_in, n_out) array, or (blocks, kind, n_in, int8_x, packed or None) of a block-quantised matrix.
  PlanWeight weight(const py::handle& w, const py::handle& bias, std::int64_t n_in, std::int64_t n_out,
                    const char* name) {
    PlanWeight p;
    p.n_in = n_in, p.n_out = n_out;
    if (py::isinstance<py::tuple>(w)) {
      const auto t = w.cast<py::tuple>();
      require(t.size() == 5, std::string(name) + ": blocks as (blocks, kind, n_in, int8_x, packed or None)");
      auto blocks = exactly<CArray<std::uint8_t>>(t[0], name);
      const auto kind = t[1].cast<std::string>();
      require(kind == "q8_0" || kind == "q4_1", std::string(name) + ": kind must be 'q4_1' or 'q8_0'");
      p.kind = kind == "q8_0" ? BlockKind::q8_0 : BlockKind::q4_1;
      require(t[2].cast<std::int64_t>() == n_in && n_in % kBlockValues == 0,
              std::string(name) + ": n_in must be " + std::to_string(n_in) + ", a multiple of 32");
      require(blocks.ndim() == 2 && blocks.shape(0) == n_out &&
                  blocks.shape(1) == n_in / kBlockValues * block_bytes(p.kind),
              std::string(name) + ": blocks must be (n_out, n_in / 32 * block_bytes)");
      keep_.append(blocks);
      p.blocks = blocks.data();
      p.int8_x = t[3].cast<bool>();
      p.packed = packed_blocks(t[4], p.kind, n_in, n_out, keep_);
    } else {
      auto a = exactly<CArray<float>>(w, name);
      require(a.ndim() == 2 && a.shape(0) == n_in && a.shape(1) == n_out,
              std::string(name) + ": expected (" + std::to_string(n_in) + ", " + std::to_string(n_out) + ")");
      keep_.append(a);
      p.data = a.data();
    }
    if (!bias.is_none()) p.bias = vector(bias, n_out, name);
    return p;
  }

  PlanShape shape_;
  std::unique_ptr<DecodingPlan> plan_;
  py::list keep_;  // every array the plan points into
};

}  // namespace

void bind_decoding_plan(py::module_& m) {
  py::class_<PyDecodingPlan>(m, "DecodingPlan", "One decoding step of a stack of pre-LN blocks, in C++.")
      .def(py::init<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, const std::string&, double,
                    const std::string&, double, const py::sequence&, const py::object&, const py::object&>(),
           py::arg("d_model"), py::arg("n_heads"), py::arg("n_kv_heads"), py::arg("d_head"), py::arg("d_ff"),
           py::arg("norm"), py::arg("eps"), py::arg("activation"), py::arg("rotary_base"), py::arg("layers"),
           py::arg("final_gamma"), py::arg("final_beta"))
      .def("step", &PyDecodingPlan::step, py::arg("x").noconvert(), py::arg("positions").noconvert(),
           py::arg("keys"), py::arg("values"), py::arg("sequences") = py::none(),
           "The stack's output (batch, d_model) for x, row b at positions[b] of cache row sequences[b] (b when "
           "None); writes the keys and values.");
}

}  // namespace attnkit

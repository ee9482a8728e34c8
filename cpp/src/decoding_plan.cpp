// A decoding step composed from the kernel table (see attnkit/decoding_plan.h). Compiled once, not per ISA:
// the work is in the kernels it calls (active_kernels(), looked up per step so set_isa applies); the few
// elementwise loops here (rotary turn, cache writes, swiglu, residual adds) are O(B d) per layer. The
// arithmetic mirrors the NumPy path of attnkit.nn term for term (rotary angles in double, rounded to
// float; a product then a difference), so the plan's steps equal it to float32 rounding.
#include "attnkit/decoding_plan.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "attnkit/isa.h"

namespace attnkit {

namespace {

// c (m, n_out) = x (m, n_in) W + bias, rows contiguous.
void product(const KernelTable& kt, BlockQuantizedKernel blocked, const PlanWeight& w, const float* x, std::int64_t m,
             float* c) {
  if (w.blocks != nullptr) {
    BlockQuantizedMatmulArgs g;
    g.blocks = w.blocks, g.kind = w.kind, g.int8_x = w.int8_x, g.x = x, g.bias = w.bias, g.c = c;
    g.m = m, g.n_in = w.n_in, g.n_out = w.n_out, g.x_row_stride = w.n_in, g.c_row_stride = w.n_out;
    blocked(g);
    return;
  }
  MatmulArgs<float> g;
  g.a = x, g.b = w.data, g.bias = w.bias, g.c = c;
  g.m = m, g.k = w.n_in, g.n = w.n_out;
  g.a_row_stride = w.n_in, g.a_col_stride = 1, g.b_row_stride = w.n_out, g.b_col_stride = 1, g.c_row_stride = w.n_out;
  kt.f32.matmul(g);
}

void norm(const KernelTable& kt, const PlanShape& s, const PlanNorm& p, const float* x, float* y, std::int64_t rows) {
  LayerNormArgs<float> a;
  a.x = x, a.gamma = p.gamma, a.beta = p.beta, a.y = y;
  a.rows = rows, a.n = s.d_model, a.eps = s.eps, a.rms = s.rms;
  kt.f32.layer_norm(a);
}

// Each of `heads` rows of width dh (pairs interleaved) turned by the angles whose sin, cos are given.
void rotate(float* x, std::int64_t heads, std::int64_t dh, const float* sin, const float* cos) {
  for (std::int64_t h = 0; h < heads; ++h) {
    float* r = x + h * dh;
    for (std::int64_t i = 0; i < dh / 2; ++i) {
      const float even = r[2 * i], odd = r[2 * i + 1];
      const float a = even * cos[i], b = odd * sin[i];
      const float c = even * sin[i], d = odd * cos[i];
      r[2 * i] = a - b;
      r[2 * i + 1] = c + d;
    }
  }
}

}  // namespace

DecodingPlan::DecodingPlan(const PlanShape& shape, std::vector<PlanLayer> layers, const PlanNorm& final_norm)
    : shape_(shape), layers_(std::move(layers)), final_norm_(final_norm) {
  const std::int64_t dh = shape_.d_head;
  table_.resize(std::size_t(dh));
  sin_.resize(std::size_t(dh / 2));
  cos_.resize(std::size_t(dh / 2));
}

void DecodingPlan::reserve(std::int64_t batch) {
  if (batch <= batch_capacity_) return;
  const PlanShape& s = shape_;
  const auto rows = std::size_t(batch);
  const std::int64_t inner = s.n_heads * s.d_head, kv_inner = s.n_kv_heads * s.d_head;
  const std::int64_t hidden = s.activation == PlanActivation::swiglu ? 2 * s.d_ff : s.d_ff;
  x_.resize(rows * std::size_t(s.d_model));
  n_.resize(rows * std::size_t(s.d_model));
  q_.resize(rows * std::size_t(inner));
  k_.resize(rows * std::size_t(kv_inner));
  v_.resize(rows * std::size_t(kv_inner));
  heads_.resize(rows * std::size_t(inner));
  hidden_.resize(rows * std::size_t(hidden));
  gated_.resize(s.activation == PlanActivation::swiglu ? rows * std::size_t(s.d_ff) : 0);
  q_offset_.resize(rows * std::size_t(s.n_heads));
  kv_offset_.resize(rows * std::size_t(s.n_heads));
  batch_capacity_ = batch;
}

void DecodingPlan::step(const float* x, float* out, std::int64_t batch, std::int64_t position,
                        const PlanCache* caches) {
  std::lock_guard<std::mutex> lock(mutex_);
  reserve(batch);
  const KernelTable& kt = active_kernels();
  const BlockQuantizedKernel blocked = active_block_quantized_matmul();
  const PlanShape& s = shape_;
  const std::int64_t d = s.d_model, dh = s.d_head, heads = s.n_heads, kv_heads = s.n_kv_heads;
  const std::int64_t group = heads / kv_heads, inner = heads * dh, kv_inner = kv_heads * dh, nk = position + 1;
  const bool rotary = s.rotary_base > 0.0;
  if (rotary) {  // (sin, cos) of each pair's angle at this position, in double as ops.rotary_positions
    PositionsArgs<double> p{table_.data(), 1, dh, s.rotary_base, double(position)};
    kt.f64.positions(p);
    for (std::int64_t i = 0; i < dh / 2; ++i) sin_[i] = float(table_[2 * i]), cos_[i] = float(table_[2 * i + 1]);
  }
  for (std::int64_t i = 0; i < batch * heads; ++i) q_offset_[i] = i * dh;

  float* h = x_.data();
  std::copy(x, x + batch * d, h);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const PlanLayer& layer = layers_[l];
    const PlanCache& cache = caches[l];
    norm(kt, s, layer.norm1, h, n_.data(), batch);
    product(kt, blocked, layer.wq, n_.data(), batch, q_.data());
    product(kt, blocked, layer.wk, n_.data(), batch, k_.data());
    product(kt, blocked, layer.wv, n_.data(), batch, v_.data());
    for (std::int64_t b = 0; b < batch; ++b) {
      if (rotary) {
        rotate(q_.data() + b * inner, heads, dh, sin_.data(), cos_.data());
        rotate(k_.data() + b * kv_inner, kv_heads, dh, sin_.data(), cos_.data());
      }
      for (std::int64_t g = 0; g < kv_heads; ++g) {
        const std::int64_t slot = ((b * kv_heads + g) * cache.capacity + position) * dh;
        std::copy_n(k_.data() + b * kv_inner + g * dh, dh, cache.keys + slot);
        std::copy_n(v_.data() + b * kv_inner + g * dh, dh, cache.values + slot);
      }
      for (std::int64_t hq = 0; hq < heads; ++hq)
        kv_offset_[b * heads + hq] = (b * kv_heads + hq / group) * cache.capacity * dh;
    }
    // One query per (row, head) against its shared key/value head: the tiled kernel, one item each.
    AttentionArgs<float> a;
    a.batch = batch * heads, a.nq = 1, a.nk = nk, a.d = dh, a.dv = dh;
    a.q = {q_.data(), q_offset_.data(), dh};
    a.k = {cache.keys, kv_offset_.data(), dh};
    a.v = {cache.values, kv_offset_.data(), dh};
    a.scale = float(1.0 / std::sqrt(double(dh)));
    a.out = heads_.data();
    kt.f32.attention(a);
    product(kt, blocked, layer.wo, heads_.data(), batch, n_.data());
    for (std::int64_t i = 0; i < batch * d; ++i) h[i] += n_[i];

    norm(kt, s, layer.norm2, h, n_.data(), batch);
    product(kt, blocked, layer.w1, n_.data(), batch, hidden_.data());
    const float* act = hidden_.data();
    const std::int64_t f = s.d_ff;
    switch (s.activation) {
      case PlanActivation::gelu_tanh:
      case PlanActivation::gelu: {
        GeluArgs<float> g;
        g.x = hidden_.data(), g.out = hidden_.data(), g.n = batch * f;
        g.exact = s.activation == PlanActivation::gelu;
        kt.f32.gelu(g);
        break;
      }
      case PlanActivation::relu:
        for (std::int64_t i = 0; i < batch * f; ++i) hidden_[i] = hidden_[i] < 0.0f ? 0.0f : hidden_[i];
        break;
      case PlanActivation::swiglu:  // silu(gate) up, the logistic as 0.5 (1 + tanh(gate / 2)) (nn.layers)
        for (std::int64_t b = 0; b < batch; ++b) {
          const float* gate = hidden_.data() + b * 2 * f;
          const float* up = gate + f;
          float* r = gated_.data() + b * f;
          for (std::int64_t j = 0; j < f; ++j) {
            const float sig = 0.5f * (1.0f + std::tanh(0.5f * gate[j]));
            r[j] = (gate[j] * sig) * up[j];
          }
        }
        act = gated_.data();
        break;
    }
    product(kt, blocked, layer.w2, act, batch, n_.data());
    for (std::int64_t i = 0; i < batch * d; ++i) h[i] += n_[i];
  }
  norm(kt, s, final_norm_, h, out, batch);
}

}  // namespace attnkit

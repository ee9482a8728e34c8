// A decoding step composed from the kernel table (see attnkit/decoding_plan.h). Compiled once, not per ISA:
// the work is in the kernels it calls (active_kernels(), looked up per step so set_isa applies); the few
// elementwise loops here (rotary turn, cache writes, swiglu, residual adds) are O(B d) per layer. The
// arithmetic mirrors the NumPy path of attnkit.nn term for term (rotary angles in double, rounded to
// float; a product then a difference), so the plan's steps equal it to float32 rounding.
#include "attnkit/decoding_plan.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <tuple>
#include <utility>

#include "attnkit/isa.h"
#include "thread_team.h"

namespace attnkit {

namespace {

// Columns [j0, j1) of c (m, n_out) = x (m, n_in) W + bias, rows contiguous. Every kernel computes a column
// the same way whatever columns it is given, so a team's shares give the bits of one call over all of them.
// x_codes: x already read as int8 blocks (codes, then scales and scaled sums), or null.
void product(const KernelTable& kt, BlockQuantizedKernel blocked, const PlanWeight& w, const float* x, std::int64_t m,
             float* c, std::int64_t j0, std::int64_t j1, const std::int8_t* x_codes, const float* x_scales,
             const float* x_scaled_sums) {
  if (j0 >= j1) return;
  if (w.blocks != nullptr) {
    BlockQuantizedMatmulArgs g;
    g.blocks = w.blocks + j0 * (w.n_in / kBlockValues) * block_bytes(w.kind), g.kind = w.kind, g.int8_x = w.int8_x;
    if (w.packed != nullptr) g.packed = w.packed + j0 / kPackedColumns * (w.n_in / kBlockValues) * packed_bytes(w.kind);
    g.x = x, g.bias = w.bias ? w.bias + j0 : nullptr, g.c = c + j0;
    g.m = m, g.n_in = w.n_in, g.n_out = j1 - j0, g.x_row_stride = w.n_in, g.c_row_stride = w.n_out;
    if (w.int8_x) g.x_codes = x_codes, g.x_scales = x_scales, g.x_scaled_sums = x_scaled_sums;
    blocked(g);
    return;
  }
  MatmulArgs<float> g;
  g.a = x, g.b = w.data + j0, g.bias = w.bias ? w.bias + j0 : nullptr, g.c = c + j0;
  g.m = m, g.k = w.n_in, g.n = j1 - j0;
  g.a_row_stride = w.n_in, g.a_col_stride = 1, g.b_row_stride = w.n_out, g.b_col_stride = 1, g.c_row_stride = w.n_out;
  kt.f32.matmul(g);
}

// Whether any of the products reads its input as int8 blocks.
bool reads_int8(std::initializer_list<const PlanWeight*> weights) {
  for (const PlanWeight* w : weights)
    if (w->blocks != nullptr && w->int8_x) return true;
  return false;
}

// A weight's share of the work below which a step runs on one thread: a team's fork and ~9 barriers a layer
// made a step of 4 float32 layers of d = 64 take 105 us (43 us alone) on the 2-core Xeon measured. Float32
// weights are read at ~30 GB/s and lost with a team at 7 MB, won 1.07x at 12.6 MB; Q4_1 blocks, dequantised as
// they are read, at ~7 GB/s: lost at 0.5 MB, won 1.27x at 2 MB (1.72x at 8 MB, SmolLM2: 2x).
double team_work(const PlanWeight& w) {
  if (w.blocks != nullptr) return double(w.n_out * (w.n_in / kBlockValues) * block_bytes(w.kind)) / double(1 << 20);
  return double(w.n_in * w.n_out * 4) / double(8 << 20);
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
  table_.resize(std::size_t(shape_.d_head));
  for (const PlanLayer& l : layers_)
    for (const PlanWeight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2}) team_work_ += team_work(*w);
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
  sin_.resize(rows * std::size_t(s.d_head / 2));
  cos_.resize(rows * std::size_t(s.d_head / 2));
  kv_offset_.resize(rows * std::size_t(s.n_heads));
  const auto width = std::size_t(std::max({s.d_model, inner, s.d_ff}));
  x_codes_.resize(rows * width);
  x_scales_.resize(rows * width / kBlockValues);
  x_scaled_sums_.resize(rows * width / kBlockValues);
  sequence_.resize(rows);
  batch_capacity_ = batch;
}

void DecodingPlan::step(const float* x, float* out, std::int64_t batch, const std::int64_t* positions,
                        const std::int64_t* sequences, const PlanCache* caches) {
  std::lock_guard<std::mutex> lock(mutex_);
  reserve(batch);
  const KernelTable& kt = active_kernels();
  const PlanShape& s = shape_;
  const std::int64_t dh = s.d_head, half = dh / 2;
  for (std::int64_t b = 0; s.rotary_base > 0.0 && b < batch; ++b) {
    // Row b's (sin, cos) of each pair's angle at its position, in double as ops.rotary_positions.
    float *sin = sin_.data() + b * half, *cos = cos_.data() + b * half;
    if (b > 0 && positions[b] == positions[b - 1]) {  // a batch of one prompt length: one table
      std::copy_n(sin - half, half, sin), std::copy_n(cos - half, half, cos);
      continue;
    }
    PositionsArgs<double> p{table_.data(), 1, dh, s.rotary_base, double(positions[b])};
    kt.f64.positions(p);
    for (std::int64_t i = 0; i < half; ++i) sin[i] = float(table_[2 * i]), cos[i] = float(table_[2 * i + 1]);
  }
  for (std::int64_t b = 0; b < batch; ++b) sequence_[b] = sequences ? sequences[b] : b;
  distinct_ = true;
  if (sequences != nullptr) {
    std::vector<std::int64_t> sorted(sequences, sequences + batch);
    std::sort(sorted.begin(), sorted.end());
    distinct_ = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  }
  std::copy(x, x + batch * s.d_model, x_.data());

  int threads = team_work_ >= 1.0 ? kernel_threads() : 1;
  if (solo_steps_ > 0) --solo_steps_, threads = 1;
  if (threads == 1) return layers(ThreadTeam{}, batch, positions, caches, out);
  SpinBarrier barrier(threads);
#pragma omp parallel num_threads(threads)
  {
    // Each member runs its share of every kernel on its own (the kernels' own parallel regions would nest).
    const int own = get_call_threads();
    set_call_threads(1);
    if (omp_get_num_threads() == threads) {
      layers(ThreadTeam{omp_get_thread_num(), threads, &barrier}, batch, positions, caches, out);
    } else if (omp_get_thread_num() == 0) {  // fewer threads than asked for (a nested call): the lead alone
      layers(ThreadTeam{}, batch, positions, caches, out);
    }
    set_call_threads(own);
  }
  // Members that fell asleep at most meetings did not have their own cores: beside one busy process SmolLM2's
  // steps slept at 271 of 271 and decoded 47 tokens/s against 70 on one thread. One thread then, for 64 steps,
  // twice as many each time the machine is still busy after them (up to 4096). On a free machine 0-3 of a
  // step's meetings sleep (44-66 in a rare step: a core lost for a while).
  if (2 * unsigned(barrier.sleeps()) > barrier.meetings()) {
    solo_steps_ = solo_period_;
    solo_period_ = std::min(2 * solo_period_, 4096);
  } else {
    solo_period_ = 64;
  }
}

void DecodingPlan::layers(const ThreadTeam& team, std::int64_t batch, const std::int64_t* positions,
                          const PlanCache* caches, float* out) {
  const KernelTable& kt = active_kernels();
  const BlockQuantizedKernel blocked = active_block_quantized_matmul();
  const PlanShape& s = shape_;
  const std::int64_t d = s.d_model, dh = s.d_head, heads = s.n_heads, kv_heads = s.n_kv_heads;
  const std::int64_t group = heads / kv_heads, inner = heads * dh, kv_inner = kv_heads * dh;
  const bool rotary = s.rotary_base > 0.0;
  float* h = x_.data();
  // Phases end at team.sync() where the next reads what other members wrote. The O(B d) work between the
  // products (norms, residual adds, rotary turns, cache writes) is row by row, so each member does its rows:
  // done by the lead alone, it kept the others waiting at ~90 barriers a step (16 rows of SmolLM2: 2% of a step).
  const auto [r0, r1] = team.share(batch, 1);
  const std::int64_t rows = r1 - r0;
  // Rows of distinct sequences attend only to the keys their own member writes: with rows enough for every
  // member, each turns, writes and attends its rows and quantizes their heads with no meeting between (two fewer
  // a layer; a row's operations are the same). Rows of one prompt attend to each other's keys: they meet.
  const bool own_rows = distinct_ && batch >= 2 * team.size;
  if (rows > 0) norm(kt, s, layers_.front().norm1, h + r0 * d, n_.data() + r0 * d, rows);  // a plan has layers
  bool quantized = reads_int8({&layers_.front().wq, &layers_.front().wk, &layers_.front().wv});
  if (quantized) quantize(kt, n_.data(), d, r0, r1);
  team.sync();
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const PlanLayer& layer = layers_[l];
    const PlanCache& cache = caches[l];
    product(team, kt, blocked, layer.wq, n_.data(), batch, q_.data(), quantized);
    product(team, kt, blocked, layer.wk, n_.data(), batch, k_.data(), quantized);
    product(team, kt, blocked, layer.wv, n_.data(), batch, v_.data(), quantized);
    team.sync();
    for (std::int64_t b = r0; b < r1; ++b) {
      if (rotary) {
        const float *sin = sin_.data() + b * (dh / 2), *cos = cos_.data() + b * (dh / 2);
        rotate(q_.data() + b * inner, heads, dh, sin, cos);
        rotate(k_.data() + b * kv_inner, kv_heads, dh, sin, cos);
      }
      const std::int64_t seq = sequence_[b];
      for (std::int64_t g = 0; g < kv_heads; ++g) {
        const std::int64_t slot = ((seq * kv_heads + g) * cache.capacity + positions[b]) * dh;
        std::copy_n(k_.data() + b * kv_inner + g * dh, dh, cache.keys + slot);
        std::copy_n(v_.data() + b * kv_inner + g * dh, dh, cache.values + slot);
      }
      for (std::int64_t hq = 0; hq < heads; ++hq)
        kv_offset_[b * heads + hq] = (seq * kv_heads + hq / group) * cache.capacity * dh;
    }
    if (!own_rows) team.sync();
    attend(team, kt, batch, positions, cache, own_rows);
    if (!own_rows) team.sync();
    if ((quantized = reads_int8({&layer.wo}))) quantize(kt, heads_.data(), inner, r0, r1);
    if (quantized || own_rows) team.sync();
    product(team, kt, blocked, layer.wo, heads_.data(), batch, n_.data(), quantized);
    team.sync();
    if (rows > 0) {
      for (std::int64_t i = r0 * d; i < r1 * d; ++i) h[i] += n_[i];
      norm(kt, s, layer.norm2, h + r0 * d, n_.data() + r0 * d, rows);
    }
    if ((quantized = reads_int8({&layer.w1}))) quantize(kt, n_.data(), d, r0, r1);
    team.sync();
    product(team, kt, blocked, layer.w1, n_.data(), batch, hidden_.data(), quantized);
    team.sync();
    // Each member activates its rows and quantizes them, then the team meets once.
    const float* act = activate(kt, r0, r1);
    if ((quantized = reads_int8({&layer.w2}))) quantize(kt, act, s.d_ff, r0, r1);
    team.sync();
    product(team, kt, blocked, layer.w2, act, batch, n_.data(), quantized);
    team.sync();
    const bool last = l + 1 == layers_.size();
    if (rows > 0) {  // the residual, then the next layer's first norm (or the final norm)
      for (std::int64_t i = r0 * d; i < r1 * d; ++i) h[i] += n_[i];
      norm(kt, s, last ? final_norm_ : layers_[l + 1].norm1, h + r0 * d, (last ? out : n_.data()) + r0 * d, rows);
    }
    if (!last && (quantized = reads_int8({&layers_[l + 1].wq, &layers_[l + 1].wk, &layers_[l + 1].wv})))
      quantize(kt, n_.data(), d, r0, r1);
    team.sync();
  }
}

// This thread's columns of the product, cut at 16 (as the block kernels cut their own). quantized: x's rows are
// in x_codes_ (quantize), read there by a weight that takes int8 activations.
void DecodingPlan::product(const ThreadTeam& team, const KernelTable& kt, BlockQuantizedKernel blocked,
                           const PlanWeight& w, const float* x, std::int64_t batch, float* c, bool quantized) const {
  const auto [j0, j1] = team.share(w.n_out, 16);
  const bool read = quantized && w.int8_x;
  attnkit::product(kt, blocked, w, x, batch, c, j0, j1, read ? x_codes_.data() : nullptr,
                   read ? x_scales_.data() : nullptr, read ? x_scaled_sums_.data() : nullptr);
}

// Rows [r0, r1) of x (width values a row) as int8 blocks into x_codes_, for the next products, which read them
// after the team meets. Each member quantises its own rows: before, every member's kernel quantised all the rows
// again for each of a layer's 7 products (16 rows of SmolLM2: 4% of a step's samples).
void DecodingPlan::quantize(const KernelTable& kt, const float* x, std::int64_t width, std::int64_t r0,
                            std::int64_t r1) {
  if (r0 >= r1) return;
  const std::int64_t blocks = width / kBlockValues;
  BlockQuantizeXArgs a;
  a.x = x + r0 * width, a.codes = x_codes_.data() + r0 * width;
  a.scales = x_scales_.data() + r0 * blocks, a.scaled_sums = x_scaled_sums_.data() + r0 * blocks;
  a.m = r1 - r0, a.n = width, a.x_row_stride = width;
  kt.block_quantize_x(a);
}

// This member's share of the (row, key/value head) items: the head's query heads, one query each, over the
// row's positions 0..positions[b]. A call per row gives a row the very operations it gets decoded alone,
// whatever the other rows' lengths. Items hold a key/value head's whole group of query heads (its keys read
// once for all) when there are enough of them to share; else one query head each (one row of SmolLM2's 3
// key/value heads on 2 threads would split 2 + 1). A query head's operations are the same either way.
// own_rows: the items of this member's rows (see layers).
void DecodingPlan::attend(const ThreadTeam& team, const KernelTable& kt, std::int64_t batch,
                          const std::int64_t* positions, const PlanCache& cache, bool own_rows) {
  const std::int64_t heads = shape_.n_heads, dh = shape_.d_head, kv_heads = shape_.n_kv_heads;
  const std::int64_t group = heads / kv_heads;
  const std::int64_t per_item = own_rows || batch * kv_heads >= 4 * team.size ? group : 1;
  std::int64_t i0, i1;
  if (own_rows) {
    const auto [r0, r1] = team.share(batch, 1);
    i0 = r0 * kv_heads, i1 = r1 * kv_heads;
  } else {
    std::tie(i0, i1) = team.share(batch * heads / per_item, 1);
  }
  for (std::int64_t i = i0; i < i1; ++i) {
    const std::int64_t head = i * per_item, b = head / heads;
    DecodeAttentionArgs<float> a;
    a.q = q_.data() + head * dh, a.out = heads_.data() + head * dh;
    a.keys = cache.keys + kv_offset_[head], a.values = cache.values + kv_offset_[head];
    a.group = per_item, a.nk = positions[b] + 1, a.d = dh;
    a.scale = float(1.0 / std::sqrt(double(dh)));
    kt.f32.decode_attention(a);
  }
}

// The activation of the feed-forward hidden rows [r0, r1) (this member's); returns the rows W2 reads. An
// elementwise kernel's lanes give each value the same bits wherever a call starts.
const float* DecodingPlan::activate(const KernelTable& kt, std::int64_t r0, std::int64_t r1) {
  const std::int64_t f = shape_.d_ff;
  switch (shape_.activation) {
    case PlanActivation::gelu_tanh:
    case PlanActivation::gelu: {
      if (r0 < r1) {
        GeluArgs<float> g;
        g.x = hidden_.data() + r0 * f, g.out = hidden_.data() + r0 * f, g.n = (r1 - r0) * f;
        g.exact = shape_.activation == PlanActivation::gelu;
        kt.f32.gelu(g);
      }
      return hidden_.data();
    }
    case PlanActivation::relu: {
      for (std::int64_t i = r0 * f; i < r1 * f; ++i) hidden_[i] = hidden_[i] < 0.0f ? 0.0f : hidden_[i];
      return hidden_.data();
    }
    case PlanActivation::swiglu: {  // silu(gate) up, each row's [gate | up] halves (the kernel of ops.swiglu)
      for (std::int64_t b = r0; b < r1; ++b) {
        SwigluArgs<float> a;
        a.gate = hidden_.data() + b * 2 * f, a.up = a.gate + f, a.out = gated_.data() + b * f;
        a.n = f;
        kt.f32.swiglu(a);
      }
      return gated_.data();
    }
  }
  return hidden_.data();
}

}  // namespace attnkit

// One decoding step of a stack of pre-LN transformer blocks, composed in C++ from the kernel table (no Python
// between the ops). For row b of x (B, d) at its own position p = positions[b] (rows of a batch may be at
// different positions: prompts of different lengths decoded together), each block computes
//   n = Norm1(x);  q, k, v = n Wq + bq, n Wk + bk, n Wv + bv;  q, k turned by rotary positions at p (optional)
//   K[b, :, p], V[b, :, p] = k, v;  a_h = softmax(q_h K_g[:p+1]^T / sqrt(dh)) V_g[:p+1]   (g: the key/value head of h)
//   x = x + a Wo + bo;  x = x + Act(Norm2(x) W1 + b1) W2 + b2    (swiglu: W1 = [W_gate | W_up], silu(gate) up)
// and the stack ends with the final norm: out = NormF(x). K, V: (B, Hkv, capacity, dh) per layer, the caller's
// buffers (row b's positions 0..positions[b]-1 already filled). Every product is the float GEMM or the
// block-quantised kernel.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

#include "attnkit/block_quantized.h"

namespace attnkit {

struct KernelTable;
struct ThreadTeam;

// W (n_in, n_out) as x W: float32 row-major (`data`), or GGML blocks (`blocks`, n_out rows); bias optional.
struct PlanWeight {
  const float* data = nullptr;
  const std::uint8_t* blocks = nullptr;
  BlockKind kind = BlockKind::q8_0;
  bool int8_x = false;  // x read as int8 blocks (BlockQuantizedMatmulArgs::int8_x)
  const std::uint8_t* packed = nullptr;  // BlockQuantizedMatmulArgs::packed
  const float* bias = nullptr;
  std::int64_t n_in = 0, n_out = 0;
};

// LayerNorm (gamma, beta) or RMSNorm (gamma; beta null), per the plan's `rms`.
struct PlanNorm {
  const float* gamma = nullptr;
  const float* beta = nullptr;
};

enum class PlanActivation : int { gelu_tanh, gelu, relu, swiglu };

struct PlanLayer {
  PlanNorm norm1, norm2;
  PlanWeight wq, wk, wv, wo, w1, w2;
};

struct PlanShape {
  std::int64_t d_model = 0, n_heads = 0, n_kv_heads = 0, d_head = 0, d_ff = 0;
  bool rms = false;
  float eps = 1e-5f;
  PlanActivation activation = PlanActivation::gelu_tanh;
  double rotary_base = 0.0;  // 0: no rotary positions
};

// One layer's key/value buffers, each (batch, n_kv_heads, capacity, d_head) contiguous.
struct PlanCache {
  float* keys = nullptr;
  float* values = nullptr;
  std::int64_t capacity = 0;
};

class DecodingPlan {
 public:
  DecodingPlan(const PlanShape& shape, std::vector<PlanLayer> layers, const PlanNorm& final_norm);

  // out (batch, d_model) = the stack's output for x (batch, d_model), row b at positions[b] (< every
  // capacity) of the cache's sequence sequences[b] (b when null); caches: one per layer. Every row's key and
  // value are written before any row attends, so rows of one sequence at consecutive positions read a prompt
  // (each row gets the operations of a step of its own). A row's result depends on neither the other rows
  // nor their positions. One step at a time per plan (a mutex): its workspace is shared. With more than one
  // kernel thread, the step is one parallel region whose threads share every product (src/thread_team.h).
  void step(const float* x, float* out, std::int64_t batch, const std::int64_t* positions,
            const std::int64_t* sequences, const PlanCache* caches);

  const PlanShape& shape() const { return shape_; }
  std::int64_t n_layers() const { return std::int64_t(layers_.size()); }

 private:
  void reserve(std::int64_t batch);
  void layers(const ThreadTeam& team, std::int64_t batch, const std::int64_t* positions, const PlanCache* caches,
              float* out);
  void attend(const ThreadTeam& team, const KernelTable& kt, std::int64_t batch, const std::int64_t* positions,
              const PlanCache& cache, bool own_rows);
  const float* activate(const KernelTable& kt, std::int64_t r0, std::int64_t r1);
  void quantize(const KernelTable& kt, const float* x, std::int64_t width, std::int64_t r0, std::int64_t r1);
  void product(const ThreadTeam& team, const KernelTable& kt, void (*blocked)(const BlockQuantizedMatmulArgs&),
               const PlanWeight& w, const float* x, std::int64_t batch, float* c, bool quantized) const;

  PlanShape shape_;
  std::vector<PlanLayer> layers_;
  PlanNorm final_norm_;
  std::mutex mutex_;
  double team_work_ = 0.0;  // >= 1: a step is worth a team of threads (decoding_plan.cpp)
  int solo_steps_ = 0;       // steps left on one thread since a team found the machine busy,
  int solo_period_ = 64;     // and how many the next busy team step gives
  std::int64_t batch_capacity_ = 0;
  // Workspace, grown only when a larger batch arrives: residual stream, norm output, q, k, v, heads, the
  // feed-forward hidden and gated rows, each row's rotary sines and cosines, the attention kernel's per-item offsets,
  // each row's cache sequence.
  std::vector<float> x_, n_, q_, k_, v_, heads_, hidden_, gated_;
  std::vector<double> table_;
  std::vector<float> sin_, cos_;
  std::vector<std::int64_t> kv_offset_, sequence_;
  bool distinct_ = true;  // every row of the step is of its own sequence (a decoding step, not a prompt's read)
  // The rows of the input the next products read, as int8 blocks (BlockQuantizedMatmulArgs::x_codes), made once
  // for all of them by the team (each member its rows) where they read int8 activations.
  std::vector<std::int8_t> x_codes_;
  std::vector<float> x_scales_, x_scaled_sums_;
};

}  // namespace attnkit

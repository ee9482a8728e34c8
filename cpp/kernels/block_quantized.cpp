// GGML block-quantised weights (see attnkit/block_quantized.h), read where they lie (a memory-mapped
// file): nothing is expanded to float32 beyond one panel of rows.
//
// Few rows of X (decoding): each output j streams its row of blocks once and dequantises in registers.
// Per block b of 32 values, s = sum_t q[t] x[t] in W-lane FMA chains, then acc += d_b s (lanes); q4_1's
// min adds m_b sum_t x[t], with the 32-value sums of x computed once per call and shared by every row.
// A row's result does not depend on the thread count (rows are split, never a row's sum).
// Many rows (a prompt): a panel of rows is dequantised to float32 and multiplied by the packed GEMM of
// kernels/matmul.cpp, so the float throughput is ops.matmul's.
#include <omp.h>

#include <cstdint>

#include "aligned_buffer.h"
#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

using V = Vec<float>;
constexpr int W = V::W;

// Rows of X at or below this take the matrix-vector path: its cost is a pass over the blocks per call
// (memory-bound), the GEMM's is a dequantised panel per call plus packing, worth it only for many rows.
constexpr std::int64_t kThinRows = 4;
// Blocks read below this many bytes run on one thread: waking a passive OpenMP thread costs 40-200 us on
// a VM (kernels.h), the time to stream ~0.5-2 MB.
constexpr std::int64_t kMinParallelBytes = std::int64_t(1) << 20;
// Rows dequantised per GEMM panel: one NC block of the packed GEMM (kernels/matmul.cpp).
constexpr std::int64_t kPanelRows = 512;

// The 32 values of one block, dequantised: d q (+ m). d q is exact in float (11 + 8 bits), so fma and
// multiply-then-add give the same bits, the bits NumPy's d * q + m gives.
template <BlockKind K>
inline void dequantize_block(const std::uint8_t* block, float* out) {
  const V d = V::set1(half_to_float(block));
  if constexpr (K == BlockKind::q8_0) {
    const auto* q = reinterpret_cast<const std::int8_t*>(block + 2);
#pragma GCC unroll 8
    for (int v = 0; v < kBlockValues; v += W) (d * load_s8(q + v)).store(out + v);
  } else {
    const V m = V::set1(half_to_float(block + 2));
#pragma GCC unroll 8
    for (int v = 0; v < kBlockValues / 2; v += W) {
      V lo, hi;
      load_u4(block + 4 + v, lo, hi);
      V::fma(d, lo, m).store(out + v);
      V::fma(d, hi, m).store(out + kBlockValues / 2 + v);
    }
  }
}

template <BlockKind K>
void dequantize_row(const std::uint8_t* row, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b) dequantize_block<K>(row + b * block_bytes(K), out + b * kBlockValues);
}

// sum_t q[t] x_i[t] over one block, for the M rows of X (x[i] points at the block's 32 values of row i),
// in two chains per row (the first and the second half of the block) to halve their latency.
template <BlockKind K, int M>
inline void block_dot(const std::uint8_t* block, const float* const (&x)[M], V (&s)[M]) {
  V t[M];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) s[i] = t[i] = V::zero();
  if constexpr (K == BlockKind::q8_0) {
    const auto* q = reinterpret_cast<const std::int8_t*>(block + 2);
#pragma GCC unroll 8
    for (int v = 0; v < kBlockValues / 2; v += W) {
      const V q0 = load_s8(q + v), q1 = load_s8(q + kBlockValues / 2 + v);
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) {
        s[i] = V::fma(q0, V::load(x[i] + v), s[i]);
        t[i] = V::fma(q1, V::load(x[i] + kBlockValues / 2 + v), t[i]);
      }
    }
  } else {
#pragma GCC unroll 8
    for (int v = 0; v < kBlockValues / 2; v += W) {
      V lo, hi;
      load_u4(block + 4 + v, lo, hi);
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) {
        s[i] = V::fma(lo, V::load(x[i] + v), s[i]);
        t[i] = V::fma(hi, V::load(x[i] + kBlockValues / 2 + v), t[i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) s[i] = s[i] + t[i];
}

// acc += d_b sum_t q[t] x_i[t] over block b for the M rows of X; q4_1's min_part += m_b xsum_i[b].
template <BlockKind K, int M>
inline void block_step(const BlockQuantizedMatmulArgs& g, const std::uint8_t* block, std::int64_t b,
                       const float* xsum, std::int64_t blocks, V (&acc)[M], float (&min_part)[M]) {
  const float* x[M];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) x[i] = g.x + i * g.x_row_stride + b * kBlockValues;
  V s[M];
  block_dot<K, M>(block, x, s);
  const V d = V::set1(half_to_float(block));
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) acc[i] = V::fma(d, s[i], acc[i]);
  if constexpr (K == BlockKind::q4_1) {
    const float m = half_to_float(block + 2);
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) min_part[i] = fma_scalar(m, xsum[i * blocks + b], min_part[i]);
  }
}

// C[0:M, j] for j in [j0, j1): two accumulators per row of X (even and odd blocks) hide the FMA latency.
// xsum (M, blocks): the 32-value sums of X's rows (q4_1 only).
template <BlockKind K, int M>
void thin_rows(const BlockQuantizedMatmulArgs& g, const float* xsum, std::int64_t j0, std::int64_t j1) {
  constexpr std::int64_t bb = block_bytes(K);
  const std::int64_t blocks = g.n_in / kBlockValues, row_bytes = blocks * bb;
  for (std::int64_t j = j0; j < j1; ++j) {
    const std::uint8_t* row = g.blocks + j * row_bytes;
    V even[M], odd[M];
    float min_even[M], min_odd[M];
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) even[i] = odd[i] = V::zero(), min_even[i] = min_odd[i] = 0.0f;
    std::int64_t b = 0;
    for (; b + 1 < blocks; b += 2) {
      block_step<K, M>(g, row + b * bb, b, xsum, blocks, even, min_even);
      block_step<K, M>(g, row + (b + 1) * bb, b + 1, xsum, blocks, odd, min_odd);
    }
    if (b < blocks) block_step<K, M>(g, row + b * bb, b, xsum, blocks, even, min_even);
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
      float y = (even[i] + odd[i]).reduce_add() + (min_even[i] + min_odd[i]);
      if (g.bias) y += g.bias[j];
      g.c[i * g.c_row_stride + j] = y;
    }
  }
}

template <BlockKind K, int M>
void thin(const BlockQuantizedMatmulArgs& g) {
  const std::int64_t blocks = g.n_in / kBlockValues, n = g.n_out;
  auto xsum = aligned_buffer<float>(K == BlockKind::q4_1 ? M * blocks : 0);
  if constexpr (K == BlockKind::q4_1)
    for (int i = 0; i < M; ++i)
      for (std::int64_t b = 0; b < blocks; ++b) {
        const float* x = g.x + i * g.x_row_stride + b * kBlockValues;
        V s = V::zero();
        for (int v = 0; v < kBlockValues; v += W) s = s + V::load(x + v);
        xsum.get()[i * blocks + b] = s.reduce_add();
      }
  const int threads = n * blocks * block_bytes(K) >= kMinParallelBytes ? kernel_threads() : 1;
  // Chunks of 16 rows (a 4 KB page of q8_0 blocks at n_in = 576), dealt out statically.
  constexpr std::int64_t chunk = 16;
  const std::int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t t = 0; t < chunks; ++t)
    thin_rows<K, M>(g, xsum.get(), t * chunk, min_scalar(n, (t + 1) * chunk));
}

template <BlockKind K>
void thin_dispatch(const BlockQuantizedMatmulArgs& g) {
  switch (g.m) {
    case 1: return thin<K, 1>(g);
    case 2: return thin<K, 2>(g);
    case 3: return thin<K, 3>(g);
    default: return thin<K, 4>(g);
  }
}

// Panels of up to kPanelRows stored rows, dequantised (in parallel) into scratch as B transposed, then the GEMM.
template <BlockKind K>
void panels(const BlockQuantizedMatmulArgs& g) {
  const std::int64_t blocks = g.n_in / kBlockValues, row_bytes = blocks * block_bytes(K);
  // Panels of equal width (multiples of 32 columns): 576 = 288 + 288, not 512 + a thin 64 that two
  // threads split badly (1536 x 576 at m = 512: 0.82x ops.matmul).
  const std::int64_t count = (g.n_out + kPanelRows - 1) / kPanelRows;
  const std::int64_t panel_rows = min_scalar(g.n_out, ((g.n_out + count - 1) / count + 31) / 32 * 32);
  auto panel = aligned_buffer<float>(panel_rows * g.n_in);
  const int threads = elementwise_threads(panel_rows * g.n_in);
  for (std::int64_t j0 = 0; j0 < g.n_out; j0 += panel_rows) {
    const std::int64_t rows = min_scalar(panel_rows, g.n_out - j0);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (std::int64_t r = 0; r < rows; ++r) dequantize_row<K>(g.blocks + (j0 + r) * row_bytes, blocks, panel.get() + r * g.n_in);
    MatmulArgs<float> mg;
    mg.a = g.x;
    mg.b = panel.get();
    mg.bias = g.bias ? g.bias + j0 : nullptr;
    mg.c = g.c + j0;
    mg.m = g.m, mg.k = g.n_in, mg.n = rows;
    mg.a_row_stride = g.x_row_stride, mg.a_col_stride = 1;
    mg.b_row_stride = 1, mg.b_col_stride = g.n_in;
    mg.c_row_stride = g.c_row_stride;
    matmul<float>(mg);
  }
}

template <BlockKind K>
void rows(const BlockQuantizedRowsArgs& g) {
  const std::int64_t blocks = g.n_in / kBlockValues, row_bytes = blocks * block_bytes(K);
  const int threads = elementwise_threads(g.count * g.n_in);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t r = 0; r < g.count; ++r)
    dequantize_row<K>(g.blocks + g.ids[r] * row_bytes, blocks, g.out + r * g.out_row_stride);
}

}  // namespace

void block_quantized_matmul(const BlockQuantizedMatmulArgs& g) {
  if (g.m == 0 || g.n_out == 0) return;
  if (g.n_in == 0) {  // an empty sum: C = bias or 0
    for (std::int64_t i = 0; i < g.m; ++i)
      for (std::int64_t j = 0; j < g.n_out; ++j) g.c[i * g.c_row_stride + j] = g.bias ? g.bias[j] : 0.0f;
    return;
  }
  const bool q8 = g.kind == BlockKind::q8_0;
  if (g.m > kThinRows) return q8 ? panels<BlockKind::q8_0>(g) : panels<BlockKind::q4_1>(g);
  return q8 ? thin_dispatch<BlockKind::q8_0>(g) : thin_dispatch<BlockKind::q4_1>(g);
}

void block_quantized_rows(const BlockQuantizedRowsArgs& g) {
  return g.kind == BlockKind::q8_0 ? rows<BlockKind::q8_0>(g) : rows<BlockKind::q4_1>(g);
}

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

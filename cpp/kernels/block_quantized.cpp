// GGML block-quantised weights (see attnkit/block_quantized.h), read where they lie (a memory-mapped
// file): nothing is expanded to float32 beyond one panel of rows.
//
// Few rows of X (decoding): each output j streams its row of blocks once and dequantises in registers.
// Per block b of 32 values, s = sum_t q[t] x[t] in W-lane FMA chains, then acc += d_b s (lanes); q4_1's
// min adds m_b sum_t x[t], with the 32-value sums of x computed once per call and shared by every row.
// A row's result does not depend on the thread count (rows are split, never a row's sum).
// Many rows (a prompt): a panel of rows is dequantised to float32 and multiplied by the packed GEMM of
// kernels/matmul.cpp, so the float throughput is ops.matmul's.
// With int8 activations (g.int8_x), the integer products of block_int8.h.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "aligned_buffer.h"
#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "block_int8.h"
#include "block_rows.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

using V = Vec<float>;
constexpr int W = V::W;

// Rows of X at or below this take the matrix-vector path: its cost is a pass over the blocks per call
// (memory-bound), the GEMM's is a dequantised panel per call plus packing, worth it only for many rows.
constexpr std::int64_t kThinRows = 4;
// Up to this many rows (batched decoding: a step of 8-32 sequences), strips of kThinRows rows share each
// pass over the blocks (see striped); above, the panels' dequantise-and-pack cost is worth it.
constexpr std::int64_t kStripedRows = 32;
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

// Output rows computed in one pass over the blocks, sharing each block's x values (loaded once, from L1):
// q4_1, 4 for one row of X (decoding), 2 for two, 1 above (the x values of 3-4 rows fill the registers).
// q8_0 reads 34 bytes a block (not 20) and its one big matrix (the 576 x 49152 output) streams from DRAM,
// where 4 interleaved row streams measured 4.8 ms against 3.5-3.6 ms for one row at a time (both with
// the prefetch; 4.2-4.5 ms for the previous kernel): one row.
template <BlockKind K, int M>
constexpr int kGroupRows = K == BlockKind::q8_0 ? 1 : M == 1 ? 4 : M == 2 ? 2 : 1;

// C[0:M, j + r] for r < R: per block b of row j + r, s = sum_t q[t] x_i[t] in two W-lane chains (the
// block's first and second 16 values), then acc += d_b s (lanes); q4_1's min_part += m_b xsum_i[b], with
// the 32-value sums of X's rows (xsum (M, blocks)) computed once per call. Every row runs the same
// operations in the same order whatever R (and so whatever the thread count): only the x loads are shared.
template <BlockKind K, int M, int R>
inline void thin_group(const BlockQuantizedMatmulArgs& g, const float* xsum, std::int64_t j) {
  constexpr std::int64_t bb = block_bytes(K);
  constexpr int NV = kBlockValues / W, HALF = NV / 2;
  const std::int64_t blocks = g.n_in / kBlockValues, row_bytes = blocks * bb;
  const std::uint8_t* rows = g.blocks + j * row_bytes;
  V acc[M][R];
  float min_part[M][R];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[i][r] = V::zero(), min_part[i][r] = 0.0f;
  for (std::int64_t b = 0; b < blocks; ++b) {
    V x[M][NV];
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) x[i][v] = V::load(g.x + i * g.x_row_stride + b * kBlockValues + v * W);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* block = rows + r * row_bytes + b * bb;
      if constexpr (kPrefetchBytes > 0) prefetch_bytes(block + kPrefetchBytes);
      V s[M], t[M];
      float d, m = 0.0f;
#pragma GCC unroll 16
      for (int v = 0; v < HALF; ++v) {
        V q0, q1;
        if constexpr (K == BlockKind::q8_0) {
          const auto* q = reinterpret_cast<const std::int8_t*>(block + 2);
          q0 = load_s8(q + v * W), q1 = load_s8(q + kBlockValues / 2 + v * W);
        } else {
          load_u4(block + 4 + v * W, q0, q1);
        }
#pragma GCC unroll 4
        for (int i = 0; i < M; ++i) {
          s[i] = v == 0 ? q0 * x[i][v] : V::fma(q0, x[i][v], s[i]);
          t[i] = v == 0 ? q1 * x[i][HALF + v] : V::fma(q1, x[i][HALF + v], t[i]);
        }
      }
      if constexpr (K == BlockKind::q8_0) {
        d = half_to_float(block);
      } else {
        half_pair_to_float(block, d, m);
      }
      const V dv = V::set1(d);
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) {
        acc[i][r] = V::fma(dv, s[i] + t[i], acc[i][r]);
        if constexpr (K == BlockKind::q4_1) min_part[i][r] = fma_scalar(m, xsum[i * blocks + b], min_part[i][r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float y = acc[i][r].reduce_add() + min_part[i][r];
      if (g.bias) y += g.bias[j + r];
      g.c[i * g.c_row_stride + j + r] = y;
    }
}

// C[0:M, j] for j in [j0, j1), in groups of kGroupRows rows and single rows for the rest.
template <BlockKind K, int M>
void thin_rows(const BlockQuantizedMatmulArgs& g, const float* xsum, std::int64_t j0, std::int64_t j1) {
  constexpr int R = kGroupRows<K, M>;
  std::int64_t j = j0;
  for (; j + R <= j1; j += R) thin_group<K, M, R>(g, xsum, j);
  for (; j < j1; ++j) thin_group<K, M, 1>(g, xsum, j);
}

// q4_1's 32-value sums of X's first m rows, (m, blocks); nothing for q8_0, which has no min.
template <BlockKind K>
auto block_sums(const BlockQuantizedMatmulArgs& g, std::int64_t m) {
  const std::int64_t blocks = g.n_in / kBlockValues;
  auto xsum = aligned_buffer<float>(K == BlockKind::q4_1 ? m * blocks : 0);
  if constexpr (K == BlockKind::q4_1)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t b = 0; b < blocks; ++b) {
        const float* x = g.x + i * g.x_row_stride + b * kBlockValues;
        V s = V::zero();
        for (int v = 0; v < kBlockValues; v += W) s = s + V::load(x + v);
        xsum.get()[i * blocks + b] = s.reduce_add();
      }
  return xsum;
}

template <BlockKind K>
int thin_threads(const BlockQuantizedMatmulArgs& g) {
  const std::int64_t n = g.n_out, blocks = g.n_in / kBlockValues;
  return n >= 32 && n * blocks * block_bytes(K) >= kMinParallelBytes ? kernel_threads() : 1;
}

template <BlockKind K, int M>
void thin(const BlockQuantizedMatmulArgs& g) {
  const auto xsum = block_sums<K>(g, M);
  over_row_ranges(g.n_out, thin_threads<K>(g),
                  [&](std::int64_t j0, std::int64_t j1) { thin_rows<K, M>(g, xsum.get(), j0, j1); });
}

// kThinRows < m <= kStripedRows (batched decoding): strips of up to kThinRows rows of X, every strip run on
// each stored row in turn, so the row's blocks come from DRAM once and from L1 for the other strips. A row
// of C gets the thin path's operations (thin_group is the same for any R), so the same bits as alone.
template <BlockKind K>
void striped(const BlockQuantizedMatmulArgs& g) {
  constexpr std::int64_t kMaxStrips = kStripedRows / kThinRows;
  const std::int64_t blocks = g.n_in / kBlockValues, strips = (g.m + kThinRows - 1) / kThinRows;
  const auto xsum = block_sums<K>(g, g.m);
  BlockQuantizedMatmulArgs strip[kMaxStrips];
  for (std::int64_t s = 0; s < strips; ++s) {
    strip[s] = g;
    strip[s].x = g.x + s * kThinRows * g.x_row_stride;
    strip[s].c = g.c + s * kThinRows * g.c_row_stride;
    strip[s].m = min_scalar(kThinRows, g.m - s * kThinRows);
  }
  over_row_ranges(g.n_out, thin_threads<K>(g), [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t j = j0; j < j1; ++j)
      for (std::int64_t s = 0; s < strips; ++s) {
        const float* xs = xsum.get() + s * kThinRows * blocks;
        switch (strip[s].m) {
          case 1: thin_group<K, 1, 1>(strip[s], xs, j); break;
          case 2: thin_group<K, 2, 1>(strip[s], xs, j); break;
          case 3: thin_group<K, 3, 1>(strip[s], xs, j); break;
          default: thin_group<K, 4, 1>(strip[s], xs, j); break;
        }
      }
  });
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
  if (g.int8_x) return block_int8_matmul<BlockDot>(g);
  if (g.m > kStripedRows) return q8 ? panels<BlockKind::q8_0>(g) : panels<BlockKind::q4_1>(g);
  if (g.m > kThinRows) return q8 ? striped<BlockKind::q8_0>(g) : striped<BlockKind::q4_1>(g);
  return q8 ? thin_dispatch<BlockKind::q8_0>(g) : thin_dispatch<BlockKind::q4_1>(g);
}

void block_quantized_rows(const BlockQuantizedRowsArgs& g) {
  return g.kind == BlockKind::q8_0 ? rows<BlockKind::q8_0>(g) : rows<BlockKind::q4_1>(g);
}

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

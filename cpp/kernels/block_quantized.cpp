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
// Up to this many rows (batched decoding: a step of up to 32 sequences), strips of kStripRows rows share
// each pass over the blocks (see striped); above, the panels' dequantise-and-pack cost is worth it.
// SmolLM2's decoder products on the 2-core Xeon: striped 1.85 ms a row (AVX-512), 2.2-2.8 (AVX2); panels
// at m = 32 / 48 / 64: 68 / 78 / 89 ms (AVX-512), 81 / 98 / 108 (AVX2).
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

// Stored rows computed in one pass over the blocks of X's rows (from L1): q4_1, 4 for one row of X
// (decoding), 2 for more. q8_0 reads 34 bytes a block (not 20) and its one big matrix (the 576 x 49152
// output) streams from DRAM, where 4 interleaved row streams measured 4.8 ms against 3.5-3.6 ms for one row
// at a time (both with the prefetch; 4.2-4.5 ms for the previous kernel): one row.
template <BlockKind K, int M>
constexpr int kGroupRows = K == BlockKind::q8_0 ? 1 : M == 1 ? 4 : 2;
// Batched decoding (striped, compute-bound) runs strips of up to kStripRows rows of X on groups of
// kStripGroupRows stored rows: 12 x 2 accumulators with AVX-512's 32 registers, 8 x 1 with AVX2's 16. The
// products of a 16-sequence step of SmolLM2 on the 2-core Xeon (AVX-512): 8 x 2 33-38 ms, 29-31 with x read
// packed (below); 16 x 1 (packed) 28.5-31, and 58-60 ms for 32 rows where 12 x 2 (11 + 11 + 10) takes 52-56.
// AVX2: 4 x 2 53-55 ms, 8 x 1 43-46, 38.5 packed.
constexpr int kStripRows = W >= 16 ? 12 : W >= 8 ? 8 : int(kThinRows);
constexpr int kStripGroupRows = W >= 16 ? 2 : 1;
// q4_1's min parts of a strip's rows, one lane each: in a vector where it holds kStripRows lanes (every x86
// ISA), else (one-lane targets) in scalars; xsum has kSumLanes lanes a block either way.
constexpr bool kVectorMins = W >= kStripRows;
constexpr int kSumLanes = kVectorMins ? W : kStripRows;

// C[0:M, j + r] for r < R, M <= kStripRows: per block b of stored row j + r, the weights w = d_b q (exact in
// float: an 11-bit d times an 8-bit q) and acc_i += w x_i[b] lane by lane, one FMA chain per row over the
// block's vectors in order; q4_1's min adds m_b times the 32-value sums of x, in lane i of a vector per stored
// row (xsum (blocks, kSumLanes), lane i row i's sum, zeros past M), computed once per call. Every row of C runs the
// same operations in the same order whatever M and R (so whatever the thread count and the rows beside it).
// One FMA per W values and row: the dequantisation is shared by the M rows (a batched decoding step was
// compute-bound at a fifth of the float GEMM's rate with products of q and x scaled per block).
template <BlockKind K, int M, int R, bool Packed = false>
inline void thin_group(const BlockQuantizedMatmulArgs& g, const float* xsum, std::int64_t j) {
  static_assert(M <= kStripRows, "a strip has at most kStripRows rows");
  constexpr std::int64_t bb = block_bytes(K);
  constexpr int NV = kBlockValues / W, HALF = NV / 2;
  const std::int64_t blocks = g.n_in / kBlockValues, row_bytes = blocks * bb;
  const std::uint8_t* rows = g.blocks + j * row_bytes;
  V acc[M][R], min_part[R];
  alignas(64) float mins[R][kSumLanes] = {};
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    min_part[r] = V::zero();
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) acc[i][r] = V::zero();
  }
  for (std::int64_t b = 0; b < blocks; ++b) {
    const float* xb = g.x + b * (Packed ? M * kBlockValues : kBlockValues);
    V w[R][NV];  // the block of each stored row, dequantised; then each vector of x is read once for all R
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* block = rows + r * row_bytes + b * bb;
      if constexpr (kPrefetchBytes > 0) prefetch_bytes(block + kPrefetchBytes);
      if constexpr (K == BlockKind::q8_0) {
        const V d = V::set1(half_to_float(block));
        const auto* q = reinterpret_cast<const std::int8_t*>(block + 2);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) w[r][v] = d * load_s8(q + v * W);
      } else {
        float d, m;
        half_pair_to_float(block, d, m);
        const V dv = V::set1(d);
#pragma GCC unroll 16
        for (int v = 0; v < HALF; ++v) load_u4_scaled(block + 4 + v * W, dv, w[r][v], w[r][HALF + v]);
        if constexpr (kVectorMins) {
          min_part[r] = V::fma(V::set1(m), V::load(xsum + b * kSumLanes), min_part[r]);
        } else {
          for (int i = 0; i < M; ++i) mins[r][i] = fma_scalar(m, xsum[b * kSumLanes + i], mins[r][i]);
        }
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        const V xv = V::load(Packed ? xb + (v * M + i) * W : xb + i * g.x_row_stride + v * W);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[i][r] = V::fma(w[r][v], xv, acc[i][r]);
      }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if constexpr (kVectorMins) min_part[r].store(mins[r]);
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      float y = acc[i][r].reduce_add() + mins[r][i];
      if (g.bias) y += g.bias[j + r];
      g.c[i * g.c_row_stride + j + r] = y;
    }
  }
}

// C[0:M, j] for j in [j0, j1), in groups of R stored rows and single rows for the rest.
template <BlockKind K, int M, int R = kGroupRows<K, M>, bool Packed = false>
void thin_rows(const BlockQuantizedMatmulArgs& g, const float* xsum, std::int64_t j0, std::int64_t j1) {
  std::int64_t j = j0;
  for (; j + R <= j1; j += R) thin_group<K, M, R, Packed>(g, xsum, j);
  for (; j < j1; ++j) thin_group<K, M, 1, Packed>(g, xsum, j);
}

// q4_1's 32-value sums of X's rows for each strip of `strip_rows` rows: (strips, blocks, kSumLanes), lane i of
// block b row i's sum (zeros past the strip's rows); nothing for q8_0, which has no min.
template <BlockKind K>
auto block_sums(const BlockQuantizedMatmulArgs& g, std::int64_t strip_rows) {
  const std::int64_t blocks = g.n_in / kBlockValues, strips = (g.m + strip_rows - 1) / strip_rows;
  const std::int64_t size = K == BlockKind::q4_1 ? strips * blocks * kSumLanes : 0;
  auto xsum = aligned_buffer<float>(size);
  for (std::int64_t e = 0; e < size; ++e) xsum.get()[e] = 0.0f;
  if constexpr (K == BlockKind::q4_1)
    for (std::int64_t i = 0; i < g.m; ++i)
      for (std::int64_t b = 0; b < blocks; ++b) {
        const float* x = g.x + i * g.x_row_stride + b * kBlockValues;
        V s = V::zero();
        for (int v = 0; v < kBlockValues; v += W) s = s + V::load(x + v);
        xsum.get()[((i / strip_rows) * blocks + b) * kSumLanes + i % strip_rows] = s.reduce_add();
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
  const auto xsum = block_sums<K>(g, kThinRows);
  over_row_ranges(g.n_out, thin_threads<K>(g),
                  [&](std::int64_t j0, std::int64_t j1) { thin_rows<K, M>(g, xsum.get(), j0, j1); });
}

// Rows [0, g.m) of a strip, columns [j0, j1): groups of kStripGroupRows stored rows, single rows for the rest.
template <BlockKind K, int M = 1>
void strip_dispatch(const BlockQuantizedMatmulArgs& g, const float* xsum, std::int64_t j0, std::int64_t j1) {
  if constexpr (M < kStripRows) {
    if (g.m != M) return strip_dispatch<K, M + 1>(g, xsum, j0, j1);
  }
  return thin_rows<K, M, kStripGroupRows, true>(g, xsum, j0, j1);
}

// kThinRows < m <= kStripedRows (batched decoding): strips of up to kStripRows rows of X, every strip run on
// each group of stored rows in turn, so the group's blocks come from DRAM once and from L1 for the other
// strips. A row of C gets the thin path's operations (thin_group is the same for any M and R), so the same
// bits as alone.
template <BlockKind K>
void striped(const BlockQuantizedMatmulArgs& g) {
  constexpr std::int64_t kMaxStrips = (kStripedRows + kStripRows - 1) / kStripRows;
  // Strips of equal rows (16 = 8 + 8, not 12 + 4): a strip's cost is a dequantisation plus its rows' FMAs.
  const std::int64_t blocks = g.n_in / kBlockValues, strips = (g.m + kStripRows - 1) / kStripRows;
  const std::int64_t strip_rows = (g.m + strips - 1) / strips;
  const auto xsum = block_sums<K>(g, strip_rows);
  BlockQuantizedMatmulArgs strip[kMaxStrips];
  // Each strip's rows interleaved by vector, (blocks, W-value vectors, rows, W): the kernel's loads are then
  // fixed offsets from one pointer (a strip's rows at a row stride held as many address registers, and spilled them).
  auto packed = aligned_buffer<float>(g.m * g.n_in);
  for (std::int64_t s = 0; s < strips; ++s) {
    const std::int64_t m = min_scalar(strip_rows, g.m - s * strip_rows);
    float* xp = packed.get() + s * strip_rows * g.n_in;
    for (std::int64_t i = 0; i < m; ++i) {
      const float* x = g.x + (s * strip_rows + i) * g.x_row_stride;
      for (std::int64_t v = 0; v < g.n_in / W; ++v) V::load(x + v * W).store(xp + (v * m + i) * W);
    }
    strip[s] = g;
    strip[s].x = xp;
    strip[s].c = g.c + s * strip_rows * g.c_row_stride;
    strip[s].m = m;
  }
  over_row_ranges(g.n_out, thin_threads<K>(g), [&](std::int64_t j0, std::int64_t j1) {
    for (std::int64_t j = j0; j < j1; j += kStripGroupRows) {
      const std::int64_t end = min_scalar<std::int64_t>(j + kStripGroupRows, j1);
      for (std::int64_t s = 0; s < strips; ++s)
        strip_dispatch<K>(strip[s], xsum.get() + s * blocks * kSumLanes, j, end);
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

// Panels of up to kPanelRows stored rows, each dequantised into its thread's scratch as B transposed, then
// multiplied by the GEMM on that thread: the threads share the panels (as many per thread), not each panel.
// Sharing each panel (a parallel dequantisation, then the GEMM's own threads) cost two parallel regions per
// panel and ran slower on 2 threads than on 1 (SmolLM2's 576 x 3072 at m = 33: 2.7 against 1.6 ms).
template <BlockKind K>
void panels(const BlockQuantizedMatmulArgs& g) {
  const std::int64_t blocks = g.n_in / kBlockValues, row_bytes = blocks * block_bytes(K);
  const int threads = int(min_scalar<std::int64_t>(elementwise_threads(g.m * g.n_in * g.n_out / 64),
                                                   (g.n_out + 31) / 32));
  // Panels of equal width (multiples of 32 columns), a multiple of the threads in number: 576 = 288 + 288,
  // not 512 + a thin 64 (1536 x 576 at m = 512: 0.82x ops.matmul).
  std::int64_t count = (g.n_out + kPanelRows - 1) / kPanelRows;
  count = (count + threads - 1) / threads * threads;
  const std::int64_t panel_rows = min_scalar(g.n_out, ((g.n_out + count - 1) / count + 31) / 32 * 32);
  const std::int64_t n_panels = (g.n_out + panel_rows - 1) / panel_rows;
  auto scratch = aligned_buffer<float>(threads * panel_rows * g.n_in);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int own = get_call_threads();
    set_call_threads(1);  // the GEMM of a panel runs on its thread (a nested region would be one thread anyway)
    float* panel = scratch.get() + std::int64_t(omp_get_thread_num()) * panel_rows * g.n_in;
#pragma omp for schedule(static)
    for (std::int64_t p = 0; p < n_panels; ++p) {
      const std::int64_t j0 = p * panel_rows, rows = min_scalar(panel_rows, g.n_out - j0);
      for (std::int64_t r = 0; r < rows; ++r)
        dequantize_row<K>(g.blocks + (j0 + r) * row_bytes, blocks, panel + r * g.n_in);
      MatmulArgs<float> mg;
      mg.a = g.x;
      mg.b = panel;
      mg.bias = g.bias ? g.bias + j0 : nullptr;
      mg.c = g.c + j0;
      mg.m = g.m, mg.k = g.n_in, mg.n = rows;
      mg.a_row_stride = g.x_row_stride, mg.a_col_stride = 1;
      mg.b_row_stride = 1, mg.b_col_stride = g.n_in;
      mg.c_row_stride = g.c_row_stride;
      matmul<float>(mg);
    }
    set_call_threads(own);
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

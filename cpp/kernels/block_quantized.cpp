// GGML block-quantised weights (see attnkit/block_quantized.h), read where they lie (a memory-mapped
// file): nothing is expanded to float32 beyond one panel of rows.
//
// Few rows of X (decoding): each output j streams its row of blocks once and dequantises in registers.
// Per block b of 32 values, acc += (d_b q[t]) x[t] in W-lane FMA chains; q4_1's min adds m_b sum_t x[t],
// with the 32-value sums of x computed once per call and shared by every row.
// Up to 32 rows (batched decoding): the same chains from stored rows dequantised once per call (striped).
// A row's result depends neither on the thread count (rows are split, never a row's sum) nor, up to 32
// rows, on the rows beside it.
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
// Up to this many rows (batched decoding: a step of up to 32 sequences), tiles of rows share each stored
// row's dequantisation (see striped); above, the panels' GEMM, whose rows' bits depend on the rows beside
// them. SmolLM2's decoder products on the 2-core Xeon when it was set: 1.85 ms a row (AVX-512), 2.2-2.8
// (AVX2); panels at m = 32 / 48 / 64: 68 / 78 / 89 ms (AVX-512), 81 / 98 / 108 (AVX2).
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
// q4_1's min parts of up to kSumLanes rows of X, one lane each: in a vector where it holds kThinRows lanes (every
// x86 ISA), else (one-lane targets) in scalars; xsum has kSumLanes lanes a block either way.
constexpr bool kVectorMins = W >= kThinRows;
constexpr int kSumLanes = kVectorMins ? W : int(kThinRows);
// m rows rounded up to whole vectors of block sums: the length of a stored row's min parts (see striped).
constexpr std::int64_t sum_padded(std::int64_t m) { return (m + kSumLanes - 1) / kSumLanes * kSumLanes; }

// C[0:M, j + r] for r < R, M <= kThinRows: per block b of stored row j + r, the weights w = d_b q (exact in
// float: an 11-bit d times an 8-bit q) and acc_i += w x_i[b] lane by lane, one FMA chain per row over the
// block's vectors in order; q4_1's min adds m_b times the 32-value sums of x, in lane i of a vector per stored
// row (xsum (blocks, kSumLanes), lane i row i's sum, zeros past M), computed once per call. Every row of C runs the
// same operations in the same order whatever M and R (so whatever the thread count and the rows beside it).
// One FMA per W values and row: the dequantisation is shared by the M rows (a batched decoding step was
// compute-bound at a fifth of the float GEMM's rate with products of q and x scaled per block).
template <BlockKind K, int M, int R>
inline void thin_group(const BlockQuantizedMatmulArgs& g, const float* xsum, std::int64_t j) {
  static_assert(M <= kSumLanes, "the rows' block sums share a vector");
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
    const float* xb = g.x + b * kBlockValues;
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
        const V xv = V::load(xb + i * g.x_row_stride + v * W);
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
template <BlockKind K, int M, int R = kGroupRows<K, M>>
void thin_rows(const BlockQuantizedMatmulArgs& g, const float* xsum, std::int64_t j0, std::int64_t j1) {
  std::int64_t j = j0;
  for (; j + R <= j1; j += R) thin_group<K, M, R>(g, xsum, j);
  for (; j < j1; ++j) thin_group<K, M, 1>(g, xsum, j);
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

// Batched decoding (kThinRows < m <= kStripedRows) is compute-bound: a tile of kTileRows rows of X by
// kTileStored stored rows keeps its accumulators in registers (6 x 4 of AVX-512's 32, 4 x 3 of AVX2's 16), x
// loaded once per vector for the R FMAs (a memory operand per FMA made the loads the bound). A group of
// kTileStored stored rows is dequantised once per call into float32 (thread scratch, L1) and shared by every
// tile of X's rows, where each strip of 8 rows had dequantised it again in registers: SmolLM2's 180 decoder
// products at 16 rows, 1 thread on the 2-core Xeon, 33-35 -> 29-30 ms (AVX-512; 8 x 3 and 12 x 2 tiles were
// no faster), 48-49 -> 41-42 ms (AVX2; 6 x 2 and 4 x 2 slower). The tile alone, from L1, runs at ~80% of
// the FMA peak; the dequantisation (2 permutes per 32 values, exact d q) costs about a fifth more.
constexpr int kTileRows = W >= 16 ? 6 : 4;
constexpr int kTileStored = W >= 16 ? 4 : 3;

// Stored rows [j, j + R) as float32, w (R, n_in): per block the thin path's weights d_b q (q4_1's min apart);
// q4_1's min parts of every row i of X in mins (R, rows rounded up to kSumLanes): m_b times the 32-value sums
// of x (xsum (sum strips, blocks, kSumLanes)) in the thin path's chain, lane by lane; zeros for q8_0.
template <BlockKind K, int R>
void dequantize_stored(const BlockQuantizedMatmulArgs& g, const float* xsum, std::int64_t j, float* w,
                       float* block_mins, float* mins) {
  constexpr std::int64_t bb = block_bytes(K);
  constexpr int NV = kBlockValues / W, HALF = NV / 2;
  const std::int64_t blocks = g.n_in / kBlockValues, row_bytes = blocks * bb;
  const std::int64_t padded = sum_padded(g.m), sum_strips = padded / kSumLanes;
  for (int r = 0; r < R; ++r) {
    const std::uint8_t* row = g.blocks + (j + r) * row_bytes;
    float* wr = w + r * g.n_in;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::uint8_t* block = row + b * bb;
      if constexpr (kPrefetchBytes > 0) prefetch_bytes(block + kPrefetchBytes);
      if constexpr (K == BlockKind::q8_0) {
        const V d = V::set1(half_to_float(block));
        const auto* q = reinterpret_cast<const std::int8_t*>(block + 2);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) (d * load_s8(q + v * W)).store(wr + b * kBlockValues + v * W);
      } else {
        float d;
        half_pair_to_float(block, d, block_mins[r * blocks + b]);
        const V dv = V::set1(d);
#pragma GCC unroll 16
        for (int v = 0; v < HALF; ++v) {
          V lo, hi;
          load_u4_scaled(block + 4 + v * W, dv, lo, hi);
          lo.store(wr + b * kBlockValues + v * W);
          hi.store(wr + b * kBlockValues + (HALF + v) * W);
        }
      }
    }
  }
  for (std::int64_t e = 0; e < R * padded; ++e) mins[e] = 0.0f;
  if constexpr (K == BlockKind::q4_1) {
    // The R rows' chains side by side (one FMA's latency a block, not R).
    for (std::int64_t s = 0; s < sum_strips; ++s) {
      const float* xs = xsum + s * blocks * kSumLanes;
      if constexpr (kVectorMins) {
        V part[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) part[r] = V::zero();
        for (std::int64_t b = 0; b < blocks; ++b) {
          const V sums = V::load(xs + b * kSumLanes);
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) part[r] = V::fma(V::set1(block_mins[r * blocks + b]), sums, part[r]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) part[r].store(mins + r * padded + s * kSumLanes);
      } else {
        for (int r = 0; r < R; ++r)
          for (std::int64_t b = 0; b < blocks; ++b)
            for (int l = 0; l < kSumLanes; ++l) {
              float& m = mins[r * padded + s * kSumLanes + l];
              m = fma_scalar(block_mins[r * blocks + b], xs[b * kSumLanes + l], m);
            }
      }
    }
  }
}

// C[i0 + i, j + r] for i < M, r < R from the tile's packed rows of X, xp (n_in / W, M, W), and the dequantised
// stored rows w (R, n_in): acc_ir += w_r x_i vector by vector in order, as thin_group adds them, then the
// lanes' sum, the min part and the bias, as thin_group ends. So a row's bits are those it gets alone.
template <int M, int R>
void tile(const BlockQuantizedMatmulArgs& g, const float* xp, const float* w, const float* mins, std::int64_t padded,
          std::int64_t i0, std::int64_t j) {
  V acc[M][R];
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[i][r] = V::zero();
  const std::int64_t vectors = g.n_in / W;
  for (std::int64_t v = 0; v < vectors; ++v) {
    V wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = V::load(w + r * g.n_in + v * W);
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      V xv = V::load(xp + (v * M + i) * W);
#if defined(__x86_64__)
      asm("" : "+v"(xv.v));  // in a register: GCC would fold the load into each of the R FMAs
#endif
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[i][r] = V::fma(wv[r], xv, acc[i][r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      float y = acc[i][r].reduce_add() + mins[r * padded + i0 + i];
      if (g.bias) y += g.bias[j + r];
      g.c[(i0 + i) * g.c_row_stride + j + r] = y;
    }
}

// The tile for a strip of m <= kTileRows rows.
template <int R, int M = 1>
void tile_dispatch(const BlockQuantizedMatmulArgs& g, std::int64_t m, const float* xp, const float* w,
                   const float* mins, std::int64_t padded, std::int64_t i0, std::int64_t j) {
  if constexpr (M < kTileRows) {
    if (m != M) return tile_dispatch<R, M + 1>(g, m, xp, w, mins, padded, i0, j);
  }
  tile<M, R>(g, xp, w, mins, padded, i0, j);
}

// Stored rows [j, j + R) against every strip of X's rows (strip_rows each, packed one after another in xp).
template <BlockKind K, int R>
void stored_rows(const BlockQuantizedMatmulArgs& g, const float* xsum, const float* xp, std::int64_t strip_rows,
                 std::int64_t j, float* w, float* block_mins, float* mins) {
  const std::int64_t padded = sum_padded(g.m);
  dequantize_stored<K, R>(g, xsum, j, w, block_mins, mins);
  for (std::int64_t i0 = 0; i0 < g.m; i0 += strip_rows) {
    const std::int64_t m = min_scalar(strip_rows, g.m - i0);
    tile_dispatch<R>(g, m, xp + i0 * g.n_in, w, mins, padded, i0, j);
  }
}

// kThinRows < m <= kStripedRows: X's rows in strips of at most kTileRows (of equal size: 12 = 6 + 6, not 8 + 4),
// each packed by vector, (n_in / W, rows, W), so the tile's loads are fixed offsets from one pointer.
template <BlockKind K>
void striped(const BlockQuantizedMatmulArgs& g) {
  const std::int64_t blocks = g.n_in / kBlockValues, strips = (g.m + kTileRows - 1) / kTileRows;
  const std::int64_t strip_rows = (g.m + strips - 1) / strips;
  const auto xsum = block_sums<K>(g, kSumLanes);
  auto packed = aligned_buffer<float>(g.m * g.n_in);
  for (std::int64_t i0 = 0; i0 < g.m; i0 += strip_rows) {
    const std::int64_t m = min_scalar(strip_rows, g.m - i0);
    float* xp = packed.get() + i0 * g.n_in;
    for (std::int64_t i = 0; i < m; ++i) {
      const float* x = g.x + (i0 + i) * g.x_row_stride;
      for (std::int64_t v = 0; v < g.n_in / W; ++v) V::load(x + v * W).store(xp + (v * m + i) * W);
    }
  }
  const std::int64_t padded = sum_padded(g.m);
  over_row_ranges(g.n_out, thin_threads<K>(g), [&](std::int64_t j0, std::int64_t j1) {
    auto w = aligned_buffer<float>(kTileStored * g.n_in);
    auto block_mins = aligned_buffer<float>(kTileStored * blocks);
    auto mins = aligned_buffer<float>(kTileStored * padded);
    std::int64_t j = j0;
    for (; j + kTileStored <= j1; j += kTileStored)
      stored_rows<K, kTileStored>(g, xsum.get(), packed.get(), strip_rows, j, w.get(), block_mins.get(), mins.get());
    for (; j < j1; ++j) stored_rows<K, 1>(g, xsum.get(), packed.get(), strip_rows, j, w.get(), block_mins.get(), mins.get());
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

void block_quantize_x(const BlockQuantizeXArgs& a) {  // one thread: its callers share the rows out
  quantize_rows(a.x, a.x_row_stride, a.n, 0, a.m, a.codes, a.scales, a.scaled_sums);
}

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

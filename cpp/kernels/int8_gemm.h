// The int8 linear kernel (see attnkit/int8_linear.h), written once against a Dot policy
// (attnkit/simd_int8.h): kernels/int8_linear.cpp instantiates it per ISA with the exact pmaddwd
// product, kernels_vnni/int8_linear_vnni.cpp once more with vpdpbusd.
//
// Each thread owns a rectangle of C and walks it as
//   rows in MC blocks: quantise the block's rows of x to u8 (fused: the bytes are used while in L2)
//     -> columns in NR tiles (NV vectors of the packed weights) -> rows in MR tiles: register tile.
// The int32 sums are exact, so C does not depend on the ISA, the Dot policy or the thread count
// beyond the float epilogue sx sw (acc - zx colsum) (+ bias), which every path rounds alike.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "aligned_buffer.h"
#include "attention_tiles.h"
#include "attnkit/int8_linear.h"
#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "attnkit/simd_int8.h"
#include "attnkit/thread_pool.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {
namespace {

template <class Dot>
struct Int8Shape {
  static constexpr int W = Dot::W, MR = Dot::MR;
  static constexpr int NV = W >= 8 ? 2 : 16 / W;  // vectors per tile row: NR = 32 or 16 columns
  static constexpr int NR = NV * W;
  static_assert(kInt8ColumnPadding % NR == 0 && (NR % kInt8PanelColumns == 0 || kInt8PanelColumns % NR == 0),
                "a tile must cover whole panels of the packed weights");
  // Quantised rows per block: ~256 KB of them (k4 / 4 quads of kQuadBytes a row), which stay in L2
  // (512 KB on Zen 3, 1 MB on Zen 4) while every column tile of the weights sweeps them.
  static std::int64_t rows_per_block(std::int64_t k4) {
    const std::int64_t row_bytes = (k4 > 0 ? k4 : 4) / 4 * Dot::kQuadBytes;
    const std::int64_t mc = (std::int64_t(1) << 18) / row_bytes / MR * MR;
    return mc > MR ? mc : MR;
  }
};

// The float GEMM's one-thread threshold (2^24 multiply-adds, matmul.cpp) times the ~4x throughput of
// the int8 product: below it waking a sleeping second thread costs more than it saves (not re-measured).
constexpr std::int64_t kInt8MinParallelWork = std::int64_t(1) << 26;

// Quantises row x[0, k) to u8 at q[0, k4) (zeros past k): qx = clamp(rint(x / sx) + zx, 0, 255) with
// [lo, hi] = [min(x, 0), max(x, 0)], sx = (hi - lo) / 255, computed as 1 / sx times x (float32, no
// contraction: the NumPy reference repeats these roundings). Returns sx, and zx through *zx. A row
// with NaN or inf gets sx = NaN (its outputs are NaN); a row spanning less than 255 FLT_MIN is zero.
inline float quantize_row(const float* x, std::int64_t k, std::int64_t k4, std::uint8_t* q, std::int32_t* zx) {
  using V = Vec<float>;
  constexpr int W = V::W;
  // Two sets of running min, max and v * 0 (NaN once a NaN or inf was seen: min and max drop NaN), so
  // that the loop is not bound by the latency of one chain of additions (it took 1/5 of the call at n = 16).
  V lo = V::zero(), hi = V::zero(), bad = V::zero(), lo2 = V::zero(), hi2 = V::zero(), bad2 = V::zero();
  std::int64_t j0 = 0;
  for (; j0 + 2 * W <= k; j0 += 2 * W) {
    const V v = V::load(x + j0), v2 = V::load(x + j0 + W);
    lo = V::min(lo, v), lo2 = V::min(lo2, v2);
    hi = V::max(hi, v), hi2 = V::max(hi2, v2);
    bad = bad + v * V::zero(), bad2 = bad2 + v2 * V::zero();
  }
  for_each_lane<float>(k - j0, [&](std::int64_t j, int count) {
    const V v = load_partial(x + j0 + j, count);
    lo = V::min(lo, v);
    hi = V::max(hi, v);
    bad = bad + v * V::zero();
  });
  lo = V::min(lo, lo2), hi = V::max(hi, hi2), bad = bad + bad2;
  *zx = 0;
  std::memset(q, 0, std::size_t(k4));
  if (!(bad.reduce_add() == 0.0f)) return std::numeric_limits<float>::quiet_NaN();
  const float lo_s = -(V::zero() - lo).reduce_max(), hi_s = hi.reduce_max();
  // In double, so that hi - lo cannot overflow.
  const float sx = static_cast<float>((double(hi_s) - double(lo_s)) / 255.0);
  if (!(sx >= FLT_MIN)) return 0.0f;
  const float inv = 1.0f / sx;
  const float zf = min_scalar(255.0f, max_scalar(0.0f, std::nearbyint(-lo_s * inv)));
  *zx = static_cast<std::int32_t>(zf);
  const V vinv = V::set1(inv), vz = V::set1(zf), magic = V::set1(12582912.0f), top = V::set1(255.0f);
  // (y + 1.5 2^23) - 1.5 2^23 rounds |y| < 2^22 to the nearest integer, ties to even, as rint does.
  auto quantize = [&](V v) { return V::min(top, V::max(V::zero(), ((v * vinv + magic) - magic) + vz)); };
  std::int64_t j = 0;
  for (; j + W <= k; j += W) store_bytes(quantize(V::load(x + j)), q + j);
  if (j < k) {
    std::uint8_t tail[W];
    store_bytes(quantize(load_partial(x + j, int(k - j))), tail);
    std::memcpy(q + j, tail, std::size_t(k - j));
  }
  return sx;
}

// The MR x NR tile of sums of the MR-row panel qa (group g of row i at qa[(g MR + i) Q], Q = kQuadBytes) x packed
// columns [j0, j0 + NR), into tile. One pointer serves all MR broadcasts: with MR row pointers GCC ran
// out of registers and reloaded them inside the loop.
template <class Dot>
inline void micro_tile(const std::uint8_t* __restrict qa, const std::int8_t* __restrict w, std::int64_t k4,
                       std::int64_t j0, std::int32_t* tile) {
  using S = Int8Shape<Dot>;
  constexpr int MR = S::MR, NV = S::NV, W = S::W, NR = S::NR;
  const std::int8_t* wv[NV];
  for (int v = 0; v < NV; ++v) {
    const std::int64_t col = j0 + v * W;
    wv[v] = w + col / kInt8PanelColumns * k4 * kInt8PanelColumns + col % kInt8PanelColumns * 4;
  }
  typename Dot::Acc acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = Dot::zero();
  for (std::int64_t g = 0; g < k4 / 4; ++g) {
    typename Dot::B b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = Dot::load(wv[v] + g * 4 * kInt8PanelColumns);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const typename Dot::A a = Dot::broadcast(qa + (g * MR + i) * Dot::kQuadBytes);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = Dot::mac(acc[i][v], a, b[v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) Dot::store(acc[i][v], tile + i * NR + v * W);
}

// Rows [0, mr) x columns [j0, j0 + nr) of C from the tile of sums: the raw sums into g.acc, or
// sx sw (acc - zx colsum) (+ bias) into g.c, in one pass that GCC vectorises (no contraction in this
// file, so every lane and every ISA rounds the same two products and one sum).
template <class Dot>
inline void epilogue(const Int8LinearArgs& g, std::int64_t i0, int mr, std::int64_t j0, int nr,
                     const std::int32_t* __restrict tile, const float* sx, const std::int32_t* zx) {
  constexpr int NR = Int8Shape<Dot>::NR;
  const float* __restrict sw = g.w_scale + j0;
  const std::int32_t* __restrict colsum = g.w_colsum + j0;
  const float* __restrict bias = g.bias ? g.bias + j0 : nullptr;
  for (int i = 0; i < mr; ++i) {
    const std::int32_t* t = tile + i * NR;
    if (g.acc) {
      std::memcpy(g.acc + (i0 + i) * g.n + j0, t, sizeof(std::int32_t) * std::size_t(nr));
      continue;
    }
    // Unsigned, so that the wrap of two int32 products is defined; the difference fits (k <= 65536).
    const std::uint32_t z = std::uint32_t(zx[i]);
    const float s = sx[i];
    float* __restrict c = g.c + (i0 + i) * g.c_row_stride + j0;
    if (bias)
      for (int j = 0; j < nr; ++j)
        c[j] = float(std::int32_t(std::uint32_t(t[j]) - z * std::uint32_t(colsum[j]))) * (s * sw[j]) + bias[j];
    else
      for (int j = 0; j < nr; ++j)
        c[j] = float(std::int32_t(std::uint32_t(t[j]) - z * std::uint32_t(colsum[j]))) * (s * sw[j]);
  }
}

// Rows [r0, r1) x columns [c0, c1) of C with one thread's scratch (qa: MC x k4 / 4 quads in MR-row
// panels, row: k4 bytes, sx and zx: MC).
template <class Dot>
void rectangle(const Int8LinearArgs& g, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1,
               std::uint8_t* qa, std::uint8_t* row, float* sx, std::int32_t* zx) {
  using S = Int8Shape<Dot>;
  constexpr int MR = S::MR, NR = S::NR;
  const std::int64_t k = g.k, k4 = round_up(k, 4), mc = S::rows_per_block(k4);
  alignas(64) std::int32_t tile[MR * NR];
  for (std::int64_t i0 = r0; i0 < r1; i0 += mc) {
    const std::int64_t rows = min_scalar(mc, r1 - i0);
    constexpr int Q = Dot::kQuadBytes;
    const std::int64_t panel_bytes = MR * k4 / 4 * Q;
    std::memset(qa + rows / MR * panel_bytes, 0, std::size_t(panel_bytes));  // the rows past the last
    for (std::int64_t i = 0; i < rows; ++i) {
      sx[i] = quantize_row(g.x + (i0 + i) * g.x_row_stride, k, k4, row, zx + i);
      std::uint8_t* panel = qa + i / MR * panel_bytes + i % MR * Q;
      for (const std::uint8_t* quad = row; quad < row + k4; quad += 4, panel += MR * Q) Dot::pack_quad(quad, panel);
    }
    for (std::int64_t jr = c0; jr < c1; jr += NR)
      for (std::int64_t ir = 0; ir < rows; ir += MR) {
        micro_tile<Dot>(qa + ir / MR * panel_bytes, g.w, k4, jr, tile);
        epilogue<Dot>(g, i0 + ir, int(min_scalar<std::int64_t>(MR, rows - ir)), jr,
                      int(min_scalar<std::int64_t>(NR, c1 - jr)), tile, sx + ir, zx + ir);
      }
  }
}

template <class Dot>
void int8_linear_with(const Int8LinearArgs& g) {
  using S = Int8Shape<Dot>;
  const std::int64_t m = g.m, n = g.n, k4 = round_up(g.k, 4);
  if (m == 0 || n == 0) return;
  const std::int64_t tiles_m = (m + S::MR - 1) / S::MR, tiles_n = (n + S::NR - 1) / S::NR;
  const int threads = m * n * g.k >= kInt8MinParallelWork ? kernel_threads() : 1;
  // Rows split first: each row is then quantised by one thread only. Columns when rows run out.
  const int rows = int(min_scalar<std::int64_t>(threads, tiles_m));
  const int cols = int(min_scalar<std::int64_t>(threads / rows, tiles_n));
  const int parts = rows * cols;
  const std::int64_t mc = min_scalar(S::rows_per_block(k4), round_up(m, S::MR));
  const std::int64_t q_size = round_up((round_up(mc, S::MR) + S::MR) * k4 / 4 * Dot::kQuadBytes + k4, 64);
  const std::int64_t s_size = round_up(mc, 16);
  auto qa = aligned_buffer<std::uint8_t>(parts * q_size);
  auto sx = aligned_buffer<float>(parts * s_size);
  auto zx = aligned_buffer<std::int32_t>(parts * s_size);
  team(parts, [&](int part, int) {
    const int r = part / cols, s = part % cols;
    const std::int64_t r0 = tiles_m * r / rows * S::MR, r1 = min_scalar(m, tiles_m * (r + 1) / rows * S::MR);
    const std::int64_t c0 = tiles_n * s / cols * S::NR, c1 = min_scalar(n, tiles_n * (s + 1) / cols * S::NR);
    std::uint8_t* q = qa.get() + part * q_size;
    rectangle<Dot>(g, r0, r1, c0, c1, q, q + q_size - k4, sx.get() + part * s_size, zx.get() + part * s_size);
  });
}

}  // namespace
}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

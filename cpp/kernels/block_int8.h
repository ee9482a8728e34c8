// The block-quantised product with int8 activations (BlockQuantizedMatmulArgs::int8_x), as llama.cpp computes it,
// written once against a block dot policy (attnkit/simd_int8.h): kernels/block_quantized.cpp instantiates it
// per ISA with BlockDot, kernels_vnni/block_quantized_vnni.cpp once more with vpdpbusd (BlockDotVnni).
//
// Each block of 32 values of a row of X becomes codes q = rint(x 127 / amax) in [-127, 127] with the scale
// e = amax / 127 (x ~ e q) and es = e sum_t q_t. A weight block then adds (d e) times the exact integer sums
// sum_t w_t q_t (8 lanes of 4 values, Dot) to 8 float lanes, and q4_1's m es to a ninth sum;
// at the end the lanes in one fixed order, then the ninth. AVX2 and AVX-512 give the same bits, and so does
// any thread count; the codes are NumPy's (reference.block_quantized.quantize_activations) on every ISA.
// Any number of rows of X: tiles of up to 4 rows of X by 1-4 stored rows, so a prompt reads each block once
// per 4 tokens, from L1, and multiplies integers (a pass over the blocks is memory-bound only for 1 token).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>

#include "aligned_buffer.h"
#include "attnkit/block_quantized.h"
#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "attnkit/simd_int8.h"
#include "block_rows.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {
namespace {

// Codes, scales e and e sum(q) of the x blocks of all m rows; a block with an inf or NaN gets NaN scales.
struct QuantizedX {
  std::unique_ptr<std::int8_t, FreeDeleter> codes;
  std::unique_ptr<float, FreeDeleter> scales, scaled_sums;
};

inline void quantize_x_block(const float* x, std::int8_t* q, float& scale, float& scaled_sum) {
  using V = Vec<float>;
  constexpr int W = V::W;
  constexpr int NV = kBlockValues / W;
  V amax = V::zero(), bad = V::zero();
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const V xv = V::load(x + v * W);
    amax = V::max(amax, V::abs(xv)), bad = bad + xv * V::zero();
  }
  const float a = amax.reduce_max(), inv = 127.0f / a;
  const bool finite = bad.reduce_add() == 0.0f;
  std::int32_t sum = 0;
  // A block of zeros, or so small (below 127 / FLT_MAX) that 127 / amax overflows: codes 0, scale 0.
  if (!finite || !(inv <= std::numeric_limits<float>::max())) {
    for (int t = 0; t < kBlockValues; ++t) q[t] = 0;
    scale = scaled_sum = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    return;
  }
  scale = a / 127.0f;
  // A product, then rint (ties to even; vroundps where the ISA has it): no addition that a contraction
  // into an FMA could fuse with the product, so the codes are NumPy's rint(x * inv) on every ISA.
  for (int t = 0; t < kBlockValues; ++t) {
    const float c = std::nearbyint(x[t] * inv);
    q[t] = static_cast<std::int8_t>(c > 127.0f ? 127.0f : c < -127.0f ? -127.0f : c);
    sum += q[t];
  }
  scaled_sum = scale * float(sum);
}

QuantizedX quantize_x(const BlockQuantizedMatmulArgs& g) {
  const std::int64_t blocks = g.n_in / kBlockValues;
  QuantizedX qx{aligned_buffer<std::int8_t>(g.m * g.n_in), aligned_buffer<float>(g.m * blocks),
                aligned_buffer<float>(g.m * blocks)};
  const int threads = elementwise_threads(g.m * g.n_in);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t i = 0; i < g.m; ++i)
    for (std::int64_t b = 0; b < blocks; ++b)
      quantize_x_block(g.x + i * g.x_row_stride + b * kBlockValues, qx.codes.get() + i * g.n_in + b * kBlockValues,
                       qx.scales.get()[i * blocks + b], qx.scaled_sums.get()[i * blocks + b]);
  return qx;
}

// C[i0 + i, j + r] for i < M, r < R: per block, acc = fma(d e, lanes of sum w q, acc) and q4_1's
// min_part = fma(m, e sum q, min_part). Every entry runs the same operations whatever M and R.
template <class Dot, BlockKind K, int M, int R>
inline void int8_tile(const BlockQuantizedMatmulArgs& g, const QuantizedX& qx, std::int64_t i0, std::int64_t j) {
  constexpr std::int64_t bb = block_bytes(K);
  const std::int64_t blocks = g.n_in / kBlockValues, row_bytes = blocks * bb;
  const std::uint8_t* rows = g.blocks + j * row_bytes;
  const std::int8_t* codes = qx.codes.get() + i0 * g.n_in;
  const float* scales = qx.scales.get() + i0 * blocks;
  const float* scaled_sums = qx.scaled_sums.get() + i0 * blocks;
  typename Dot::Lanes acc[M][R];
  float min_part[M][R];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[i][r] = Dot::zero(), min_part[i][r] = 0.0f;
  for (std::int64_t b = 0; b < blocks; ++b) {
    float d[R], m[R];
    typename Dot::Wt w[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* block = rows + r * row_bytes + b * bb;
      if constexpr (kPrefetchBytes > 0) prefetch_bytes(block + kPrefetchBytes);
      if constexpr (K == BlockKind::q8_0) {
        d[r] = half_to_float(block), m[r] = 0.0f;
        w[r] = Dot::s8(reinterpret_cast<const std::int8_t*>(block + 2));
      } else {
        half_pair_to_float(block, d[r], m[r]);
        w[r] = Dot::u4(block + 4);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
      const typename Dot::X x = Dot::load_x(codes + i * g.n_in + b * kBlockValues);
      const float e = scales[i * blocks + b];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const auto s = K == BlockKind::q8_0 ? Dot::dot_s8(w[r], x) : Dot::dot_u4(w[r], x);
        acc[i][r] = Dot::add(acc[i][r], d[r] * e, s);
        if constexpr (K == BlockKind::q4_1) min_part[i][r] = fma_scalar(m[r], scaled_sums[i * blocks + b], min_part[i][r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      alignas(64) float lanes[8];
      Dot::store(acc[i][r], lanes);
      float y = lanes_total(lanes) + min_part[i][r];
      if (g.bias) y += g.bias[j + r];
      g.c[(i0 + i) * g.c_row_stride + j + r] = y;
    }
}

// Stored rows per tile: q4_1, 4 for one row of X (4 independent accumulator chains), 2 for two, 1 above
// (the accumulators of M x R tiles stay in registers); q8_0 one (its big matrix streams from DRAM, where one
// stream beats 4 interleaved ones: 576 x 49152 at one row of X, 2.4 against 3.8 ms).
template <BlockKind K, int M>
constexpr int kInt8GroupRows = K == BlockKind::q8_0 ? 1 : M == 1 ? 4 : M == 2 ? 2 : 1;

// Stored rows [j0, j1) against rows [i0, i0 + M) of X.
template <class Dot, BlockKind K, int M>
void int8_strip(const BlockQuantizedMatmulArgs& g, const QuantizedX& qx, std::int64_t i0, std::int64_t j0,
                std::int64_t j1) {
  constexpr int R = kInt8GroupRows<K, M>;
  std::int64_t j = j0;
  for (; j + R <= j1; j += R) int8_tile<Dot, K, M, R>(g, qx, i0, j);
  for (; j < j1; ++j) int8_tile<Dot, K, M, 1>(g, qx, i0, j);
}

// Stored rows [j0, j1) against every row of X: strips of 64 stored rows (their blocks stay in L1/L2) swept
// by 4 rows of X at a time.
template <class Dot, BlockKind K>
void int8_range(const BlockQuantizedMatmulArgs& g, const QuantizedX& qx, std::int64_t j0, std::int64_t j1) {
  constexpr std::int64_t kStrip = 64;
  for (std::int64_t s0 = j0; s0 < j1; s0 += kStrip) {
    const std::int64_t s1 = min_scalar(j1, s0 + kStrip);
    std::int64_t i = 0;
    for (; i + 4 <= g.m; i += 4) int8_strip<Dot, K, 4>(g, qx, i, s0, s1);
    switch (g.m - i) {
      case 1: int8_strip<Dot, K, 1>(g, qx, i, s0, s1); break;
      case 2: int8_strip<Dot, K, 2>(g, qx, i, s0, s1); break;
      case 3: int8_strip<Dot, K, 3>(g, qx, i, s0, s1); break;
      default: break;
    }
  }
}

template <class Dot, BlockKind K>
void int8_x(const BlockQuantizedMatmulArgs& g) {
  const std::int64_t blocks = g.n_in / kBlockValues, n = g.n_out;
  const QuantizedX qx = quantize_x(g);
  const bool parallel = n >= 32 && g.m * n * blocks * block_bytes(K) >= kMinParallelBytes;
  over_row_ranges(n, parallel ? kernel_threads() : 1,
                  [&](std::int64_t j0, std::int64_t j1) { int8_range<Dot, K>(g, qx, j0, j1); });
}

// C = X W (+ bias) with X read as int8 blocks, whatever the number of rows.
template <class Dot>
void block_int8_matmul(const BlockQuantizedMatmulArgs& g) {
  return g.kind == BlockKind::q8_0 ? int8_x<Dot, BlockKind::q8_0>(g) : int8_x<Dot, BlockKind::q4_1>(g);
}

}  // namespace
}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

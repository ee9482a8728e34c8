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
// That per-block kernel sums each stored row's 8 lanes; where the caller passes the blocks packed in column
// groups (BlockQuantizedMatmulArgs::packed, AVX2 and up) the packed kernels below take over: a lane is a column,
// one instruction multiplies 4 values of W columns, and a block's integer sums are exact per column, so tiles
// of MR rows cost 2-4x less than float32 inputs from 1 row to hundreds.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>

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

// Codes, scales e and e sum(q) of the x blocks of all m rows (made here, or the caller's: x_codes); a block with
// an inf or NaN gets NaN scales.
struct QuantizedX {
  const std::int8_t* codes = nullptr;
  const float* scales = nullptr;
  const float* scaled_sums = nullptr;
  std::unique_ptr<std::int8_t, FreeDeleter> own_codes;
  std::unique_ptr<float, FreeDeleter> own_scales, own_scaled_sums;
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
  // A block of zeros, or so small (below 127 / FLT_MAX) that 127 / amax overflows: codes 0, scale 0.
  if (!finite || !(inv <= std::numeric_limits<float>::max())) {
    for (int t = 0; t < kBlockValues; ++t) q[t] = 0;
    scale = scaled_sum = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    return;
  }
  scale = a / 127.0f;
  // A product, then rint by adding and taking away 1.5 2^23 (ties to even, exact for |c| < 2^22; the block
  // files compile with -ffp-contract=off, so the product is rounded first): NumPy's rint(x * inv) on every
  // ISA. The codes' sum is exact in float (at most 32 x 127).
  const V vinv = V::set1(inv), magic = V::set1(12582912.0f), hi = V::set1(127.0f), lo = V::set1(-127.0f);
  V total = V::zero();
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const V c = V::max(lo, V::min(hi, (V::load(x + v * W) * vinv + magic) - magic));
    total = total + c;
    store_bytes(c, q + v * W);
  }
  scaled_sum = scale * total.reduce_add();
}

// Rows [i0, i1) of X (n values a row) as QuantizedX lays them out: codes n a row, scales and e sum(q) n / 32.
inline void quantize_rows(const float* x, std::int64_t x_row_stride, std::int64_t n, std::int64_t i0, std::int64_t i1,
                          std::int8_t* codes, float* scales, float* scaled_sums) {
  const std::int64_t blocks = n / kBlockValues;
  for (std::int64_t i = i0; i < i1; ++i)
    for (std::int64_t b = 0; b < blocks; ++b)
      quantize_x_block(x + i * x_row_stride + b * kBlockValues, codes + i * n + b * kBlockValues,
                       scales[i * blocks + b], scaled_sums[i * blocks + b]);
}

QuantizedX quantize_x(const BlockQuantizedMatmulArgs& g) {
  if (g.x_codes != nullptr) return {g.x_codes, g.x_scales, g.x_scaled_sums, nullptr, nullptr, nullptr};
  const std::int64_t blocks = g.n_in / kBlockValues;
  QuantizedX qx;
  qx.own_codes = aligned_buffer<std::int8_t>(g.m * g.n_in);
  qx.own_scales = aligned_buffer<float>(g.m * blocks), qx.own_scaled_sums = aligned_buffer<float>(g.m * blocks);
  qx.codes = qx.own_codes.get(), qx.scales = qx.own_scales.get(), qx.scaled_sums = qx.own_scaled_sums.get();
  const int threads = elementwise_threads(g.m * g.n_in);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t i = 0; i < g.m; ++i)
    quantize_rows(g.x, g.x_row_stride, g.n_in, i, i + 1, qx.own_codes.get(), qx.own_scales.get(),
                  qx.own_scaled_sums.get());
  return qx;
}

// C[i0 + i, j + r] for i < M, r < R: per block, acc = fma(d e, lanes of sum w q, acc) and q4_1's
// min_part = fma(m, e sum q, min_part). Every entry runs the same operations whatever M and R.
template <class Dot, BlockKind K, int M, int R>
inline void int8_tile(const BlockQuantizedMatmulArgs& g, const QuantizedX& qx, std::int64_t i0, std::int64_t j) {
  constexpr std::int64_t bb = block_bytes(K);
  const std::int64_t blocks = g.n_in / kBlockValues, row_bytes = blocks * bb;
  const std::uint8_t* rows = g.blocks + j * row_bytes;
  const std::int8_t* codes = qx.codes + i0 * g.n_in;
  const float* scales = qx.scales + i0 * blocks;
  const float* scaled_sums = qx.scaled_sums + i0 * blocks;
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

// The packed kernels' policies for a block kernel's (simd_int8.h): Nibble for q4_1 (u8 weights times s8 codes),
// Quad for q8_0 (s8 codes times s8 weights without VNNI, codes + 128 as u8 with it); void where the ISA has none.
template <class Dot>
struct PackedOf {
  using Nibble = void;
  using Quad = void;
};
#if defined(__AVX2__)
template <>
struct PackedOf<BlockDot> {
  using Nibble = NibbleDot;
  using Quad = DotSign;
};
#endif
#if (defined(__AVX512BW__) && defined(__AVX512VNNI__)) || (!defined(__AVX512BW__) && defined(__AVXVNNI__))
template <>
struct PackedOf<BlockDotVnni> {
  using Nibble = NibbleDotVnni;
  using Quad = DotVnni;
};
#endif

#if defined(__AVX2__)  // the packed kernels' ISAs (PackedOf above)
// body(q) for q < N, unrolled or kept a loop as the policy asks (kUnrolledRows, attnkit/simd_int8.h).
template <bool Unrolled, int N, class Body>
inline void over_quads(const Body& body) {
  if constexpr (Unrolled) {
#pragma GCC unroll 8
    for (int q = 0; q < N; ++q) body(q);
  } else {
#pragma GCC unroll 1
    for (int q = 0; q < N; ++q) body(q);
  }
}

// C[i0 + i, j + l] = acc[i] lane l (+ bias), for the columns before n_out.
template <int M>
inline void store_tile(const BlockQuantizedMatmulArgs& g, const Vec<float>* acc, std::int64_t i0, std::int64_t j) {
  using V = Vec<float>;
  const int n = int(min_scalar(std::int64_t(V::W), g.n_out - j));
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
    const V y = g.bias ? acc[i] + V::load_n(g.bias + j, n) : acc[i];
    y.store_n(g.c + (i0 + i) * g.c_row_stride + j, n);
  }
}

// Packed q4_1 (packed_bytes, attnkit/block_quantized.h): C[i0 + i, j + l] for i < M, l < W, W columns in one
// vector. Per block, s = the exact integer sums of the codes' products (W lanes), then
//   acc = fma(float(s), d e, acc),  acc = fma(m, e sum(q), acc)
// in block order, and C = acc (+ bias): every entry the same operations whatever M, W and the thread count, so
// AVX2 and AVX-512, with VNNI or without, give the same bits. A group's blocks are unpacked once for M rows
// of X (the float32-input kernel dequantises them once for all rows), and the products are integer ones:
// 4 values a lane and instruction where a float FMA does one.
template <class D, int M>
inline void packed_tile(const BlockQuantizedMatmulArgs& g, const QuantizedX& qx, std::int64_t i0, std::int64_t j) {
  using V = Vec<float>;
  constexpr int W = D::W;
  static_assert(V::W == W && kPackedColumns % W == 0, "a tile is one float vector of a packed group's columns");
  const std::int64_t blocks = g.n_in / kBlockValues;
  const int lane0 = int(j % kPackedColumns);  // 8 for the second half of a group (W = 8)
  const std::uint8_t* group = g.packed + j / kPackedColumns * blocks * packed_bytes(BlockKind::q4_1);
  const std::int8_t* codes = qx.codes + i0 * g.n_in;
  const float* e = qx.scales + i0 * blocks;
  const float* es = qx.scaled_sums + i0 * blocks;
  V acc[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) acc[i] = V::zero();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* p = group + b * packed_bytes(BlockKind::q4_1);
    typename D::I s[M];
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) s[i] = D::zero();
    over_quads<(M <= D::kUnrolledRows), 4>([&](int q) {
      const typename D::I nibbles = D::load(p + q * 4 * kPackedColumns + 4 * lane0);
      const typename D::I low = D::low(nibbles), high = D::high(nibbles);
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) {
        const std::int8_t* c = codes + i * g.n_in + b * kBlockValues + 4 * q;
        s[i] = D::dot(D::dot(s[i], low, D::broadcast(c)), high, D::broadcast(c + 16));
      }
    });
    const V d{D::halves(p + 4 * 4 * kPackedColumns + 2 * lane0)};
    const V m{D::halves(p + 4 * 4 * kPackedColumns + 2 * kPackedColumns + 2 * lane0)};
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      acc[i] = V::fma(V{D::to_float(D::sums(s[i]))}, d * V::set1(e[i * blocks + b]), acc[i]);
      acc[i] = V::fma(m, V::set1(es[i * blocks + b]), acc[i]);
    }
  }
  store_tile<M>(g, acc, i0, j);
}

// Whether the packed q8_0 policy D reads x's codes + 128 as u8 (DotVnni: vpdpbusd multiplies u8 by s8), its
// sums then started from the block's stored -128 sum(w), or the codes themselves (DotSign).
template <class D>
constexpr bool kOffsetCodes = !std::is_same_v<D, DotSign>;

// Packed q8_0: as packed_tile, with s the exact sums of x's codes times the weights (D: DotSign, or DotVnni over
// codes + 128 from -128 sum(w)), and no m term. x_quads holds every row's codes, or codes + 128 (kOffsetCodes).
template <class D, int M>
inline void packed_q8_tile(const BlockQuantizedMatmulArgs& g, const QuantizedX& qx, const std::uint8_t* x_quads,
                           std::int64_t i0, std::int64_t j) {
  using V = Vec<float>;
  constexpr int W = D::W;
  static_assert(V::W == W && kPackedColumns % W == 0, "a tile is one float vector of a packed group's columns");
  constexpr std::int64_t bytes = packed_bytes(BlockKind::q8_0);
  const std::int64_t blocks = g.n_in / kBlockValues, quads = g.n_in / 4;
  const int lane0 = int(j % kPackedColumns);
  const std::uint8_t* group = g.packed + j / kPackedColumns * blocks * bytes;
  const float* e = qx.scales + i0 * blocks;
  V acc[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) acc[i] = V::zero();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* p = group + b * bytes;
    typename D::Acc s[M];
    typename D::Acc start = D::zero();
    if constexpr (kOffsetCodes<D>) start = NibbleDot::load(p + 8 * 4 * kPackedColumns + 2 * kPackedColumns + 4 * lane0);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) s[i] = start;
    over_quads<(M <= D::kUnrolledRows), 8>([&](int q) {
      const typename D::B w = D::load(reinterpret_cast<const std::int8_t*>(p + q * 4 * kPackedColumns + 4 * lane0));
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i)
        s[i] = D::mac(s[i], D::broadcast(x_quads + ((i0 + i) * quads + b * 8 + q) * D::kQuadBytes), w);
    });
    const V d{NibbleDot::halves(p + 8 * 4 * kPackedColumns + 2 * lane0)};
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) acc[i] = V::fma(V{NibbleDot::to_float(s[i])}, d * V::set1(e[i * blocks + b]), acc[i]);
  }
  store_tile<M>(g, acc, i0, j);
}

// A packed kernel's tile of rows [i0, i0 + rows), rows <= M, at column j: Tile::run<M'>(i0, j) for M' = rows.
template <int M, class Tile>
inline void packed_rows(const Tile& tile, std::int64_t i0, std::int64_t j, std::int64_t rows) {
  if constexpr (M > 0) {
    if (rows == M) return tile.template run<M>(i0, j);
    packed_rows<M - 1>(tile, i0, j, rows);
  }
}

// Columns [j0, j1) (j0 a multiple of kPackedColumns) against every row of X: a tile's blocks (6-15 KB of q4_1
// for SmolLM2) stay in L1 while the rows pass over them MR at a time.
template <int W, int MR, class Tile>
void packed_range(const Tile& tile, std::int64_t m, std::int64_t j0, std::int64_t j1) {
  for (std::int64_t j = j0; j < j1; j += W) {
    std::int64_t i = 0;
    for (; i + MR <= m; i += MR) tile.template run<MR>(i, j);
    packed_rows<MR - 1>(tile, i, j, m - i);
  }
}

template <class D>
struct NibbleTile {
  const BlockQuantizedMatmulArgs& g;
  const QuantizedX& qx;
  template <int M>
  void run(std::int64_t i0, std::int64_t j) const { packed_tile<D, M>(g, qx, i0, j); }
};

template <class D>
struct QuadTile {
  const BlockQuantizedMatmulArgs& g;
  const QuantizedX& qx;
  const std::uint8_t* x_quads;
  template <int M>
  void run(std::int64_t i0, std::int64_t j) const { packed_q8_tile<D, M>(g, qx, x_quads, i0, j); }
};

// Every row's codes + 128 (c ^ 0x80 as a byte), for DotVnni's u8 operand (its quads are the bytes in order).
inline std::unique_ptr<std::uint8_t, FreeDeleter> offset_codes(const BlockQuantizedMatmulArgs& g,
                                                                const QuantizedX& qx) {
  const std::int64_t n = g.m * g.n_in;
  auto ux = aligned_buffer<std::uint8_t>(n);
  const std::int8_t* codes = qx.codes;
  for (std::int64_t t = 0; t < n; ++t) ux.get()[t] = static_cast<std::uint8_t>(codes[t]) ^ 0x80;
  return ux;
}

// The packed kernel of K over the columns, on `threads` threads.
template <class Dot, BlockKind K>
void packed_x(const BlockQuantizedMatmulArgs& g, const QuantizedX& qx, int threads) {
  if constexpr (K == BlockKind::q4_1) {
    using D = typename PackedOf<Dot>::Nibble;
    constexpr int MR = D::MR;
    const NibbleTile<D> tile{g, qx};
    over_row_ranges(g.n_out, threads, [&](std::int64_t j0, std::int64_t j1) { packed_range<D::W, MR>(tile, g.m, j0, j1); });
  } else {
    using D = typename PackedOf<Dot>::Quad;
    static_assert(D::kQuadBytes == 4, "packed q8_0 reads each row's codes in order");
    constexpr int MR = D::W == 16 ? 8 : 4;  // s and acc a row, the weights' vector(s), a broadcast
    std::unique_ptr<std::uint8_t, FreeDeleter> ux;
    if constexpr (kOffsetCodes<D>) ux = offset_codes(g, qx);
    const auto* x_quads = kOffsetCodes<D> ? ux.get() : reinterpret_cast<const std::uint8_t*>(qx.codes);
    const QuadTile<D> tile{g, qx, x_quads};
    over_row_ranges(g.n_out, threads, [&](std::int64_t j0, std::int64_t j1) { packed_range<D::W, MR>(tile, g.m, j0, j1); });
  }
}
#endif

template <class Dot, BlockKind K>
void int8_x(const BlockQuantizedMatmulArgs& g) {
  const std::int64_t blocks = g.n_in / kBlockValues, n = g.n_out;
  const QuantizedX qx = quantize_x(g);
  const bool parallel = n >= 32 && g.m * n * blocks * block_bytes(K) >= kMinParallelBytes;
  if constexpr (!std::is_void_v<typename PackedOf<Dot>::Nibble>) {
#if defined(__AVX2__)
    if (g.packed != nullptr) return packed_x<Dot, K>(g, qx, parallel ? kernel_threads() : 1);
#endif
  }
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

// Building blocks shared by the attention forward and backward kernels (included only by
// cpp/kernels/attention*.cpp, inside the ISA's namespace; internal linkage per translation unit).
//
// Logits are computed transposed, St[j][i] (key j, query i), with queries along the vector lanes:
// the softmax over keys is then vertical, and the same register tile serves S = Q K^T and, in the
// backward, dP = dO V^T.
#pragma once
#include <cstdint>
#include <limits>
#include <type_traits>

#include "aligned_buffer.h"
#include "attnkit/attention.h"
#include "attnkit/simd.h"
#include "visibility.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {
namespace {

template <class T>
struct Tiles {
  using V = Vec<T>;
  static constexpr int W = V::W;
  static constexpr int kRegs = W * sizeof(T) == 64 ? 32 : 16;  // vector registers of the ISA
  static constexpr int QV = 2;                                 // query vectors per logits tile
  static constexpr int KR = kRegs == 32 ? 12 : 6;              // keys per logits tile
  static constexpr int MR = 6;                                 // query rows per output tile
  static constexpr int NV = kRegs == 32 ? 4 : 2;               // value vectors per output tile
  static constexpr int QT = QV * W;                            // queries per logits tile
  static constexpr int QQ = QT;                                // query-block padding quantum
  static constexpr int BQ = 96;  // queries per task: a multiple of QQ and MR on every ISA
  // Keys per block. 192 over 96: the per-block rescale of O and the softmax bookkeeping amortise
  // over twice the keys (backward +3-4%, forward about even on Zen 4); 48 and 288 were slower.
  static constexpr int BK = 192;
  static_assert(BK % KR == 0 && BQ % QQ == 0 && BQ % MR == 0 && QQ % W == 0, "tile sizes must nest");
};

inline std::int64_t round_up(std::int64_t x, std::int64_t q) { return (x + q - 1) / q * q; }

// Tasks a thread claims at a time: runs of neighbouring items, a quarter of a thread's share. Claimed one by one,
// two threads write the heads of one row of a (B, N, H, dh) layout side by side (the cores then trade its cache
// lines); claims of a few keep the balance where items cost unequal time.
inline std::int64_t task_chunk(std::int64_t tasks, int threads) {
  const std::int64_t chunk = tasks / (4 * std::int64_t(threads));
  return chunk > 1 ? chunk : 1;
}

// Padded width of a block of bq queries: a whole logits tile, or one vector when bq fits in it.
template <class T>
std::int64_t query_padding(std::int64_t bq) {
  return bq <= Vec<T>::W ? Vec<T>::W : round_up(bq, Tiles<T>::QQ);
}

// Xt[c][i] = s * x_row(i0 + i)[c] for i < bq, 0 for bq <= i < bqp: rows of width w, transposed.
template <class T, class Row>
void pack_transposed(Row x_row, std::int64_t i0, std::int64_t bq, std::int64_t bqp, std::int64_t w,
                     T s, T* Xt) {
  for (std::int64_t i = 0; i < bq; ++i) {
    const T* xi = x_row(i0 + i);
    for (std::int64_t c = 0; c < w; ++c) Xt[c * bqp + i] = s * xi[c];
  }
  for (std::int64_t c = 0; c < w; ++c)
    for (std::int64_t i = bq; i < bqp; ++i) Xt[c * bqp + i] = T(0);
}

// St[r][i] = sum_c Qt[c][i] krows[r][c] for KR keys and QV * W queries: a KR x QV register tile.
// (QV = 1 serves a block of at most W queries, e.g. short sequences, without computing empty lanes.)
template <class T, int QV = Tiles<T>::QV>
inline void logits_tile(const T* Qt, std::int64_t ldq, const T* const* krows, std::int64_t d, T* St,
                        std::int64_t lds) {
  using V = Vec<T>;
  constexpr int W = V::W, KR = Tiles<T>::KR;
  V acc[KR][QV];
#pragma GCC unroll 16
  for (int r = 0; r < KR; ++r)
#pragma GCC unroll 4
    for (int u = 0; u < QV; ++u) acc[r][u] = V::zero();
  for (std::int64_t c = 0; c < d; ++c) {
    V qv[QV];
#pragma GCC unroll 4
    for (int u = 0; u < QV; ++u) qv[u] = V::load(Qt + c * ldq + u * W);
#pragma GCC unroll 16
    for (int r = 0; r < KR; ++r) {
      const V kb = V::set1(krows[r][c]);
#pragma GCC unroll 4
      for (int u = 0; u < QV; ++u) acc[r][u] = V::fma(qv[u], kb, acc[r][u]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < KR; ++r)
#pragma GCC unroll 4
    for (int u = 0; u < QV; ++u) acc[r][u].store(St + r * lds + u * W);
}

// The first query tile (offset into the block of queries from i0, a multiple of qt) with a query that
// may see a key >= j: tiles before it are all -inf, which block_logits writes without computing them.
inline std::int64_t first_query_tile(const Visibility& vis, std::int64_t i0, std::int64_t j, std::int64_t qt) {
  const std::int64_t i = vis.first_query(j) - i0;
  return i > 0 ? i / qt * qt : 0;
}

// Logits of one key block, transposed: St[j][i] for j < jn (keys j0 + j), i < bqp (queries i0 + i),
// with bias added and invisible keys (mask, vis) set to -inf. Keys >= key_length never get here.
template <class T>
void block_logits(const AttentionArgs<T>& a, const Visibility& vis, std::int64_t b, std::int64_t i0, std::int64_t bq,
                  std::int64_t bqp, std::int64_t j0, std::int64_t jn, const T* Qt, const T* zero_row,
                  T* St) {
  using V = Vec<T>;
  constexpr int W = V::W, KR = Tiles<T>::KR, QT = Tiles<T>::QT;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T* krows[KR];
  for (std::int64_t jt = 0; jt < jn; jt += KR) {
    // Keys past the block end read a row of zeros: the tile never needs a tail variant.
    for (int r = 0; r < KR; ++r) krows[r] = jt + r < jn ? a.k.row(b, j0 + jt + r) : zero_row;
    T* st_rows = St + jt * bqp;  // BK is a multiple of KR, so the tile stays inside St
    if (bqp == W) {  // a block of at most W queries (see query_padding)
      logits_tile<T, 1>(Qt, bqp, krows, a.d, st_rows, bqp);
      continue;
    }
    for (std::int64_t it = first_query_tile(vis, i0, j0 + jt, QT); it < bqp; it += QT)
      logits_tile(Qt + it, bqp, krows, a.d, st_rows + it, bqp);
  }
  if (a.bias) {
    if (a.bias.row_stride == 0) {  // one bias per key: a broadcast add along the query lanes
      const T* brow = a.bias.row(b, 0) + j0;
      for (std::int64_t j = 0; j < jn; ++j) {
        const V bj = V::set1(brow[j]);
        for (std::int64_t i = 0; i < bqp; i += W) (V::load(St + j * bqp + i) + bj).store(St + j * bqp + i);
      }
    } else {
      for (std::int64_t i = 0; i < bq; ++i) {
        const T* brow = a.bias.row(b, i0 + i) + j0;
        for (std::int64_t j = 0; j < jn; ++j) St[j * bqp + i] += brow[j];
      }
    }
  }
  if (a.mask) {
    if (a.mask.row_stride == 0) {
      const std::uint8_t* mrow = a.mask.row(b, 0) + j0;
      for (std::int64_t j = 0; j < jn; ++j)
        if (!mrow[j])
          for (std::int64_t i = 0; i < bqp; ++i) St[j * bqp + i] = neg_inf;
    } else {
      for (std::int64_t i = 0; i < bq; ++i) {
        const std::uint8_t* mrow = a.mask.row(b, i0 + i) + j0;
        for (std::int64_t j = 0; j < jn; ++j)
          if (!mrow[j]) St[j * bqp + i] = neg_inf;
      }
    }
  }
  if (vis.limits_queries()) {  // rows i0 + i outside key j0 + j's queries [first, end)
    for (std::int64_t j = 0; j < jn; ++j) {
      const std::int64_t first = vis.first_query(j0 + j) - i0, end = vis.end_query(j0 + j) - i0;
      for (std::int64_t i = 0; i < bqp && i < first; ++i) St[j * bqp + i] = neg_inf;
      for (std::int64_t i = max_scalar<std::int64_t>(0, end); i < bq; ++i) St[j * bqp + i] = neg_inf;
    }
  }
}

// out[r][c0 + ...] = alpha[r] out[r][...] + sum_{s < ns} coef[s cs + r cr] x[s x_rs + ...] for MR output
// rows and NVt vectors of columns (alpha null: 1). The forward's O += P V (coef = Pt, cs = bqp,
// cr = 1) and the backward's dV += P^T dO, dK += dS^T Q (cs = 1, cr = bqp), dQ += dS K.
template <class T, int MR, int NVt>
inline void rows_tile(T* out, std::int64_t ldo, const T* alpha, const T* coef, std::int64_t cs,
                      std::int64_t cr, const T* x, std::int64_t x_rs, std::int64_t ns, std::int64_t c0) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V o[MR][NVt];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const V al = V::set1(alpha ? alpha[r] : T(1));
#pragma GCC unroll 8
    for (int u = 0; u < NVt; ++u) o[r][u] = V::load(out + r * ldo + c0 + u * W) * al;
  }
  for (std::int64_t s = 0; s < ns; ++s) {
    const T* xs = x + s * x_rs + c0;
    V xv[NVt];
#pragma GCC unroll 8
    for (int u = 0; u < NVt; ++u) xv[u] = V::load(xs + u * W);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const V p = V::set1(coef[s * cs + r * cr]);
#pragma GCC unroll 8
      for (int u = 0; u < NVt; ++u) o[r][u] = V::fma(p, xv[u], o[r][u]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int u = 0; u < NVt; ++u) o[r][u].store(out + r * ldo + c0 + u * W);
}

// One strip of MR output rows: full register tiles along the columns, single vectors, scalar tail.
template <class T, int MR>
void rows_strip(T* out, std::int64_t ldo, const T* alpha, const T* coef, std::int64_t cs, std::int64_t cr,
                const T* x, std::int64_t x_rs, std::int64_t ns, std::int64_t cols) {
  constexpr int W = Tiles<T>::W, NV = Tiles<T>::NV;
  std::int64_t c0 = 0;
  for (; c0 + NV * W <= cols; c0 += NV * W) rows_tile<T, MR, NV>(out, ldo, alpha, coef, cs, cr, x, x_rs, ns, c0);
  // Two vectors share each broadcast coefficient (a head of 32 floats on AVX-512 took single vectors).
  if constexpr (NV > 2)
    for (; c0 + 2 * W <= cols; c0 += 2 * W) rows_tile<T, MR, 2>(out, ldo, alpha, coef, cs, cr, x, x_rs, ns, c0);
  for (; c0 + W <= cols; c0 += W) rows_tile<T, MR, 1>(out, ldo, alpha, coef, cs, cr, x, x_rs, ns, c0);
  for (; c0 < cols; ++c0) {
    for (int r = 0; r < MR; ++r) {
      T o = out[r * ldo + c0] * (alpha ? alpha[r] : T(1));
      for (std::int64_t s = 0; s < ns; ++s) o = fma_scalar(coef[s * cs + r * cr], x[s * x_rs + c0], o);
      out[r * ldo + c0] = o;
    }
  }
}

// out = diag(alpha) out + C X over nrows output rows (see rows_tile for the coefficient layout),
// skipping for each strip of rows the coefficients outside `band` (they are 0; see Visibility).
template <class T>
void accumulate_rows(T* out, std::int64_t ldo, std::int64_t nrows, const T* alpha, const T* coef,
                     std::int64_t cs, std::int64_t cr, const T* x, std::int64_t x_rs, std::int64_t ns,
                     std::int64_t cols, Band band = {}) {
  constexpr int MR = Tiles<T>::MR;
  auto strip = [&](auto rows, std::int64_t r) {
    constexpr int m = decltype(rows)::value;
    const std::int64_t s0 = max_scalar<std::int64_t>(0, band.first + r);
    const std::int64_t s1 = max_scalar(s0, min_scalar(ns, band.last + r + m));  // ns = 0 still scales by alpha
    rows_strip<T, m>(out + r * ldo, ldo, alpha ? alpha + r : nullptr, coef + r * cr + s0 * cs, cs, cr,
                     x + s0 * x_rs, x_rs, s1 - s0, cols);
  };
  std::int64_t r = 0;
  for (; r + MR <= nrows; r += MR) strip(std::integral_constant<int, MR>{}, r);
  for (; r + 2 <= nrows; r += 2) strip(std::integral_constant<int, 2>{}, r);
  for (; r < nrows; ++r) strip(std::integral_constant<int, 1>{}, r);
}

// True when every v[j][c] (j < jn, c < dv) is finite: sum of v * 0 is 0, or NaN.
template <class T>
bool values_finite(const T* v, std::int64_t v_rs, std::int64_t jn, std::int64_t dv) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const V zero = V::zero();
  V acc = zero;
  T tail = T(0);
  for (std::int64_t j = 0; j < jn; ++j) {
    const T* vj = v + j * v_rs;
    std::int64_t c = 0;
    for (; c + W <= dv; c += W) acc = V::fma(V::load(vj + c), zero, acc);
    for (; c < dv; ++c) tail += vj[c] * T(0);
  }
  return acc.reduce_add() + tail == T(0);
}

}  // namespace
}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// One chunk of rows of causal linear attention, shared by its forward and backward kernels
// (included only by cpp/kernels/linear_attention*.cpp, inside the ISA's namespace): the chunk's
// features and values with padded keys zeroed, and the lower-triangular products inside the chunk.
#pragma once
#include <cstdint>

#include "linear_tiles.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {
namespace {

// A chunk's rows [r0, r0 + rows) of batch item b. Keys from kn on are all padded (kn <= rows): the
// products inside the chunk stop there, so trailing padding (key_lengths) costs nothing.
template <class T>
struct CausalChunk {
  const T *pq, *pk, *v;  // phi(q) (rows x D), phi(k) (kn x D), v (kn x dv): padded keys' rows zero
  std::int64_t r0, rows, kn;
};

// Scratch for one chunk's features and values (each kChunk rows).
template <class T>
struct ChunkBuffers {
  T *pq, *pk, *v;
};

// The chunk starting at row r0 of item b (queries false: its keys only). Features go into buf (precomputed
// ones are read in place); the rows of padded keys are zeroed without reading k or v there (a NaN must
// not leak as 0 * NaN).
template <class T>
CausalChunk<T> load_chunk(const CausalLinearArgs<T>& a, std::int64_t b, std::int64_t r0, const ChunkBuffers<T>& buf,
                          bool queries = true) {
  const std::int64_t D = a.D, dv = a.dv, rows = min_scalar(kChunk, a.n - r0);
  const T* q = a.q + (b * a.n + r0) * a.d;
  const T* k = a.k + (b * a.n + r0) * a.d;
  const T* v = a.v + (b * a.n + r0) * dv;
  const std::uint8_t* keep = a.keep ? a.keep + b * a.n + r0 : nullptr;
  CausalChunk<T> c{q, k, v, r0, rows, rows};
  if (queries && a.phi != LinearFeatures::features) {
    row_features(a, q, rows, buf.pq, true);
    c.pq = buf.pq;
  }
  if (keep)
    while (c.kn > 0 && !keep[c.kn - 1]) --c.kn;
  if (!keep || run_end(keep, 0, c.kn) == c.kn) {  // no gap before kn: k and v read in place
    if (a.phi != LinearFeatures::features) {
      row_features(a, k, c.kn, buf.pk, false);
      c.pk = buf.pk;
    }
    return c;
  }
  for (std::int64_t x = 0; x < c.kn * D; ++x) buf.pk[x] = T(0);
  for (std::int64_t x = 0; x < c.kn * dv; ++x) buf.v[x] = T(0);
  for (std::int64_t j = first_kept(keep, 0, c.kn); j < c.kn;) {
    const std::int64_t end = run_end(keep, j, c.kn);
    row_features(a, k + j * a.d, end - j, buf.pk + j * D, false);
    for (std::int64_t x = j * dv; x < end * dv; ++x) buf.v[x] = v[x];
    j = first_kept(keep, end, c.kn);
  }
  c.pk = buf.pk, c.v = buf.v;
  return c;
}

// c (rows x cols, ldc) = the lower triangle (j <= i) of x y for x (rows x k, row i at x + i * ldx) and
// y (k x cols, ldy); zeros above. Row blocks of MR stop at their diagonal, rounded up to a vector.
template <class T>
void lower_product(T* c, std::int64_t ldc, const T* x, std::int64_t ldx, const T* y, std::int64_t ldy,
                   std::int64_t rows, std::int64_t k, std::int64_t cols) {
  constexpr int W = Vec<T>::W, MR = W * sizeof(T) >= 64 ? 8 : 4;
  for (std::int64_t i = 0; i < rows * ldc; ++i) c[i] = T(0);
  std::int64_t i0 = 0;
  for (; i0 + MR <= rows; i0 += MR) {
    const std::int64_t n = min_scalar(cols, (i0 + MR + W - 1) / W * W);
    product_rows<MR>(c + i0 * ldc, ldc, x + i0 * ldx, ldx, 1, y, ldy, k, n);
  }
  for (; i0 < rows; ++i0) product_rows<1>(c + i0 * ldc, ldc, x + i0 * ldx, ldx, 1, y, ldy, k, min_scalar(cols, i0 + 1));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = i + 1; j < cols; ++j) c[i * ldc + j] = T(0);
}

// A = tril(pq pk^T) (rows x kn) for pq (rows x D) and pk (kn x D). Narrow features: pk transposed into
// pkT (D x kn scratch), then register tiles. Wide ones (a polynomial's 1 + d + d^2): one dot per pair,
// reading pk in place; there the strided transpose cost more than the products (measured at D = 1057).
template <class T>
void chunk_scores(T* A, const T* pq, const T* pk, T* pkT, std::int64_t rows, std::int64_t kn, std::int64_t D) {
  constexpr std::int64_t kWide = 256;
  if (D < kWide) {
    transpose(pkT, pk, kn, D);
    return lower_product(A, kn, pq, D, pkT, kn, rows, D, kn);
  }
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < kn; ++j) A[i * kn + j] = j <= i ? dot(pq + i * D, pk + j * D, D) : T(0);
}

// The normaliser of chunk c's row r and whether the guard zeroes the row (see CausalLinearArgs):
// den = phi(q_r).Z_prev + row r of A = tril(phi(Q) phi(K)^T) (rows x kn). zi holds Z of the rows
// before r (Z_prev at r = 0) and is advanced past r.
template <class T>
struct GuardedDen {
  T den;
  bool zeroed;
};
template <class T>
GuardedDen<T> guarded_den(const CausalChunk<T>& c, const T* A, const T* z_prev, T* zi, std::int64_t r,
                          std::int64_t D, T eps) {
  const T* pq = c.pq + r * D;
  T den = dot(pq, z_prev, D);
  for (std::int64_t j = 0; j < min_scalar(r + 1, c.kn); ++j) den += A[r * c.kn + j];
  if (r < c.kn) add_into(zi, c.pk + r * D, D);
  return {den, zeroed_row(den, dot<true>(pq, zi, D), eps)};
}

// c (m x n) += L b, where L (m x k, strides as in tile_product) is zero above its diagonal: the row
// block from i0 reads L's columns r < i0 + MR only, so the triangle costs half the square.
template <class T>
void lower_times(T* c, std::int64_t ldc, const T* l, std::int64_t sl_i, std::int64_t sl_r, const T* b,
                 std::int64_t ldb, std::int64_t m, std::int64_t k, std::int64_t n) {
  constexpr int MR = Vec<T>::W * sizeof(T) >= 64 ? 8 : 4;
  std::int64_t i0 = 0;
  for (; i0 + MR <= m; i0 += MR)
    product_rows<MR>(c + i0 * ldc, ldc, l + i0 * sl_i, sl_i, sl_r, b, ldb, min_scalar(k, i0 + MR), n);
  for (; i0 < m; ++i0) product_rows<1>(c + i0 * ldc, ldc, l + i0 * sl_i, sl_i, sl_r, b, ldb, min_scalar(k, i0 + 1), n);
}

// c (m x n) += U b, where U (m x k) is zero below its diagonal (the transpose of a lower triangle):
// the row block from i0 reads U's columns r >= i0 only.
template <class T>
void upper_times(T* c, std::int64_t ldc, const T* u, std::int64_t su_i, std::int64_t su_r, const T* b,
                 std::int64_t ldb, std::int64_t m, std::int64_t k, std::int64_t n) {
  constexpr int MR = Vec<T>::W * sizeof(T) >= 64 ? 8 : 4;
  std::int64_t i0 = 0;
  for (; i0 + MR <= m && i0 < k; i0 += MR)
    product_rows<MR>(c + i0 * ldc, ldc, u + i0 * (su_i + su_r), su_i, su_r, b + i0 * ldb, ldb, k - i0, n);
  for (; i0 < m && i0 < k; ++i0)
    product_rows<1>(c + i0 * ldc, ldc, u + i0 * (su_i + su_r), su_i, su_r, b + i0 * ldb, ldb, k - i0, n);
}

}  // namespace
}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

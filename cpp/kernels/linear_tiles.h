// Building blocks shared by linear attention's kernels, causal and not, forward and backward
// (included only by cpp/kernels/linear_attention*.cpp, inside the ISA's namespace).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>

#include "aligned_buffer.h"
#include "attnkit/linear_attention.h"
#include "attnkit/simd.h"
#include "attnkit/thread_pool.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {
namespace {

// Rows per chunk: inside a chunk the visible pairs are summed directly, across chunks by the state.
constexpr std::int64_t kChunk = 64;

// o[c] += sum_r coef[r] rows[r * ld + c] for c < dv: blocks of NB vectors kept in registers.
template <class T>
void axpy_rows(T* o, const T* coef, const T* rows, std::int64_t ld, std::int64_t nrows,
                     std::int64_t dv) {
  using V = Vec<T>;
  constexpr int W = V::W, NB = 4;
  std::int64_t c = 0;
  for (; c + NB * W <= dv; c += NB * W) {
    V acc[NB];
#pragma GCC unroll 4
    for (int u = 0; u < NB; ++u) acc[u] = V::load(o + c + u * W);
    for (std::int64_t r = 0; r < nrows; ++r) {
      const V k = V::set1(coef[r]);
      const T* row = rows + r * ld + c;
#pragma GCC unroll 4
      for (int u = 0; u < NB; ++u) acc[u] = V::fma(k, V::load(row + u * W), acc[u]);
    }
#pragma GCC unroll 4
    for (int u = 0; u < NB; ++u) acc[u].store(o + c + u * W);
  }
  for (; c + W <= dv; c += W) {
    V acc = V::load(o + c);
    for (std::int64_t r = 0; r < nrows; ++r) acc = V::fma(V::set1(coef[r]), V::load(rows + r * ld + c), acc);
    acc.store(o + c);
  }
  for (; c < dv; ++c) {
    T acc = o[c];
    for (std::int64_t r = 0; r < nrows; ++r) acc += coef[r] * rows[r * ld + c];
    o[c] = acc;
  }
}

// Linear attention's relative denominator guard (see attnkit/linear_attention.h): true when row i
// gives zeros, den_i <= eps * sum_D |phi_q[i]| |Z_i|. False for a NaN den, which then propagates, and for
// an infinite one (features that overflowed, |q|, |k| ~ 1e19 in float32: inf <= eps * inf held, and the
// row read as zeros, a plausible answer; it now reads NaN).
template <class T>
bool zeroed_row(T den, T mag, T eps) {
  return den <= eps * mag && den < std::numeric_limits<T>::infinity();
}

// Whether phi(x) >= 0 always (elu + 1, relu, FAVOR+'s exp): then Z >= 0 too, and the guard's scale
// |phi(q)|.|Z| is phi(q).Z itself, bit for bit (the same products summed in the same order).
template <class Args>
bool non_negative_features(const Args& a) {
  return a.phi == LinearFeatures::elu || a.phi == LinearFeatures::relu ||
         (a.phi == LinearFeatures::projected && !a.map.sincos);
}

// dst += src: into T for the running Z_i, widened to double for the carried states.
template <class T, class S>
void add_into(T* dst, const S* src, std::int64_t n) {
  for (std::int64_t x = 0; x < n; ++x) dst[x] += T(src[x]);
}

// out[x] = phi(in[x]) for x < n (see LinearFeatures). elu + 1 as exp(min(x, 0)) + max(x, 0): NaN stays
// NaN (min and max return their second operand for a NaN), -inf gives 0, +inf gives inf.
template <class T>
void apply_phi(LinearFeatures phi, const T* in, T* out, std::int64_t n) {
  using V = Vec<T>;
  constexpr int W = V::W;
  std::int64_t x = 0;
  switch (phi) {
    case LinearFeatures::elu:
      for (; x + W <= n; x += W) {
        const V v = V::load(in + x);
        (exp(V::min(V::zero(), v)) + V::max(V::zero(), v)).store(out + x);
      }
      for (; x < n; ++x) out[x] = exp_scalar(min_scalar(T(0), in[x])) + max_scalar(T(0), in[x]);
      return;
    case LinearFeatures::relu:
      for (; x + W <= n; x += W) V::max(V::zero(), V::load(in + x)).store(out + x);
      for (; x < n; ++x) out[x] = max_scalar(T(0), in[x]);
      return;
    case LinearFeatures::features:
      for (; x < n; ++x) out[x] = in[x];
      return;
    case LinearFeatures::projected:  // row maps: see row_features
    case LinearFeatures::polynomial:
      return;
  }
}

// grad[x] *= phi'(in[x]) for x < n: exp(min(x, 0)) for elu + 1 (1 for x > 0), [x > 0] for relu (so a
// non-finite grad at x <= 0 gives NaN, as grad * (x > 0) in NumPy), 1 for precomputed features.
template <class T>
void times_phi_derivative(LinearFeatures phi, const T* in, T* grad, std::int64_t n) {
  using V = Vec<T>;
  constexpr int W = V::W;
  std::int64_t x = 0;
  switch (phi) {
    case LinearFeatures::elu:
      for (; x + W <= n; x += W)
        (V::load(grad + x) * exp(V::min(V::zero(), V::load(in + x)))).store(grad + x);
      for (; x < n; ++x) grad[x] *= exp_scalar(min_scalar(T(0), in[x]));
      return;
    case LinearFeatures::relu:
      for (; x < n; ++x) grad[x] *= T(in[x] > T(0));
      return;
    case LinearFeatures::features:
    case LinearFeatures::projected:  // row maps: see features_backward
    case LinearFeatures::polynomial:
      return;
  }
}

// Rows [i0, i0 + MR) of c += a b over every column: MR x NB vectors of c in registers, each b vector
// loaded once per r for MR rows (axpy_rows loads one per FMA). See tile_product.
template <int MR, class T>
void product_rows(T* c, std::int64_t ldc, const T* a, std::int64_t sa_i, std::int64_t sa_r, const T* b,
                  std::int64_t ldb, std::int64_t k, std::int64_t n) {
  using V = Vec<T>;
  constexpr int W = V::W, NB = 2;
  std::int64_t col = 0;
  for (; col + NB * W <= n; col += NB * W) {
    V acc[MR][NB];
#pragma GCC unroll 8
    for (int u = 0; u < MR; ++u)
      for (int v = 0; v < NB; ++v) acc[u][v] = V::load(c + u * ldc + col + v * W);
    for (std::int64_t r = 0; r < k; ++r) {
      const V b0 = V::load(b + r * ldb + col), b1 = V::load(b + r * ldb + col + W);
#pragma GCC unroll 8
      for (int u = 0; u < MR; ++u) {
        const V x = V::set1(a[u * sa_i + r * sa_r]);
        acc[u][0] = V::fma(x, b0, acc[u][0]);
        acc[u][1] = V::fma(x, b1, acc[u][1]);
      }
    }
#pragma GCC unroll 8
    for (int u = 0; u < MR; ++u)
      for (int v = 0; v < NB; ++v) acc[u][v].store(c + u * ldc + col + v * W);
  }
  for (; col + W <= n; col += W) {
    V acc[MR];
    for (int u = 0; u < MR; ++u) acc[u] = V::load(c + u * ldc + col);
    for (std::int64_t r = 0; r < k; ++r) {
      const V bv = V::load(b + r * ldb + col);
      for (int u = 0; u < MR; ++u) acc[u] = V::fma(V::set1(a[u * sa_i + r * sa_r]), bv, acc[u]);
    }
    for (int u = 0; u < MR; ++u) acc[u].store(c + u * ldc + col);
  }
  if (col == n) return;
  if constexpr (HasMasked<V>::value) {  // the last n - col < W columns: masked vectors, not scalars
    const int count = int(n - col);
    V acc[MR];
    for (int u = 0; u < MR; ++u) acc[u] = load_partial(c + u * ldc + col, count);
    for (std::int64_t r = 0; r < k; ++r) {
      const V bv = load_partial(b + r * ldb + col, count);
      for (int u = 0; u < MR; ++u) acc[u] = V::fma(V::set1(a[u * sa_i + r * sa_r]), bv, acc[u]);
    }
    for (int u = 0; u < MR; ++u) store_partial(acc[u], c + u * ldc + col, count);
  } else {
    for (; col < n; ++col)
      for (int u = 0; u < MR; ++u) {
        T acc = c[u * ldc + col];
        for (std::int64_t r = 0; r < k; ++r) acc += a[u * sa_i + r * sa_r] * b[r * ldb + col];
        c[u * ldc + col] = acc;
      }
  }
}

// c[i * ldc + j] += sum_{r < k} a[i * sa_i + r * sa_r] b[r * ldb + j] for i < m, j < n: a (m x k) or,
// with sa_i = 1, its transpose as stored. Register tiles of MR rows (8 with 32 vector registers).
template <class T>
void tile_product(T* c, std::int64_t ldc, const T* a, std::int64_t sa_i, std::int64_t sa_r, const T* b,
                  std::int64_t ldb, std::int64_t m, std::int64_t k, std::int64_t n) {
  constexpr int MR = Vec<T>::W * sizeof(T) >= 64 ? 8 : 4;
  std::int64_t i = 0;
  for (; i + MR <= m; i += MR) product_rows<MR>(c + i * ldc, ldc, a + i * sa_i, sa_i, sa_r, b, ldb, k, n);
  for (; i < m; ++i) product_rows<1>(c + i * ldc, ldc, a + i * sa_i, sa_i, sa_r, b, ldb, k, n);
}

// prod += A^T B and zsum += A^T w (w null: ones) for A (nrows x D), B (nrows x dv), row-major.
template <class T>
void add_outer_products(T* prod, T* zsum, const T* rows_a, const T* rows_b, const T* w, std::int64_t nrows,
                        std::int64_t D, std::int64_t dv) {
  tile_product(prod, dv, rows_a, 1, D, rows_b, dv, D, nrows, dv);
  for (std::int64_t r = 0; r < nrows; ++r) {
    const T wr = w ? w[r] : T(1);
    for (std::int64_t d = 0; d < D; ++d) zsum[d] += rows_a[r * D + d] * wr;
  }
}

// phi of rows x (rows x d) into out (rows x D) for a projected map (see ProjectedMap): z = x w by
// register tiles into the first m columns of each row, then the row's factor and exp or sin/cos in place.
template <class T>
void projected_features(const ProjectedMap<T>& map, const T* x, std::int64_t rows, std::int64_t d, T* out,
                        bool query) {
  using V = Vec<T>;
  const std::int64_t m = map.m, D = map.sincos ? 2 * m : m;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < m; ++j) out[r * D + j] = T(0);
  tile_product(out, D, x, d, 1, map.w, m, rows, d, m);
  const T norm = query ? map.query_norm : map.key_norm;
  for (std::int64_t r = 0; r < rows; ++r) {
    T* o = out + r * D;
    T row_log = norm != T(0) ? norm * dot(x + r * d, x + r * d, d) : T(0);
    if (query && map.query_max) {  // -max_j z; NaN if any z is NaN or infinite (z * 0 is NaN there)
      V top = V::set1(o[0]), finite = V::zero();
      std::int64_t j = 0;
      for (; j + V::W <= m; j += V::W) {
        const V z = V::load(o + j);
        top = V::max(top, z);
        finite = V::fma(z, V::zero(), finite);
      }
      T top_s = top.reduce_max(), finite_s = finite.reduce_add();
      for (; j < m; ++j) top_s = max_scalar(top_s, o[j]), finite_s += o[j] * T(0);
      row_log = -(top_s + finite_s);
    }
    if (!map.sincos) {
      const V log = V::set1(row_log), scale = V::set1(map.scale);
      for_each_lane<T>(m, [&](std::int64_t j, int count) {
        store_partial(exp(load_partial(o + j, count) + log) * scale, o + j, count);
      });
      continue;
    }
    const V scale = V::set1(map.scale * exp_scalar(row_log));
    for_each_lane<T>(m, [&](std::int64_t j, int count) {
      V s, c;
      sincos(load_partial(o + j, count), s, c);
      store_partial(s * scale, o + j, count);
      store_partial(c * scale, o + m + j, count);
    });
  }
}

// dx (rows x d) = the gradient of sum(phi(x) * dphi) for a projected map, from phi (rows x D) as
// projected_features gave it; dphi (rows x D) is overwritten. Through z: h W^T with h = dphi * phi
// (exp) or dphi_sin * phi_cos - dphi_cos * phi_sin (sincos); through r = norm |x|^2: 2 norm (dphi . phi) x.
template <class T>
void projected_backward(const ProjectedMap<T>& map, const T* x, std::int64_t rows, std::int64_t d, const T* phi,
                        T* dphi, T* dx, bool query) {
  const std::int64_t m = map.m, D = map.sincos ? 2 * m : m;
  const T norm = query ? (map.query_max ? T(0) : map.query_norm) : map.key_norm;
  for (std::int64_t r = 0; r < rows; ++r) {
    T* g = dphi + r * D;
    const T* p = phi + r * D;
    const T through_norm = norm != T(0) ? T(2) * norm * dot(g, p, D) : T(0);
    if (map.sincos)
      for (std::int64_t j = 0; j < m; ++j) g[j] = g[j] * p[m + j] - g[m + j] * p[j];
    else
      for (std::int64_t j = 0; j < m; ++j) g[j] *= p[j];
    for (std::int64_t c = 0; c < d; ++c) dx[r * d + c] = through_norm * x[r * d + c];
  }
  tile_product(dx, d, dphi, D, 1, map.wt, d, rows, m, d);
}

// phi of rows x (rows x d) into out (rows x D) for the polynomial map (see PolynomialMap); each
// product rounded as the NumPy map rounds it, c_i (x_i x_j).
template <class T>
void polynomial_features(const PolynomialMap<T>& map, const T* x, std::int64_t rows, std::int64_t d, T* out) {
  const std::int64_t D = 1 + d + (map.degree == 2 ? d * d : 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    T* o = out + r * D;
    o[0] = map.c0;
    for (std::int64_t c = 0; c < d; ++c) o[1 + c] = map.c1 * xr[c];
    if (map.degree != 2) continue;
    for (std::int64_t i = 0; i < d; ++i) {
      T* oi = o + 1 + d + i * d;
      for (std::int64_t j = 0; j < d; ++j) oi[j] = map.c2 * (xr[i] * xr[j]);
    }
  }
}

// dx (rows x d) = the gradient of sum(phi(x) * dphi) for the polynomial map: c1 g1 + c2 (G + G^T) x,
// with g1 and G (d x d) the blocks of dphi.
template <class T>
void polynomial_backward(const PolynomialMap<T>& map, const T* x, std::int64_t rows, std::int64_t d, const T* dphi,
                         T* dx) {
  const std::int64_t D = 1 + d + (map.degree == 2 ? d * d : 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    const T* g = dphi + r * D;
    T* o = dx + r * d;
    for (std::int64_t c = 0; c < d; ++c) o[c] = map.c1 * g[1 + c];
    if (map.degree != 2) continue;
    const T* G = g + 1 + d;
    for (std::int64_t c = 0; c < d; ++c) o[c] += map.c2 * dot(G + c * d, xr, d);  // G x
    for (std::int64_t j = 0; j < d; ++j) {  // + G^T x, row by row
      const T xj = map.c2 * xr[j];
      for (std::int64_t c = 0; c < d; ++c) o[c] += xj * G[j * d + c];
    }
  }
}

// Whether phi maps whole rows (d != D in general): its dphi then goes to scratch, not into dq, dk.
inline bool row_map(LinearFeatures phi) {
  return phi == LinearFeatures::projected || phi == LinearFeatures::polynomial;
}

// phi of rows x (rows x a.d) into out (rows x a.D), for queries or keys (see LinearFeatures); Args:
// LinearArgs or CausalLinearArgs.
template <class Args, class T>
void row_features(const Args& a, const T* x, std::int64_t rows, T* out, bool query) {
  if (a.phi == LinearFeatures::projected) return projected_features(a.map, x, rows, a.d, out, query);
  if (a.phi == LinearFeatures::polynomial) return polynomial_features(a.poly, x, rows, a.d, out);
  apply_phi(a.phi, x, out, rows * a.D);
}

// dx (rows x a.d) from dphi (rows x a.D) and the rows' features phi. For elementwise maps dphi is dx
// itself (d = D), scaled in place by phi's derivative; for row maps (projected, polynomial) it is
// scratch, which projected maps overwrite.
template <class Args, class T>
void features_backward(const Args& a, const T* x, std::int64_t rows, const T* phi, T* dphi, T* dx, bool query) {
  if (a.phi == LinearFeatures::projected) return projected_backward(a.map, x, rows, a.d, phi, dphi, dx, query);
  if (a.phi == LinearFeatures::polynomial) return polynomial_backward(a.poly, x, rows, a.d, dphi, dx);
  times_phi_derivative(a.phi, x, dx, rows * a.D);
}

// The first real key in [j, end) (end if none) and the end of the run of real keys from j, for keep
// bytes (nonzero = real key; null: all are).
inline std::int64_t first_kept(const std::uint8_t* keep, std::int64_t j, std::int64_t end) {
  if (keep)
    while (j < end && !keep[j]) ++j;
  return j;
}
inline std::int64_t run_end(const std::uint8_t* keep, std::int64_t j, std::int64_t end) {
  if (!keep) return end;
  while (j < end && keep[j]) ++j;
  return j;
}

// out (cols x rows) = in^T for in (rows x cols), both T.
template <class T>
void transpose(T* out, const T* in, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

template <class T>
std::unique_ptr<T, FreeDeleter> allocate(std::size_t count) {
  void* p = std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64 + 64);
  if (!p) throw std::bad_alloc();
  return std::unique_ptr<T, FreeDeleter>(static_cast<T*>(p));
}

// Whether batch items split evenly enough over the threads (at most one item of imbalance in eight)
// for each thread to take whole items, both passes of a kernel, in one parallel region (see for_each_item).
inline bool whole_items(std::int64_t batch, int threads) {
  return batch % threads == 0 || batch >= 8 * std::int64_t(threads);
}

// Runs item(b, acc, t) for every batch item, whole items per thread (static): acc is thread t's slot of
// width doubles, zeroed for each item. One parallel region, where two passes over all items would take
// two, each waking the sleeping workers.
template <class Item>
void for_each_item(std::int64_t batch, std::int64_t width, int max_threads, Item item) {
  auto slots = allocate<double>(std::size_t(max_threads * width));
  static_loop(max_threads, batch, [&](std::int64_t b, int t) {
    double* acc = slots.get() + std::int64_t(t) * width;
    for (std::int64_t x = 0; x < width; ++x) acc[x] = 0.0;
    item(b, acc, t);
  });
}

// Runs sum(b, r0, r1, acc, t) (thread t adds batch item b's rows [r0, r1) into the double sums acc,
// width of them, zeroed first) over every item's rows [0, n), then finish(b, total) on each item's
// total. With fewer items than threads, an item's rows are cut into segments (whole chunks) summed on
// separate threads, each into its own slot, and added in segment order: the totals do not depend on
// which thread ran which. With one segment, one slot per thread and finish runs on that thread.
template <class Sum, class Finish>
void segmented_sums(std::int64_t batch, std::int64_t n, std::int64_t width, int max_threads, Sum sum,
                    Finish finish) {
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  const std::int64_t nseg = batch >= max_threads ? 1 : max_scalar<std::int64_t>(
      1, min_scalar<std::int64_t>(chunks, (max_threads + batch - 1) / batch));
  const std::int64_t tasks = batch * nseg;
  auto slots = allocate<double>(std::size_t((nseg == 1 ? max_threads : tasks) * width));
  auto seg_begin = [&](std::int64_t s) { return min_scalar(n, s * chunks / nseg * kChunk); };
  const int threads = int(min_scalar<std::int64_t>(max_threads, tasks));
  static_loop(threads, tasks, [&](std::int64_t task, int t) {
    const std::int64_t b = task / nseg, s = task % nseg;
    double* acc = slots.get() + (nseg == 1 ? t : task) * width;
    for (std::int64_t x = 0; x < width; ++x) acc[x] = 0.0;
    sum(b, seg_begin(s), seg_begin(s + 1), acc, t);
    if (nseg == 1) finish(b, acc);
  });
  if (nseg == 1) return;
  for (std::int64_t b = 0; b < batch; ++b) {
    double* total = slots.get() + b * nseg * width;
    for (std::int64_t s = 1; s < nseg; ++s) add_into(total, total + s * width, width);
    finish(b, total);
  }
}

}  // namespace
}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

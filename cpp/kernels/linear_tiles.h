// Building blocks shared by linear attention's kernels, causal and not, forward and backward
// (included only by cpp/kernels/linear_attention*.cpp, inside the ISA's namespace).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include <omp.h>

#include "aligned_buffer.h"
#include "attnkit/linear_attention.h"
#include "attnkit/simd.h"

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

// sum_i x[i] y[i]; with Abs, sum_i |x[i]| |y[i]| (the scale the denominator guard compares with).
template <bool Abs = false, class T>
T dot(const T* x, const T* y, std::int64_t n) {
  using V = Vec<T>;
  constexpr int W = V::W;
  auto load = [](const T* p) {
    if constexpr (Abs) return V::abs(V::load(p));
    else return V::load(p);
  };
  V a0 = V::zero(), a1 = V::zero();
  std::int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    a0 = V::fma(load(x + i), load(y + i), a0);
    a1 = V::fma(load(x + i + W), load(y + i + W), a1);
  }
  for (; i + W <= n; i += W) a0 = V::fma(load(x + i), load(y + i), a0);
  T s = (a0 + a1).reduce_add();
  for (; i < n; ++i) s += Abs ? std::abs(x[i]) * std::abs(y[i]) : x[i] * y[i];
  return s;
}

// Linear attention's relative denominator guard (see attnkit/linear_attention.h): true when row i
// gives zeros, den_i <= eps * sum_D |phi_q[i]| |Z_i|. False for a NaN den, which then propagates.
template <class T>
bool zeroed_row(T den, T mag, T eps) {
  return den <= eps * mag;
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
  for (; col < n; ++col)
    for (int u = 0; u < MR; ++u) {
      T acc = c[u * ldc + col];
      for (std::int64_t r = 0; r < k; ++r) acc += a[u * sa_i + r * sa_r] * b[r * ldb + col];
      c[u * ldc + col] = acc;
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
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t task = 0; task < tasks; ++task) {
    const int t = omp_get_thread_num();
    const std::int64_t b = task / nseg, s = task % nseg;
    double* acc = slots.get() + (nseg == 1 ? t : task) * width;
    for (std::int64_t x = 0; x < width; ++x) acc[x] = 0.0;
    sum(b, seg_begin(s), seg_begin(s + 1), acc, t);
    if (nseg == 1) finish(b, acc);
  }
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

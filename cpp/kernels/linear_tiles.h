// Building blocks shared by linear attention's kernels, causal and not, forward and backward
// (included only by cpp/kernels/linear_attention*.cpp, inside the ISA's namespace).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

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

// acc[d * dv + c] += sum_r rows_a[r * D + d] rows_b[r * dv + c] in double, via a T product of the
// nrows (<= kChunk) rows: acc += A^T B for A (nrows x D), B (nrows x dv). Also zacc[d] += sum_r
// rows_a[r * D + d] w[r] (w null: 1). coef and prod are scratch of kChunk and D * dv.
template <class T>
void add_outer_sums(double* acc, double* zacc, const T* rows_a, const T* rows_b, const T* w,
                    std::int64_t nrows, std::int64_t D, std::int64_t dv, T* coef, T* prod) {
  for (std::int64_t x = 0; x < D * dv; ++x) prod[x] = T(0);
  for (std::int64_t d = 0; d < D; ++d) {
    T z = T(0);
    for (std::int64_t r = 0; r < nrows; ++r) {
      coef[r] = rows_a[r * D + d];
      z += w ? coef[r] * w[r] : coef[r];
    }
    zacc[d] += double(z);
    axpy_rows(prod + d * dv, coef, rows_b, dv, nrows, dv);
  }
  add_into(acc, prod, D * dv);
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

}  // namespace
}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

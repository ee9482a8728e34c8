// Fused random-feature transforms (see attnkit/random_features.h). Either the projections z = x W
// come precomputed (a BLAS matmul in the op layer) and one sweep adds the offsets, applies
// sin/cos/exp with SIMD and scales; or z is computed here, MR rows x NV vectors of columns in
// registers, and each block of rows goes through the same sweep while it is still in L1: z never
// makes the round trip through memory, and there is no hand-off between BLAS's threads and attnkit's.
#include <cmath>
#include <vector>

#include "attention_tiles.h"
#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

// The per-row factors of row i: e^{row_log} goes into the scale for cos/sincos, into the exponent
// for exp (where it keeps large exponents from overflowing before the factor applies).
template <class T>
struct RowFactors {
  Vec<T> log, scale;
  RowFactors(const RandomFeaturesArgs<T>& a, std::int64_t i) {
    const T row_log = a.row_log ? a.row_log[i] : T(0);
    log = Vec<T>::set1(row_log);
    scale = Vec<T>::set1(a.kind == FeatureKind::exp ? a.scale : a.scale * exp_scalar(row_log));
  }
};

// Features of columns j.. j + count of one row from its projections z (offset not yet added).
template <class T>
inline void finish(const RandomFeaturesArgs<T>& a, const RowFactors<T>& row, Vec<T> z, T* out_row,
                   std::int64_t j, int count) {
  using V = Vec<T>;
  if (a.offset) z = z + load_partial(a.offset + j, count);
  if (a.kind == FeatureKind::exp) return store_partial(exp(z + row.log) * row.scale, out_row + j, count);
  V s, c;
  if (a.bounded)
    sincos<false>(z, s, c);
  else
    sincos<true>(z, s, c);
  if (a.kind == FeatureKind::sincos) {
    store_partial(s * row.scale, out_row + j, count);
    return store_partial(c * row.scale, out_row + a.D + j, count);
  }
  store_partial(c * row.scale, out_row + j, count);
}

template <class T>
std::int64_t out_width(const RandomFeaturesArgs<T>& a) {
  return a.kind == FeatureKind::sincos ? 2 * a.D : a.D;
}

template <class T>
void features_row(const RandomFeaturesArgs<T>& a, std::int64_t i) {
  const RowFactors<T> row(a, i);
  const T* z = a.z + i * a.D;
  T* out = a.out + i * out_width(a);
  for_each_lane<T>(a.D, [&](std::int64_t j, int count) { finish(a, row, load_partial(z + j, count), out, j, count); });
}

// Columns per packed panel of w: the register tile's width.
template <class T>
constexpr int kPanel = Tiles<T>::NV * Tiles<T>::W;

// wp[p][s][u] = w[s][p kPanel + u], zero past column D: each tile then streams one contiguous panel.
template <class T>
void pack_panels(const RandomFeaturesArgs<T>& a, T* wp, std::int64_t panels, int threads) {
  constexpr int P = kPanel<T>;
  static_loop(threads, panels, [&](std::int64_t p, int) {
    T* dst = wp + p * a.f * P;
    const std::int64_t c0 = p * P, cols = min_scalar<std::int64_t>(P, a.D - c0);
    for (std::int64_t s = 0; s < a.f; ++s) {
      for (std::int64_t u = 0; u < cols; ++u) dst[s * P + u] = a.w[s * a.D + c0 + u];
      for (std::int64_t u = cols; u < P; ++u) dst[s * P + u] = T(0);
    }
  });
}

// z of MR rows (i0..) x one panel (columns c0..) in registers, stored raw into those rows of out.
template <class T, int MR>
inline void projected_tile(const RandomFeaturesArgs<T>& a, const T* panel, std::int64_t i0, std::int64_t c0) {
  using V = Vec<T>;
  constexpr int W = V::W, NV = Tiles<T>::NV;
  V acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int u = 0; u < NV; ++u) acc[r][u] = V::zero();
  const T* x = a.x + i0 * a.f;
  for (std::int64_t s = 0; s < a.f; ++s) {
    V wv[NV];
#pragma GCC unroll 4
    for (int u = 0; u < NV; ++u) wv[u] = V::load(panel + s * NV * W + u * W);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const V xb = V::set1(x[r * a.f + s]);
#pragma GCC unroll 4
      for (int u = 0; u < NV; ++u) acc[r][u] = V::fma(xb, wv[u], acc[r][u]);
    }
  }
  const std::int64_t width = out_width(a);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int u = 0; u < NV; ++u) {
      const std::int64_t j = c0 + u * W;
      if (j + W <= a.D) acc[r][u].store(a.out + (i0 + r) * width + j);
      else if (j < a.D) store_partial(acc[r][u], a.out + (i0 + r) * width + j, int(a.D - j));
    }
}

// Bound on |x_i . w_j + offset_j| by Cauchy-Schwarz, |x_i| max_j |w_j| + max_j |offset_j|: this is
// max_j |w_j| and max_j |offset_j| (O(f D) once); each tile of rows adds its own max |x_i| (O(rows f),
// on rows about to be projected anyway). NaN or inf anywhere gives a NaN/inf bound: not bounded.
struct ArgumentBound {
  double w_norm = 0, offset = 0;
};

template <class T>
ArgumentBound argument_bound(const RandomFeaturesArgs<T>& a) {
  std::vector<double> cols(static_cast<std::size_t>(a.D), 0.0);
  for (std::int64_t k = 0; k < a.f; ++k)
    for (std::int64_t j = 0; j < a.D; ++j) cols[j] += double(a.w[k * a.D + j]) * double(a.w[k * a.D + j]);
  ArgumentBound b;
  for (double s : cols) b.w_norm = s > b.w_norm || s != s ? s : b.w_norm;
  b.w_norm = std::sqrt(b.w_norm);
  if (a.offset)
    for (std::int64_t j = 0; j < a.D; ++j) {
      const double o = std::fabs(double(a.offset[j]));
      b.offset = o > b.offset || o != o ? o : b.offset;
    }
  return b;
}

// Whether every argument of rows [begin, end) is within sincos's exact range (with a 2x margin for
// rounding in z): |x_i . w_j| <= sqrt(f) max|x_ik| |w_j|. One vector max per W entries of the
// tile's rows (a row-norm loop, not vectorised without -ffast-math, cost 2-3% of the transform).
template <class T>
bool rows_bounded(const RandomFeaturesArgs<T>& a, const ArgumentBound& b, std::int64_t begin, std::int64_t end) {
  using V = Vec<T>;
  if (a.kind == FeatureKind::exp) return false;
  V largest = V::zero();
  for_each_lane<T>((end - begin) * a.f, [&](std::int64_t k, int count) {
    largest = V::max(largest, V::abs(load_partial(a.x + begin * a.f + k, count)));  // keeps NaN
  });
  const double bound = std::sqrt(double(a.f)) * double(largest.reduce_max()) * b.w_norm + b.offset;
  return bound <= 0.5 * double(TrigConst<T>::max_arg);  // false for NaN
}

// Rows [begin, end) against every panel: panels in chunks that stay in L2 while a tile of rows goes
// by, the tile small enough that its whole output (every chunk) is written while still close in
// memory (chunk-outer over all rows made wide outputs 20% slower than BLAS + sweep at D = 4096).
// Each MR-row block's raw z (a few KB, still in L1) then goes through the epilogue in place: one
// tight vector loop, as fast as the precomputed-z sweep, instead of sin/cos inside the tile.
template <class T>
void projected_rows(const RandomFeaturesArgs<T>& args, const ArgumentBound& bound, const T* wp, std::int64_t panels,
                    std::int64_t begin, std::int64_t end) {
  constexpr int MR = Tiles<T>::MR, P = kPanel<T>, W = Vec<T>::W;
  constexpr std::int64_t kTileRows = 16 * MR;
  const std::int64_t panel_bytes = max_scalar<std::int64_t>(1, args.f) * P * std::int64_t(sizeof(T));
  const std::int64_t chunk = max_scalar<std::int64_t>(1, (std::int64_t(1) << 17) / panel_bytes);
  const std::int64_t width = out_width(args);
  for (std::int64_t t0 = begin; t0 < end; t0 += kTileRows) {
    const std::int64_t t1 = min_scalar(end, t0 + kTileRows);
    RandomFeaturesArgs<T> a = args;
    a.bounded = rows_bounded(args, bound, t0, t1);
    for (std::int64_t p0 = 0; p0 < panels; p0 += chunk) {
      const std::int64_t p1 = min_scalar(panels, p0 + chunk);
      const std::int64_t j0 = p0 * P, j1 = min_scalar(a.D, p1 * P);
      for (std::int64_t i = t0; i < t1; i += MR) {
        const std::int64_t rows = min_scalar<std::int64_t>(MR, t1 - i);
        if (rows == MR)
          for (std::int64_t p = p0; p < p1; ++p) projected_tile<T, MR>(a, wp + p * a.f * P, i, p * P);
        else
          for (std::int64_t r = i; r < t1; ++r)
            for (std::int64_t p = p0; p < p1; ++p) projected_tile<T, 1>(a, wp + p * a.f * P, r, p * P);
        for (std::int64_t r = i; r < i + rows; ++r) {
          const RowFactors<T> row(a, r);
          T* out = a.out + r * width;
          for (std::int64_t j = j0; j < j1; j += W)
            finish(a, row, load_partial(out + j, int(min_scalar<std::int64_t>(W, j1 - j))), out, j,
                   int(min_scalar<std::int64_t>(W, j1 - j)));
        }
      }
    }
  }
}

template <class T>
void projected_features(const RandomFeaturesArgs<T>& a) {
  constexpr int MR = Tiles<T>::MR, P = kPanel<T>;
  const ArgumentBound bound = argument_bound(a);
  const std::int64_t panels = (a.D + P - 1) / P;
  auto wp = aligned_buffer<T>(panels * a.f * P);
  const std::int64_t blocks = (a.n + MR - 1) / MR;
  const int threads = a.n * a.D * (a.f + 16) >= (1 << 18) ? kernel_threads() : 1;
  pack_panels(a, wp.get(), panels, threads);
  // Contiguous runs of row blocks per thread: each thread walks the panels chunk by chunk.
  team(threads, [&](int t, int nt) {
    const std::int64_t b0 = blocks * t / nt, b1 = blocks * (t + 1) / nt;
    projected_rows(a, bound, wp.get(), panels, b0 * MR, min_scalar(a.n, b1 * MR));
  });
}

}  // namespace

template <class T>
void random_features(const RandomFeaturesArgs<T>& a) {
  if (!a.z) return projected_features(a);
  const std::int64_t n = a.n;
  const int threads = n * a.D >= (1 << 15) ? kernel_threads() : 1;
  static_loop(threads, n, [&](std::int64_t i, int) { features_row(a, i); });
}

template void random_features<float>(const RandomFeaturesArgs<float>&);
template void random_features<double>(const RandomFeaturesArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// Layer normalisation forward (see attnkit/layer_norm.h). Per row: mean, then the variance as the
// mean of squared deviations (two passes: exact for rows far from zero, where E[x^2] - mean^2 would
// cancel), then the normalised, scaled and shifted output; rows in parallel. RMS normalisation is the
// same with the mean pass skipped and the mean taken as 0.
#include <cmath>

#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
T row_mean(const T* x, std::int64_t n) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V acc0 = V::zero(), acc1 = V::zero();
  std::int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    acc0 = acc0 + V::load(x + j);
    acc1 = acc1 + V::load(x + j + W);
  }
  for (; j + W <= n; j += W) acc0 = acc0 + V::load(x + j);
  T sum = (acc0 + acc1).reduce_add();
  for (; j < n; ++j) sum += x[j];
  return sum / T(n);
}

template <class T>
void layer_norm_row(const LayerNormArgs<T>& a, std::int64_t r) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const std::int64_t n = a.n;
  const T* x = a.x + r * n;
  T* y = a.y + r * n;

  const T mean = a.rms ? T(0) : row_mean(x, n);
  const V vmean = V::set1(mean);
  V acc0 = V::zero(), acc1 = V::zero();
  std::int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    const V d0 = V::load(x + j) - vmean, d1 = V::load(x + j + W) - vmean;
    acc0 = V::fma(d0, d0, acc0);
    acc1 = V::fma(d1, d1, acc1);
  }
  for (; j + W <= n; j += W) {
    const V d = V::load(x + j) - vmean;
    acc0 = V::fma(d, d, acc0);
  }
  T ss = (acc0 + acc1).reduce_add();
  for (; j < n; ++j) ss += (x[j] - mean) * (x[j] - mean);
  const T rstd = T(1) / std::sqrt(ss / T(n) + a.eps);
  if (a.mean) a.mean[r] = mean;
  if (a.rstd) a.rstd[r] = rstd;

  const V vrstd = V::set1(rstd);
  const T* gamma = a.gamma;
  const T* beta = a.beta;
  for (j = 0; j + W <= n; j += W) {
    const V g = gamma ? V::load(gamma + j) * vrstd : vrstd;
    const V b = beta ? V::load(beta + j) : V::zero();
    V::fma(V::load(x + j) - vmean, g, b).store(y + j);
  }
  for (; j < n; ++j) y[j] = (x[j] - mean) * (gamma ? gamma[j] * rstd : rstd) + (beta ? beta[j] : T(0));
}

}  // namespace

template <class T>
void layer_norm(const LayerNormArgs<T>& a) {
  const std::int64_t rows = a.rows, n = a.n;
  const int threads = elementwise_threads(rows * n);
  const std::int64_t chunk = row_chunk(n);  // rows handed out as threads come (see row_chunk)
  claim_loop(threads, rows, chunk, [&](std::int64_t r, int) { layer_norm_row(a, r); });
}

template void layer_norm<float>(const LayerNormArgs<float>&);
template void layer_norm<double>(const LayerNormArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

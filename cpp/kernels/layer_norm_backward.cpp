// Layer normalisation backward (see attnkit/layer_norm.h). The rows are split into contiguous chunks
// whose number depends on the size alone (kParamChunks where threads may share the work, else one); each
// chunk adds its rows' dy xhat and dy into its own (dgamma, dbeta) partial, and the partials are summed in
// chunk order after the parallel loop: no atomics, and the same bits whatever the thread count (a fit with
// n_jobs=1 and with n_jobs=2 gives the same model; with a chunk per thread, only the norms' gradients differed).
#include <algorithm>
#include <vector>

#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

// dx of row r; adds dy xhat into pgamma and dy into pbeta when they are given.
template <class T>
void layer_norm_backward_row(const LayerNormBackwardArgs<T>& a, std::int64_t r, T* pgamma, T* pbeta) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const std::int64_t n = a.n;
  const T* x = a.x + r * n;
  const T* dy = a.dy + r * n;
  const T* gamma = a.gamma;
  T* dx = a.dx + r * n;
  const T mean = a.rms ? T(0) : a.mean[r], rstd = a.rstd[r];
  const V vmean = V::set1(mean), vrstd = V::set1(rstd);

  V acc_g = V::zero(), acc_gx = V::zero();
  std::int64_t j = 0;
  for (; j + W <= n; j += W) {
    const V xhat = (V::load(x + j) - vmean) * vrstd;
    const V d = V::load(dy + j);
    const V g = gamma ? d * V::load(gamma + j) : d;
    acc_g = acc_g + g;
    acc_gx = V::fma(g, xhat, acc_gx);
    if (pgamma) {
      V::fma(d, xhat, V::load(pgamma + j)).store(pgamma + j);
      (V::load(pbeta + j) + d).store(pbeta + j);
    }
  }
  T sum_g = acc_g.reduce_add(), sum_gx = acc_gx.reduce_add();
  for (; j < n; ++j) {
    const T xhat = (x[j] - mean) * rstd;
    const T g = gamma ? dy[j] * gamma[j] : dy[j];
    sum_g += g;
    sum_gx += g * xhat;
    if (pgamma) {
      pgamma[j] += dy[j] * xhat;
      pbeta[j] += dy[j];
    }
  }

  // dx = rstd g - rstd mean(g) - xhat rstd mean(g xhat); RMS normalisation has no mean(g) term
  const T shift = a.rms ? T(0) : -rstd * sum_g / T(n), slope = -rstd * sum_gx / T(n);
  const V vshift = V::set1(shift), vslope = V::set1(slope);
  for (j = 0; j + W <= n; j += W) {
    const V xhat = (V::load(x + j) - vmean) * vrstd;
    const V d = V::load(dy + j);
    const V g = gamma ? d * V::load(gamma + j) : d;
    V::fma(g, vrstd, V::fma(xhat, vslope, vshift)).store(dx + j);
  }
  for (; j < n; ++j) {
    const T xhat = (x[j] - mean) * rstd;
    const T g = gamma ? dy[j] * gamma[j] : dy[j];
    dx[j] = g * rstd + (xhat * slope + shift);
  }
}

// Row chunks (partials of dgamma and dbeta) of a call large enough for threads: enough for 32 threads to share.
constexpr std::int64_t kParamChunks = 32;

}  // namespace

template <class T>
void layer_norm_backward(const LayerNormBackwardArgs<T>& a) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const std::int64_t rows = a.rows, n = a.n;
  const bool params = a.dgamma || a.dbeta;
  const int threads = elementwise_threads(rows * n);
  const std::int64_t chunks =
      std::max<std::int64_t>(1, std::min<std::int64_t>(rows, rows * n >= kElementwiseParallel ? kParamChunks : 1));
  std::vector<T> partial(params ? std::size_t(2 * chunks * n) : 0, T(0));  // [chunk][gamma, beta][n]
  claim_loop(threads, chunks, 1, [&](std::int64_t c, int) {
    T* pgamma = params ? partial.data() + 2 * c * n : nullptr;
    T* pbeta = params ? pgamma + n : nullptr;
    const std::int64_t first = rows * c / chunks, last = rows * (c + 1) / chunks;
    for (std::int64_t r = first; r < last; ++r) layer_norm_backward_row(a, r, pgamma, pbeta);
  });
  if (!params) return;
  for (int which = 0; which < 2; ++which) {
    T* out = which == 0 ? a.dgamma : a.dbeta;
    if (!out) continue;
    const T* p = partial.data() + which * n;
    std::int64_t j = 0;
    for (; j + W <= n; j += W) V::load(p + j).store(out + j);
    for (; j < n; ++j) out[j] = p[j];
    for (std::int64_t c = 1; c < chunks; ++c) {
      p += 2 * n;
      for (j = 0; j + W <= n; j += W) (V::load(out + j) + V::load(p + j)).store(out + j);
      for (; j < n; ++j) out[j] += p[j];
    }
  }
}

template void layer_norm_backward<float>(const LayerNormBackwardArgs<float>&);
template void layer_norm_backward<double>(const LayerNormBackwardArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

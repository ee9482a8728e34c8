// Backward of the row-wise softmax / log_softmax (see attnkit/softmax.h): one pass for the row's
// reduction, one for dx; rows in parallel when there is enough work to pay for the threads.
#include <limits>

#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

// dx = y * (dy - sum_j dy_j y_j). A row with y all zero (all -inf input) gets dx = 0 unaided.
template <class T>
void softmax_backward_row(const T* y, const T* dy, T* dx, std::int64_t n) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V acc0 = V::zero(), acc1 = V::zero();  // two accumulators hide the FMA latency
  std::int64_t j = 0;
  for (; j + 2 * W <= n; j += 2 * W) {
    acc0 = V::fma(V::load(dy + j), V::load(y + j), acc0);
    acc1 = V::fma(V::load(dy + j + W), V::load(y + j + W), acc1);
  }
  for (; j + W <= n; j += W) acc0 = V::fma(V::load(dy + j), V::load(y + j), acc0);
  T dot = (acc0 + acc1).reduce_add();
  for (; j < n; ++j) dot += dy[j] * y[j];
  const V vdot = V::set1(dot);
  for (j = 0; j + W <= n; j += W) (V::load(y + j) * (V::load(dy + j) - vdot)).store(dx + j);
  for (; j < n; ++j) dx[j] = y[j] * (dy[j] - dot);
}

// dx = dy - exp(y) * sum_j dy_j. A row with y all -inf (all -inf input) is constant: dx = 0.
template <class T>
void log_softmax_backward_row(const T* y, const T* dy, T* dx, std::int64_t n) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  V acc = V::zero(), vmax = V::set1(neg_inf);
  std::int64_t j = 0;
  for (; j + W <= n; j += W) {
    acc = acc + V::load(dy + j);
    vmax = V::max(vmax, V::load(y + j));
  }
  T sum = acc.reduce_add(), m = vmax.reduce_max();
  for (; j < n; ++j) {
    sum += dy[j];
    m = max_scalar(m, y[j]);
  }
  if (m == neg_inf) {
    for (j = 0; j < n; ++j) dx[j] = T(0);
    return;
  }
  const V vsum = V::set1(sum);
  for (j = 0; j + W <= n; j += W) (V::load(dy + j) - exp(V::load(y + j)) * vsum).store(dx + j);
  for (; j < n; ++j) dx[j] = dy[j] - exp_scalar(y[j]) * sum;
}

}  // namespace

template <class T>
void softmax_backward(const SoftmaxBackwardArgs<T>& a) {
  const std::int64_t rows = a.rows, n = a.n;
  const T* y = a.y;
  const T* dy = a.dy;
  T* dx = a.dx;
  const bool log = a.log;
  const int threads = elementwise_threads(rows * n);
  const std::int64_t chunk = row_chunk(n);  // rows handed out as threads come (see row_chunk)
  claim_loop(threads, rows, chunk, [&](std::int64_t r, int) {
    if (log)
      log_softmax_backward_row(y + r * n, dy + r * n, dx + r * n, n);
    else
      softmax_backward_row(y + r * n, dy + r * n, dx + r * n, n);
  });
}

template void softmax_backward<float>(const SoftmaxBackwardArgs<float>&);
template void softmax_backward<double>(const SoftmaxBackwardArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// Optimiser kernels (see attnkit/optim.h): a fused AdamW update and a float64 sum of squares.
// This file is compiled with -ffp-contract=off (CMakeLists.txt): the AdamW update must give the bits of
// the NumPy sequence of in-place operations it replaces, so no multiply-add may become one FMA.
#include <algorithm>
#include <vector>

#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

constexpr std::int64_t kBlock = 1 << 12;  // elements per parallel work item

template <class T>
void adamw_lanes(const AdamWArgs<T>& a, std::int64_t i, int w) {
  using V = Vec<T>;
  V p = load_partial(a.param + i, w);
  V g = load_partial(a.grad + i, w);
  if (a.scaled) g = g * V::set1(a.grad_scale);
  if (a.zero_grad) store_partial(V::zero(), a.grad + i, w);
  V m = load_partial(a.exp_avg + i, w);
  V v = load_partial(a.exp_avg_sq + i, w);
  if (a.decay) p = p * V::set1(a.shrink);
  m = m * V::set1(a.beta1) + g * V::set1(a.one_minus_beta1);
  v = v * V::set1(a.beta2) + (g * g) * V::set1(a.one_minus_beta2);
  const V denom = V::sqrt(v) * V::set1(a.denom_scale) + V::set1(a.eps);
  p = p - (m / denom) * V::set1(a.step_size);
  store_partial(p, a.param + i, w);
  store_partial(m, a.exp_avg + i, w);
  store_partial(v, a.exp_avg_sq + i, w);
}

// Sum of x^2 over one block, in double. Eight scalar accumulators in a fixed pattern, not Vec lanes:
// the sum then has the same bits on every ISA (and the loop is memory-bound anyway).
template <class T>
double block_sum_of_squares(const T* x, std::int64_t count) {
  double acc[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const double xk = static_cast<double>(x[i + k]);
      acc[k] += xk * xk;
    }
  }
  for (; i < count; ++i) {
    const double xi = static_cast<double>(x[i]);
    acc[i % 8] += xi * xi;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

template <class T>
void adamw_update(const AdamWArgs<T>& a) {
  const std::int64_t n = a.n, blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for num_threads(elementwise_threads(n)) schedule(static)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t first = b * kBlock, count = std::min(kBlock, n - first);
    for_each_lane<T>(count, [&](std::int64_t j, int width) { adamw_lanes(a, first + j, width); });
  }
}

template <class T>
void sum_of_squares(const SumOfSquaresArgs<T>& a) {
  const T* x = a.x;
  const std::int64_t n = a.n, blocks = (n + kBlock - 1) / kBlock;
  // Fixed blocks, then their sums added in block order: the result does not depend on the thread count.
  std::vector<double> partial(static_cast<std::size_t>(blocks));
  double* out = partial.data();
#pragma omp parallel for num_threads(elementwise_threads(n)) schedule(static)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t first = b * kBlock;
    out[b] = block_sum_of_squares(x + first, std::min(kBlock, n - first));
  }
  double total = 0.0;
  for (const double s : partial) total += s;
  *a.out = total;
}

template void adamw_update<float>(const AdamWArgs<float>&);
template void adamw_update<double>(const AdamWArgs<double>&);
template void sum_of_squares<float>(const SumOfSquaresArgs<float>&);
template void sum_of_squares<double>(const SumOfSquaresArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// Optimiser kernels (see attnkit/optim.h): a fused AdamW update and a float64 sum of squares.
// This file is compiled with -ffp-contract=off (CMakeLists.txt): the AdamW update must give the bits of
// the NumPy sequence of in-place operations it replaces, so no multiply-add may become one FMA.
#include <algorithm>
#include <utility>
#include <vector>

#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "attnkit/thread_pool.h"
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

// The blocks of every tensor, as (tensor, first element) work items: one parallel loop covers them all.
template <class Item>
std::vector<std::pair<std::int64_t, std::int64_t>> blocks_of(const Item* items, std::int64_t count,
                                                             std::int64_t* total) {
  std::vector<std::pair<std::int64_t, std::int64_t>> work;
  *total = 0;
  for (std::int64_t t = 0; t < count; ++t) {
    for (std::int64_t first = 0; first < items[t].n; first += kBlock) work.emplace_back(t, first);
    *total += items[t].n;
  }
  return work;
}

}  // namespace

template <class T>
void adamw_update(const AdamWArgs<T>* items, std::int64_t count) {
  std::int64_t total = 0;
  const auto work = blocks_of(items, count, &total);
  const auto n_work = static_cast<std::int64_t>(work.size());
  // Elementwise: which thread takes a block never changes its bits.
  static_loop(elementwise_threads(total), n_work, [&](std::int64_t b, int) {
    const AdamWArgs<T>& a = items[work[b].first];
    const std::int64_t first = work[b].second, block = std::min(kBlock, a.n - first);
    for_each_lane<T>(block, [&](std::int64_t j, int width) { adamw_lanes(a, first + j, width); });
  });
}

template <class T>
void sum_of_squares(const SumOfSquaresArgs<T>* items, std::int64_t count) {
  std::int64_t total = 0;
  const auto work = blocks_of(items, count, &total);
  const auto n_work = static_cast<std::int64_t>(work.size());
  // Fixed blocks, then each tensor's block sums added in block order: a sum does not depend on the thread count
  // or on the tensors beside it.
  std::vector<double> partial(work.size());
  double* out = partial.data();
  static_loop(elementwise_threads(total), n_work, [&](std::int64_t b, int) {
    const SumOfSquaresArgs<T>& a = items[work[b].first];
    const std::int64_t first = work[b].second;
    out[b] = block_sum_of_squares(a.x + first, std::min(kBlock, a.n - first));
  });
  for (std::int64_t t = 0; t < count; ++t) *items[t].out = 0.0;
  for (std::int64_t b = 0; b < n_work; ++b) *items[work[b].first].out += partial[b];
}

template void adamw_update<float>(const AdamWArgs<float>*, std::int64_t);
template void adamw_update<double>(const AdamWArgs<double>*, std::int64_t);
template void sum_of_squares<float>(const SumOfSquaresArgs<float>*, std::int64_t);
template void sum_of_squares<double>(const SumOfSquaresArgs<double>*, std::int64_t);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// Fused softmax cross-entropy (see attnkit/cross_entropy.h). Per row: one pass for the max (and the
// logit sum label smoothing needs), one for exp and its sum (the exps parked in dlogits), one to
// scale them into the gradient. The loss needs no log p_c for every class:
//   loss = lse - (1 - s) x_t - (s / C) sum_c x_c,   lse = m + log sum_c exp(x_c - m).
#include <cmath>
#include <limits>

#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
void fill_row(T* p, std::int64_t n, T value) {
  for (std::int64_t j = 0; j < n; ++j) p[j] = value;
}

template <class T>
void cross_entropy_row(const CrossEntropyArgs<T>& a, std::int64_t r) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const std::int64_t C = a.classes;
  const T* x = a.logits + r * C;
  T* dx = a.dlogits ? a.dlogits + r * C : nullptr;
  const std::int64_t t = a.targets[r];
  if (t == a.ignore_index) {
    a.loss[r] = T(0);
    if (dx) fill_row(dx, C, T(0));
    return;
  }
  const T s = a.label_smoothing;
  const T inf = std::numeric_limits<T>::infinity();

  V vmax = V::set1(-inf), vsum = V::zero();
  std::int64_t j = 0;
  for (; j + W <= C; j += W) {
    const V xj = V::load(x + j);
    vmax = V::max(vmax, xj);
    vsum = vsum + xj;
  }
  T m = vmax.reduce_max(), sum_x = vsum.reduce_add();
  for (; j < C; ++j) {
    m = max_scalar(m, x[j]);
    sum_x += x[j];
  }
  if (m == -inf) {  // every class impossible: p is undefined, the loss infinite, no gradient
    a.loss[r] = inf;
    if (dx) fill_row(dx, C, T(0));
    return;
  }
  const T x_t = x[t];  // read before dx (which may alias x) is written

  const V vm = V::set1(m);
  V vexp = V::zero();
  j = 0;
  if (dx) {
    for (; j + W <= C; j += W) {
      const V e = exp(V::load(x + j) - vm);
      e.store(dx + j);
      vexp = vexp + e;
    }
  } else {
    for (; j + W <= C; j += W) vexp = vexp + exp(V::load(x + j) - vm);
  }
  T sum_exp = vexp.reduce_add();
  for (; j < C; ++j) {
    const T e = exp_scalar(x[j] - m);
    if (dx) dx[j] = e;
    sum_exp += e;
  }
  const T lse = m + std::log(sum_exp);
  // s == 0 skips the smoothing term, so -inf logits of other classes do not make it 0 * inf.
  a.loss[r] = lse - (T(1) - s) * x_t - (s > T(0) ? s / T(C) * sum_x : T(0));
  if (!dx) return;

  const T w = a.weight ? a.weight[r] : T(1);
  const T scale = w / sum_exp, shift = -w * s / T(C);
  const V vscale = V::set1(scale), vshift = V::set1(shift);
  for (j = 0; j + W <= C; j += W) V::fma(V::load(dx + j), vscale, vshift).store(dx + j);
  for (; j < C; ++j) dx[j] = dx[j] * scale + shift;
  dx[t] -= w * (T(1) - s);
}

}  // namespace

template <class T>
void cross_entropy(const CrossEntropyArgs<T>& a) {
  const std::int64_t rows = a.rows, classes = a.classes;
  const int threads = elementwise_threads(rows * classes);
  static_loop(threads, rows, [&](std::int64_t r, int) { cross_entropy_row(a, r); });
}

template void cross_entropy<float>(const CrossEntropyArgs<float>&);
template void cross_entropy<double>(const CrossEntropyArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

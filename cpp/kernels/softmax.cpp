// Row-wise softmax / log_softmax (see attnkit/softmax.h): three passes over each row (max, exp+sum,
// scale); rows in parallel when there is enough work to pay for the threads.
#include <cmath>

#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
void softmax_row(const T* x, T* out, std::int64_t n, bool log) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  std::int64_t j = 0;
  V vmax = V::set1(neg_inf);
  for (; j + W <= n; j += W) vmax = V::max(vmax, V::load(x + j));
  T m = vmax.reduce_max();
  for (; j < n; ++j) m = max_scalar(m, x[j]);
  if (m == neg_inf) {  // nothing to normalise: all -inf (or empty)
    for (j = 0; j < n; ++j) out[j] = log ? neg_inf : T(0);
    return;
  }
  const V vm = V::set1(m);
  V vsum = V::zero();
  T sum = 0;
  j = 0;
  if (log) {
    for (; j + W <= n; j += W) vsum = vsum + exp(V::load(x + j) - vm);
    sum = vsum.reduce_add();
    for (; j < n; ++j) sum += exp_scalar(x[j] - m);
    const T shift = m + std::log(sum);
    const V vs = V::set1(shift);
    for (j = 0; j + W <= n; j += W) (V::load(x + j) - vs).store(out + j);
    for (; j < n; ++j) out[j] = x[j] - shift;
    return;
  }
  for (; j + W <= n; j += W) {
    V e = exp(V::load(x + j) - vm);
    e.store(out + j);
    vsum = vsum + e;
  }
  sum = vsum.reduce_add();
  for (; j < n; ++j) {
    out[j] = exp_scalar(x[j] - m);
    sum += out[j];
  }
  const T inv = T(1) / sum;
  const V vinv = V::set1(inv);
  for (j = 0; j + W <= n; j += W) (V::load(out + j) * vinv).store(out + j);
  for (; j < n; ++j) out[j] *= inv;
}

// The index of the first largest of out[0..n) (NaN never is; 0 for a row without a number), read while the row
// is in cache, where NumPy's argmax over a decoding step's rows read them back from memory.
template <class T>
std::int64_t first_max_index(const T* out, std::int64_t n) {
  using V = Vec<T>;
  constexpr int W = V::W;
  std::int64_t j = 0;
  V vmax = V::set1(-std::numeric_limits<T>::infinity());
  for (; j + W <= n; j += W) vmax = V::max(V::load(out + j), vmax);  // vmax second: a NaN is passed over
  T m = vmax.reduce_max();
  for (; j < n; ++j) m = max_scalar(out[j], m);
  for (j = 0; j < n; ++j)
    if (out[j] == m) return j;
  return 0;
}

}  // namespace

template <class T>
void softmax(const SoftmaxArgs<T>& a) {
  const std::int64_t rows = a.rows, n = a.n;
  const T* x = a.x;
  T* out = a.out;
  const bool log = a.log;
  const int threads = elementwise_threads(rows * n);
  const std::int64_t chunk = row_chunk(n);  // rows handed out as threads come (see row_chunk)
  const float* x_float = a.x_float;
  std::int64_t* argmax = a.argmax;
  claim_loop(threads, rows, chunk, [&](std::int64_t r, int) {
    if (x_float != nullptr) {  // widened into the row of out while it is in cache, then normalised there
      for (std::int64_t j = 0; j < n; ++j) out[r * n + j] = T(x_float[r * n + j]);
      softmax_row(out + r * n, out + r * n, n, log);
    } else {
      softmax_row(x + r * n, out + r * n, n, log);
    }
    if (argmax != nullptr) argmax[r] = first_max_index(out + r * n, n);
  });
}

template void softmax<float>(const SoftmaxArgs<float>&);
template void softmax<double>(const SoftmaxArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// Sinusoidal positions (see attnkit/positions.h). Angles in double: (start + t) * w_k reaches 1e5 rad
// for long sequences, where float32 sin/cos arguments would lose the low digits.
#include <cmath>

#include "attnkit/isa.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

template <class T>
void positions(const PositionsArgs<T>& a) {
  const std::int64_t n = a.n, half = a.d / 2;
  const double base = a.base, start = a.start;
  T* out = a.out;
  const int threads = n * a.d >= (1 << 16) ? kernel_threads() : 1;
  static_loop(threads, n, [&](std::int64_t t, int) {
    T* row = out + t * 2 * half;
    for (std::int64_t k = 0; k < half; ++k) {
      const double w = std::pow(base, -2.0 * double(k) / double(2 * half));
      const double angle = (start + double(t)) * w;
      row[2 * k] = T(std::sin(angle));
      row[2 * k + 1] = T(std::cos(angle));
    }
  });
}

template void positions<float>(const PositionsArgs<float>&);
template void positions<double>(const PositionsArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

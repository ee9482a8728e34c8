// Thread count for kernels: the smaller of attnkit.set_num_threads (0 = no cap) and OpenMP's
// omp_get_max_threads(), so OMP_NUM_THREADS and threadpoolctl (which calls omp_set_num_threads)
// both limit attnkit.
#include <omp.h>

#include <atomic>

#include "attnkit/isa.h"

namespace attnkit {

namespace {
std::atomic<int> g_cap{0};
}

int kernel_threads() {
  const int omp = omp_get_max_threads();
  const int cap = g_cap.load(std::memory_order_relaxed);
  const int n = cap > 0 && cap < omp ? cap : omp;
  return n > 0 ? n : 1;
}

void set_num_threads(int n) {
  g_cap.store(n, std::memory_order_relaxed);
  if (n > 0) omp_set_num_threads(n);
}

int get_num_threads() { return kernel_threads(); }

}  // namespace attnkit

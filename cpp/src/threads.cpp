// Thread count for kernels: the calling thread's own count (an estimator's n_jobs during its call), or
// the smaller of attnkit.set_num_threads (0 = no cap) and OpenMP's omp_get_max_threads(), so
// OMP_NUM_THREADS and threadpoolctl (which calls omp_set_num_threads) both limit attnkit. A call's count
// is thread-local: two Python threads calling with different n_jobs each get their own (a server calls
// from many threads), where a process-wide set and restore would race.
#include <omp.h>

#include <atomic>

#include "attnkit/isa.h"

namespace attnkit {

namespace {
std::atomic<int> g_cap{0};
thread_local int t_call = 0;
}

int kernel_threads() {
  if (t_call > 0) return t_call;
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

void set_call_threads(int n) { t_call = n > 0 ? n : 0; }

int get_call_threads() { return t_call; }

}  // namespace attnkit

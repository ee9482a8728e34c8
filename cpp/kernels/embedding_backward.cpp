// Gradient of a table lookup (see attnkit/embedding.h): a counting sort of the tokens by id (stable, so each
// id's tokens stay in token order), then the ids in parallel, each summing its rows into a scratch row and
// adding it to its table row. Ids are disjoint rows, so threads never write the same memory.
#include <vector>

#include "attnkit/isa.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

template <class T>
void embedding_backward(const EmbeddingBackwardArgs<T>& a) {
  const std::int64_t width = a.width;
  // first[v] .. first[v + 1]: the slots of id v in `order` (an O(tokens + vocab) sort: a 30,522-word vocabulary
  // costs ~30 us to count, where comparison sorting 10k tokens would cost more).
  std::vector<std::int64_t> first(a.vocab + 1, 0);
  for (std::int64_t t = 0; t < a.tokens; ++t)
    if (a.ids[t] != a.padding_idx) ++first[a.ids[t] + 1];
  std::vector<std::int64_t> distinct;
  for (std::int64_t v = 0; v < a.vocab; ++v) {
    if (first[v + 1] > 0) distinct.push_back(v);
    first[v + 1] += first[v];
  }
  std::vector<std::int64_t> order(first[a.vocab]), next(first.begin(), first.end() - 1);
  for (std::int64_t t = 0; t < a.tokens; ++t)
    if (a.ids[t] != a.padding_idx) order[next[a.ids[t]]++] = t;
  const std::int64_t count = std::int64_t(distinct.size());
  const int threads = elementwise_threads(std::int64_t(order.size()) * width);
  std::vector<T> scratch(std::size_t(threads) * std::size_t(width));
  static_loop(threads, count, [&](std::int64_t i, int t) {
    const std::int64_t v = distinct[i], s = first[v], e = first[v + 1];
    T* __restrict row = a.grad_weight + v * width;
    const T* __restrict g = a.grad + order[s] * width;
    if (e - s == 1) {  // the sum of one row is the row
      for (std::int64_t j = 0; j < width; ++j) row[j] += g[j];
      return;
    }
    T* __restrict sum = scratch.data() + std::int64_t(t) * width;
    for (std::int64_t j = 0; j < width; ++j) sum[j] = g[j];
    for (std::int64_t r = s + 1; r < e; ++r) {
      g = a.grad + order[r] * width;
      for (std::int64_t j = 0; j < width; ++j) sum[j] += g[j];
    }
    for (std::int64_t j = 0; j < width; ++j) row[j] += sum[j];
  });
}

template void embedding_backward<float>(const EmbeddingBackwardArgs<float>&);
template void embedding_backward<double>(const EmbeddingBackwardArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// Argmax ("hard") attention (see attnkit/attention.h): each query takes the value of its best-scoring
// visible key. The logits come from the tiles of the softmax kernel (block_logits: queries along the
// vector lanes, invisible keys -inf, key blocks outside a query block's band never computed); a running
// maximum over the keys replaces the online softmax, and one value row is copied per query.
#include <cmath>
#include <limits>

#include "aligned_buffer.h"
#include "attention_tiles.h"
#include "attnkit/isa.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

template <class T>
void argmax_attention(const AttentionArgs<T>& a) {
  using Tl = Tiles<T>;
  const std::int64_t batch = a.batch, nq = a.nq, d = a.d, dv = a.dv;
  if (batch == 0 || nq == 0) return;
  const std::int64_t bqp_max = query_padding<T>(min_scalar<std::int64_t>(Tl::BQ, nq));
  const std::int64_t nqb = (nq + Tl::BQ - 1) / Tl::BQ;
  const std::int64_t tasks = batch * nqb;
  const double flops = double(batch) * double(nq) * double(a.nk) * double(d);
  const int threads = int(min_scalar<std::int64_t>(flops < 2e5 ? 1 : kernel_threads(), tasks));
  // Per thread: Qt (d x bqp), St (BK x bqp), a zero key row (d), the best logit per query (bqp).
  constexpr std::int64_t align = 64 / sizeof(T);
  const std::int64_t st = round_up(d * bqp_max, align), zero = st + round_up(Tl::BK * bqp_max, align);
  const std::int64_t best = zero + round_up(d, align), per_thread = best + round_up(bqp_max, align);
  const auto mem = aligned_buffer<T>(per_thread * threads);
  const auto first = aligned_buffer<std::int64_t>(Tl::BQ * std::int64_t(threads));
  const T neg_inf = -std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();

  claim_loop(threads, tasks, 1, [&](std::int64_t task, int t) {
    const std::int64_t b = task / nqb, i0 = (task % nqb) * Tl::BQ;
    const std::int64_t bq = min_scalar(Tl::BQ + i0, nq) - i0, bqp = query_padding<T>(bq);
    const int thread = t;
    T* base = mem.get() + thread * per_thread;
    T *Qt = base, *St = base + st, *zero_row = base + zero, *top = base + best;
    std::int64_t* which = first.get() + thread * Tl::BQ;  // the best key of each query, -1: none yet; -2: NaN
    for (std::int64_t c = 0; c < d; ++c) zero_row[c] = T(0);
    for (std::int64_t i = 0; i < bq; ++i) top[i] = neg_inf, which[i] = -1;
    pack_transposed([&](std::int64_t i) { return a.q.row(b, i); }, i0, bq, bqp, d, a.scale, Qt);

    const Visibility vis(a, b);
    const Range keys = vis.keys_of_queries(i0, bq);
    for (std::int64_t j0 = keys.first / Tl::BK * Tl::BK; j0 < keys.end; j0 += Tl::BK) {
      const std::int64_t jn = min_scalar<std::int64_t>(Tl::BK, keys.end - j0);
      block_logits(a, vis, b, i0, bq, bqp, j0, jn, Qt, zero_row, St);
      for (std::int64_t j = 0; j < jn; ++j) {
        const T* s = St + j * bqp;
        for (std::int64_t i = 0; i < bq; ++i) {
          if (s[i] > top[i]) {  // strictly: among equal logits the first (lowest index) key stays
            top[i] = s[i], which[i] = which[i] == -2 ? -2 : j0 + j;
          } else if (std::isnan(s[i])) {
            which[i] = -2;  // a NaN logit among a query's visible keys: its output is NaN
          }
        }
      }
    }
    for (std::int64_t i = 0; i < bq; ++i) {
      T* out = a.out + (b * nq + i0 + i) * dv;
      const T* row = which[i] >= 0 ? a.v.row(b, which[i]) : nullptr;
      for (std::int64_t c = 0; c < dv; ++c) out[c] = row ? row[c] : which[i] == -2 ? nan : T(0);
    }
  });
}

template void argmax_attention<float>(const AttentionArgs<float>&);
template void argmax_attention<double>(const AttentionArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

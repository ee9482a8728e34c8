// Backward of tiled attention (see AttentionBackwardArgs in attnkit/attention.h).
//
// One flat parallel loop over (batch item, block of BK keys): a task owns dK and dV of its keys and
// walks the query blocks that can see them, recomputing P = exp(S - lse) block by block (no Nq x Nk
// buffer). dQ gathers contributions from every key block, so each thread adds into a private dQ
// that is summed at the end (memory: threads x |q|, no atomics).
#include <atomic>

#include "attention_tiles.h"
#include "attnkit/isa.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
struct BackwardScratch {
  std::int64_t qt, dot, st, dst, dk, dv, lse, delta, zero, per_thread;
  std::unique_ptr<T, FreeDeleter> mem;

  BackwardScratch(std::int64_t bqp, std::int64_t d, std::int64_t dv_width, int threads) {
    constexpr std::int64_t a = 64 / sizeof(T);
    const std::int64_t bk = Tiles<T>::BK;
    qt = 0;
    dot = qt + round_up(d * bqp, a);
    st = dot + round_up(dv_width * bqp, a);
    dst = st + round_up(bk * bqp, a);
    dk = dst + round_up(bk * bqp, a);
    dv = dk + round_up(bk * d, a);
    lse = dv + round_up(bk * dv_width, a);
    delta = lse + round_up(bqp, a);
    zero = delta + round_up(bqp, a);
    per_thread = zero + round_up(d > dv_width ? d : dv_width, a);
    mem = aligned_buffer<T>(per_thread * threads);
  }
  T* of(int thread) const { return mem.get() + std::int64_t(thread) * per_thread; }
};

}  // namespace

template <class T>
void attention_backward(const AttentionBackwardArgs<T>& g) {
  using V = Vec<T>;
  using Tl = Tiles<T>;
  constexpr int W = V::W, KR = Tl::KR, QT = Tl::QT;
  const AttentionArgs<T>& a = g.attn;
  const std::int64_t batch = a.batch, nq = a.nq, nk = a.nk, d = a.d, dvw = a.dv;
  const std::int64_t nkb = (nk + Tl::BK - 1) / Tl::BK;
  // A task takes an item's key blocks, in order, where an item has one or there are items enough to share (4 a
  // thread): it is then the only one adding into the item's dq rows, so it adds into dq itself, in key-block order
  // (the bits of one thread whatever the thread count), and no thread zeroes and sums a private copy of all of dq
  // (48 heads of 64 x 32: a fifth of the call). Few items of many blocks (one long sequence) share their key
  // blocks instead, each thread adding into a private dq, summed at the end.
  const bool by_item = nkb == 1 || batch >= 4 * kernel_threads();
  const std::int64_t tasks = by_item ? batch : batch * nkb;
  const double flops = double(batch) * double(nq) * double(nk) * double(d + dvw);
  const int threads = int(min_scalar<std::int64_t>(flops < 1e5 ? 1 : kernel_threads(), tasks > 0 ? tasks : 1));
  const std::int64_t bqp_max = round_up(min_scalar<std::int64_t>(Tl::BQ, nq > 0 ? nq : 1), Tl::QQ);
  BackwardScratch<T> scratch(bqp_max, d, dvw, threads);
  const std::int64_t q_size = batch * nq * d;  // a private dq: contiguous (batch, nq, d)
  auto dq_private = aligned_buffer<T>(by_item ? 0 : q_size * threads);
  const T lowest = std::numeric_limits<T>::lowest(), inf = std::numeric_limits<T>::infinity();
  const T scale = a.scale;

  // By item, tasks are claimed in runs (task_chunk); else one by one, as the private dq copies' sums depend on which
  // thread ran which task.
  const std::int64_t chunk = by_item ? task_chunk(tasks, threads) : 1;
  std::atomic<std::int64_t> next{0};
  team(threads, [&](int t, int) {
    T* dq_t = by_item ? nullptr : dq_private.get() + std::int64_t(t) * q_size;
    for (std::int64_t x = 0; !by_item && x < q_size; ++x) dq_t[x] = T(0);
    T* base = scratch.of(t);
    T *Qt = base + scratch.qt, *dOt = base + scratch.dot, *St = base + scratch.st, *dSt = base + scratch.dst;
    T *dk_acc = base + scratch.dk, *dv_acc = base + scratch.dv, *lse = base + scratch.lse;
    T *delta = base + scratch.delta, *zero_row = base + scratch.zero;
    for (std::int64_t c = 0; c < (d > dvw ? d : dvw); ++c) zero_row[c] = T(0);

    for (std::int64_t task0; (task0 = next.fetch_add(chunk, std::memory_order_relaxed)) < tasks;) {
      for (std::int64_t task = task0; task < task0 + chunk && task < tasks; ++task) {
        const std::int64_t b = by_item ? task : task / nkb;
        const std::int64_t kb0 = by_item ? 0 : task % nkb, kb1 = by_item ? nkb : kb0 + 1;
        const Visibility vis(a, b);
        for (std::int64_t i = 0; by_item && i < nq; ++i)
          for (std::int64_t c = 0; c < d; ++c) g.dq.row(b, i)[c] = T(0);
        for (std::int64_t kb = kb0; kb < kb1; ++kb) {
          const std::int64_t j0 = kb * Tl::BK;
          const std::int64_t jn = min_scalar<std::int64_t>(Tl::BK, nk - j0);
          const std::int64_t jv = min_scalar<std::int64_t>(jn, vis.key_length - j0);  // keys that exist (not padding)
          for (std::int64_t x = 0; x < jn * d; ++x) dk_acc[x] = T(0);
          for (std::int64_t x = 0; x < jn * dvw; ++x) dv_acc[x] = T(0);
          if (g.dbias) {  // this task owns dbias[b, :, j0:j0+jn]; queries it never visits stay zero
            for (std::int64_t i = 0; i < nq; ++i)
              for (std::int64_t j = 0; j < jn; ++j) g.dbias[(b * nq + i) * nk + j0 + j] = T(0);
          }
          const Range queries = vis.queries_of_keys(j0, jn);
          for (std::int64_t i0 = queries.first / Tl::BQ * Tl::BQ; i0 < queries.end; i0 += Tl::BQ) {
            const std::int64_t bq = min_scalar(i0 + Tl::BQ, nq) - i0, bqp = round_up(bq, Tl::QQ);
            pack_transposed([&](std::int64_t i) { return a.q.row(b, i); }, i0, bq, bqp, d, scale, Qt);
            pack_transposed([&](std::int64_t i) { return g.dout.row(b, i); }, i0, bq, bqp, dvw, T(1), dOt);
            // Padded query lanes get lse = +inf (so P = 0) and delta = 0.
            for (std::int64_t i = 0; i < bqp; ++i) {
              lse[i] = i < bq ? max_scalar(lowest, a.lse[b * nq + i0 + i]) : inf;
              delta[i] = i < bq ? dot(g.dout.row(b, i0 + i), g.out.row(b, i0 + i), dvw) : T(0);
            }
            block_logits(a, vis, b, i0, bq, bqp, j0, jv, Qt, zero_row, St);
            // dP^T = V dO^T, the same tile as the logits with dO^T in place of Q^T and v rows as keys.
            const T* krows[KR];
            for (std::int64_t jt = 0; jt < jv; jt += KR) {
              for (int r = 0; r < KR; ++r) krows[r] = jt + r < jv ? a.v.row(b, j0 + jt + r) : zero_row;
              // Tiles block_logits skipped (all invisible) have P = 0: their dP is never used.
              for (std::int64_t it = first_query_tile(vis, i0, j0 + jt, QT); it < bqp; it += QT)
                logits_tile(dOt + it, bqp, krows, dvw, dSt + jt * bqp + it, bqp);
            }
            // P = exp(S - lse); dS = P (dP - delta), exactly 0 where P is 0 (so NaN at invisible keys stays out).
            const V tiny = V::set1(std::numeric_limits<T>::denorm_min());
            for (std::int64_t j = 0; j < jv; ++j) {
              for (std::int64_t i = 0; i < bqp; i += W) {
                const V p = exp(V::load(St + j * bqp + i) - V::load(lse + i));
                p.store(St + j * bqp + i);
                const V ds = p * (V::load(dSt + j * bqp + i) - V::load(delta + i));
                V::zero_below(ds, p, tiny).store(dSt + j * bqp + i);  // p >= 0: zero exactly where p == 0
              }
            }
            // dV[j] += sum_i P[j][i] dO[i];  dK[j] += sum_i dS[j][i] q[i]  (scale applied at the end)
            const Band by_key = vis.query_band(i0, j0), by_query = vis.key_band(i0, j0);
            accumulate_rows(dv_acc, dvw, jv, static_cast<const T*>(nullptr), St, std::int64_t(1), bqp,
                            g.dout.row(b, i0), g.dout.row_stride, bq, dvw, by_key);
            accumulate_rows(dk_acc, d, jv, static_cast<const T*>(nullptr), dSt, std::int64_t(1), bqp, a.q.row(b, i0),
                            a.q.row_stride, bq, d, by_key);
            // dQ[i] += sum_j dS[j][i] k[j]
            T* dq_rows = by_item ? g.dq.row(b, i0) : dq_t + (b * nq + i0) * d;
            accumulate_rows(dq_rows, by_item ? g.dq.row_stride : d, bq, static_cast<const T*>(nullptr), dSt, bqp,
                            std::int64_t(1), a.k.row(b, j0), a.k.row_stride, jv, d, by_query);
            if (g.dbias)
              for (std::int64_t i = 0; i < bq; ++i)
                for (std::int64_t j = 0; j < jv; ++j) g.dbias[(b * nq + i0 + i) * nk + j0 + j] = dSt[j * bqp + i];
          }
          for (std::int64_t j = 0; j < jn; ++j) {
            T *dk = g.dk.row(b, j0 + j), *dv = g.dv.row(b, j0 + j);
            for (std::int64_t c = 0; c < d; ++c) dk[c] = scale * dk_acc[j * d + c];
            for (std::int64_t c = 0; c < dvw; ++c) dv[c] = dv_acc[j * dvw + c];
          }
        }
        // 0 + the sum, then the scale: what summing the one thread's private copy gave.
        for (std::int64_t i = 0; by_item && i < nq; ++i) {
          T* dq_i = g.dq.row(b, i);
          for (std::int64_t c = 0; c < d; ++c) dq_i[c] = scale * (T(0) + dq_i[c]);
        }
      }
    }
  });
  if (by_item) return;
  // dq = scale * sum over threads of the private copies, split across threads by query row.
  static_loop(threads, batch * nq, [&](std::int64_t r, int) {
    T* dq_r = g.dq.row(r / nq, r % nq);
    for (std::int64_t c = 0; c < d; ++c) {
      T s = T(0);
      for (int u = 0; u < threads; ++u) s += dq_private.get()[std::int64_t(u) * q_size + r * d + c];
      dq_r[c] = scale * s;
    }
  });
}

template void attention_backward<float>(const AttentionBackwardArgs<float>&);
template void attention_backward<double>(const AttentionBackwardArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

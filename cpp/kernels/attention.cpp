// Tiled ("flash") scaled dot-product attention with an online softmax (see attnkit/attention.h).
//
// One flat parallel loop over (batch item, block of BQ queries). For each task the query block is
// packed transposed and pre-scaled (Qt[c][i] = scale * q[i][c]) so that logits come out transposed,
// St[j][i], with queries along the vector lanes: the softmax over keys is then vertical (no
// horizontal reductions), and keys the block's queries cannot see (Visibility) are never computed.
#include <atomic>
#include <cmath>
#include <memory>

#include "attention_tiles.h"
#include "attnkit/isa.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

// Per-thread scratch, allocated once per call before the parallel loop.
template <class T>
struct Scratch {
  std::int64_t qt, st, acc, stats, zero, per_thread;
  std::unique_ptr<T, FreeDeleter> mem;

  Scratch(std::int64_t bqp, std::int64_t d, std::int64_t dv, int threads) {
    constexpr std::int64_t a = 64 / sizeof(T);  // keep every piece 64-byte aligned
    qt = 0;
    st = qt + round_up(d * bqp, a);
    acc = st + round_up(std::int64_t(Tiles<T>::BK) * bqp, a);
    stats = acc + round_up(bqp * dv, a);
    zero = stats + round_up(3 * bqp, a);
    per_thread = zero + round_up(d, a);
    mem = aligned_buffer<T>(per_thread * threads);
  }
  T* of(int thread) const { return mem.get() + std::int64_t(thread) * per_thread; }
};

// The same update as accumulate_rows, but a key with weight 0 contributes nothing even when its
// value is NaN or inf (0 * inf would be NaN): keys a query cannot see must not reach its output.
template <class T>
void accumulate_values_skipping_zeros(T* acc, std::int64_t dv, const T* alpha, const T* St,
                                      std::int64_t bqp, std::int64_t bq, const T* v,
                                      std::int64_t v_rs, std::int64_t jn) {
  for (std::int64_t i = 0; i < bq; ++i) {
    T* o = acc + i * dv;
    for (std::int64_t c = 0; c < dv; ++c) o[c] *= alpha[i];
    for (std::int64_t j = 0; j < jn; ++j) {
      const T p = St[j * bqp + i];
      if (p == T(0)) continue;
      const T* vj = v + j * v_rs;
      for (std::int64_t c = 0; c < dv; ++c) o[c] = fma_scalar(p, vj[c], o[c]);  // as accumulate_rows rounds
    }
  }
}

// Whether each key block's values are finite (see values_finite), asked by every query block of
// the batch item: scanned once per call, by the first thread that asks (0: not yet known, 1: finite,
// 2: not). Scanning per query block cost ~2% of causal N=1024; a race scans twice, with one answer.
template <class T>
class FiniteValueBlocks {
 public:
  explicit FiniteValueBlocks(const AttentionArgs<T>& a)
      : a_(a), per_item_((a.nk + Tiles<T>::BK - 1) / Tiles<T>::BK),
        known_(new std::atomic<std::uint8_t>[std::size_t(a.batch * per_item_)]) {
    for (std::int64_t x = 0; x < a.batch * per_item_; ++x) known_[x].store(0, std::memory_order_relaxed);
  }

  // Keys [j0, j0 + jn) of item b: the aligned blocks of BK keys that hold them (a superset of what the query block
  // reads, up to the key length).
  bool operator()(std::int64_t b, std::int64_t j0, std::int64_t jn) const {
    constexpr std::int64_t bk = Tiles<T>::BK;
    for (std::int64_t aligned = j0 / bk * bk; aligned < j0 + jn; aligned += bk)
      if (!aligned_block(b, aligned)) return false;
    return true;
  }

 private:
  // Keys [j0, j0 + BK) of item b, j0 a multiple of BK, up to its key length.
  bool aligned_block(std::int64_t b, std::int64_t j0) const {
    std::atomic<std::uint8_t>& known = known_[b * per_item_ + j0 / Tiles<T>::BK];
    std::uint8_t flag = known.load(std::memory_order_relaxed);
    if (!flag) {
      const std::int64_t jn = min_scalar<std::int64_t>(Tiles<T>::BK, Visibility(a_, b).key_length - j0);
      flag = values_finite(a_.v.row(b, j0), a_.v.row_stride, jn, a_.dv) ? 1 : 2;
      known.store(flag, std::memory_order_relaxed);
    }
    return flag == 1;
  }

  const AttentionArgs<T>& a_;
  std::int64_t per_item_;
  std::unique_ptr<std::atomic<std::uint8_t>[]> known_;
};

}  // namespace

template <class T>
void attention(const AttentionArgs<T>& a) {
  using V = Vec<T>;
  using Tl = Tiles<T>;
  constexpr int W = V::W;
  const std::int64_t batch = a.batch, nq = a.nq, d = a.d, dv = a.dv;
  if (batch == 0 || nq == 0) return;
  const std::int64_t bq_max = min_scalar<std::int64_t>(Tl::BQ, nq);
  const std::int64_t bqp_max = query_padding<T>(bq_max);  // the widest block's padding (it grows with bq)
  const std::int64_t nqb = (nq + Tl::BQ - 1) / Tl::BQ;
  const std::int64_t tasks = batch * nqb;
  const double flops = double(batch) * double(nq) * double(a.nk) * double(d + dv);
  const int threads = int(min_scalar<std::int64_t>(flops < 2e5 ? 1 : kernel_threads(), tasks));
  Scratch<T> scratch(bqp_max, d, dv, threads);
  const FiniteValueBlocks<T> finite_values(a);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T lowest = std::numeric_limits<T>::lowest();

  claim_loop(threads, tasks, task_chunk(tasks, threads), [&](std::int64_t task, int t) {
    T* base = scratch.of(t);
    const std::int64_t b = task / nqb, i0 = (task % nqb) * Tl::BQ;
    const std::int64_t qlen = a.query_length ? a.query_length[b] : nq;
    if (i0 >= qlen) return;
    const std::int64_t bq = min_scalar(Tl::BQ + i0, qlen) - i0, bqp = query_padding<T>(bq);
    T *Qt = base + scratch.qt, *St = base + scratch.st, *acc = base + scratch.acc;
    T *m = base + scratch.stats, *l = m + bqp, *alpha = l + bqp, *zero_row = base + scratch.zero;
    for (std::int64_t c = 0; c < d; ++c) zero_row[c] = T(0);
    for (std::int64_t i = 0; i < bqp; ++i) m[i] = neg_inf, l[i] = T(0);
    for (std::int64_t x = 0; x < bqp * dv; ++x) acc[x] = T(0);
    pack_transposed([&](std::int64_t i) { return a.q.row(b, i); }, i0, bq, bqp, d, a.scale, Qt);

    // Key blocks of BK from the first visible key: under a sliding window, blocks aligned to BK would start up to
    // BK - 1 keys early (window 256 at N = 16k read ~540 keys a query block for ~350 visible; 19.5x full causal on
    // Zen 5). Without a window the first key is 0, and the blocks are those they always were.
    const Visibility vis(a, b);
    const Range keys = vis.keys_of_queries(i0, bq);
    for (std::int64_t j0 = keys.first; j0 < keys.end; j0 += Tl::BK) {
      const std::int64_t jn = min_scalar<std::int64_t>(Tl::BK, keys.end - j0);
      block_logits(a, vis, b, i0, bq, bqp, j0, jn, Qt, zero_row, St);
      // Online softmax, W queries at a time: new running max, rescale factor, probabilities.
      for (std::int64_t g = 0; g < bqp; g += W) {
        V mb = V::set1(neg_inf);
        for (std::int64_t j = 0; j < jn; ++j) mb = V::max(mb, V::load(St + j * bqp + g));
        const V m_old = V::load(m + g);
        const V m_new = V::max(m_old, mb);
        // A row that has seen only -inf so far subtracts `lowest` instead, so exp gives 0, not NaN.
        const V m_use = V::max(V::set1(lowest), m_new);
        V sum = V::zero();
        for (std::int64_t j = 0; j < jn; ++j) {
          const V p = exp(V::load(St + j * bqp + g) - m_use);
          p.store(St + j * bqp + g);
          sum = sum + p;
        }
        const V al = exp(m_old - m_use);
        V::fma(V::load(l + g), al, sum).store(l + g);
        al.store(alpha + g);
        m_new.store(m + g);
      }
      const T* vb = a.v.row(b, j0);
      // Non-finite values are rare: the scan keeps a NaN at a masked key out of the rows that cannot
      // see it.
      if (finite_values(b, j0, jn))
        accumulate_rows(acc, dv, bq, alpha, St, bqp, std::int64_t(1), vb, a.v.row_stride, jn, dv,
                        vis.key_band(i0, j0));
      else
        accumulate_values_skipping_zeros(acc, dv, alpha, St, bqp, bq, vb, a.v.row_stride, jn);
    }

    const std::int64_t ors = a.out_offset ? a.out_row_stride : dv;
    T* out = a.out + (a.out_offset ? a.out_offset[b] : b * nq * dv) + i0 * ors;
    for (std::int64_t i = 0; i < bq; ++i) {
      const T li = l[i];
      // li == 0: nothing visible -> zeros. NaN li (NaN inputs) falls through and stays NaN.
      const T inv = T(1) / li;
      for (std::int64_t c = 0; c < dv; ++c) out[i * ors + c] = li == T(0) ? T(0) : acc[i * dv + c] * inv;
      if (a.lse) a.lse[b * nq + i0 + i] = li == T(0) ? neg_inf : m[i] + std::log(li);
    }
  });
}

template <class T>
void attention_weights(const AttentionWeightsArgs<T>& w) {
  using V = Vec<T>;
  using Tl = Tiles<T>;
  constexpr int W = V::W;
  const AttentionArgs<T>& a = w.attn;
  const std::int64_t batch = a.batch, nq = a.nq, nk = a.nk, d = a.d;
  if (batch == 0 || nq == 0) return;
  const std::int64_t bqp_max = query_padding<T>(min_scalar<std::int64_t>(Tl::BQ, nq));
  const std::int64_t nqb = (nq + Tl::BQ - 1) / Tl::BQ;
  const std::int64_t tasks = batch * nqb;
  const double flops = double(batch) * double(nq) * double(nk) * double(d);
  const int threads = int(min_scalar<std::int64_t>(flops < 2e5 ? 1 : kernel_threads(), tasks));
  Scratch<T> scratch(bqp_max, d, 0, threads);
  const T lowest = std::numeric_limits<T>::lowest();

  claim_loop(threads, tasks, 1, [&](std::int64_t task, int t) {
    T* base = scratch.of(t);
    const std::int64_t b = task / nqb, i0 = (task % nqb) * Tl::BQ;
    const std::int64_t bq = min_scalar(Tl::BQ + i0, nq) - i0, bqp = query_padding<T>(bq);
    T *Qt = base + scratch.qt, *St = base + scratch.st, *lse = base + scratch.stats;
    T* zero_row = base + scratch.zero;
    for (std::int64_t c = 0; c < d; ++c) zero_row[c] = T(0);
    for (std::int64_t i = 0; i < bqp; ++i) lse[i] = i < bq ? max_scalar(lowest, a.lse[b * nq + i0 + i]) : T(0);
    pack_transposed([&](std::int64_t i) { return a.q.row(b, i); }, i0, bq, bqp, d, a.scale, Qt);
    T* out = w.weights + (b * nq + i0) * nk;
    const Visibility vis(a, b);
    const Range keys = vis.keys_of_queries(i0, bq);
    const std::int64_t jfirst = keys.first / Tl::BK * Tl::BK;  // the key blocks of attention()
    for (std::int64_t i = 0; i < bq; ++i) {
      for (std::int64_t j = 0; j < jfirst; ++j) out[i * nk + j] = T(0);
      for (std::int64_t j = keys.end; j < nk; ++j) out[i * nk + j] = T(0);
    }
    for (std::int64_t j0 = jfirst; j0 < keys.end; j0 += Tl::BK) {
      const std::int64_t jn = min_scalar<std::int64_t>(Tl::BK, keys.end - j0);
      block_logits(a, vis, b, i0, bq, bqp, j0, jn, Qt, zero_row, St);
      for (std::int64_t j = 0; j < jn; ++j)
        for (std::int64_t g = 0; g < bqp; g += W)
          exp(V::load(St + j * bqp + g) - V::load(lse + g)).store(St + j * bqp + g);
      for (std::int64_t i = 0; i < bq; ++i)
        for (std::int64_t j = 0; j < jn; ++j) out[i * nk + j0 + j] = St[j * bqp + i];
    }
  });
}

template void attention<float>(const AttentionArgs<float>&);
template void attention<double>(const AttentionArgs<double>&);
template void attention_weights<float>(const AttentionWeightsArgs<float>&);
template void attention_weights<double>(const AttentionWeightsArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// Tiled ("flash") scaled dot-product attention with an online softmax (see attnkit/attention.h).
//
// One flat parallel loop over (batch item, block of BQ queries). For each task the query block is
// packed transposed and pre-scaled (Qt[c][i] = scale * q[i][c]) so that logits come out transposed,
// St[j][i], with queries along the vector lanes: the softmax over keys is then vertical (no
// horizontal reductions), and keys beyond key_length or the causal diagonal are never computed.
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <new>

#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
struct Tiles {
  using V = Vec<T>;
  static constexpr int W = V::W;
  static constexpr int kRegs = W * sizeof(T) == 64 ? 32 : 16;  // vector registers of the ISA
  static constexpr int QV = 2;                                 // query vectors per logits tile
  static constexpr int KR = kRegs == 32 ? 12 : 6;              // keys per logits tile
  static constexpr int MR = 6;                                 // query rows per output tile
  static constexpr int NV = kRegs == 32 ? 4 : 2;               // value vectors per output tile
  static constexpr int QT = QV * W;                            // queries per logits tile
  static constexpr int QQ = QT;                                // query-block padding quantum
  static constexpr int BQ = 96;  // queries per task: a multiple of QQ and MR on every ISA
  static constexpr int BK = 96;                                // keys per block
  static_assert(BK % KR == 0 && BQ % QQ == 0 && BQ % MR == 0 && QQ % W == 0, "tile sizes must nest");
};

std::int64_t round_up(std::int64_t x, std::int64_t q) { return (x + q - 1) / q * q; }

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

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
    const std::size_t bytes = std::size_t(per_thread) * std::size_t(threads) * sizeof(T);
    mem.reset(static_cast<T*>(std::aligned_alloc(64, bytes > 0 ? bytes : 64)));
    if (!mem) throw std::bad_alloc();
  }
  T* of(int thread) const { return mem.get() + std::int64_t(thread) * per_thread; }
};

// Qt[c][i] = scale * q[i0 + i][c] for i < bq, 0 for bq <= i < bqp.
template <class T>
void pack_queries(const AttentionArgs<T>& a, std::int64_t b, std::int64_t i0, std::int64_t bq,
                  std::int64_t bqp, T* Qt) {
  const std::int64_t d = a.d;
  for (std::int64_t i = 0; i < bq; ++i) {
    const T* qi = a.q.row(b, i0 + i);
    for (std::int64_t c = 0; c < d; ++c) Qt[c * bqp + i] = a.scale * qi[c];
  }
  for (std::int64_t c = 0; c < d; ++c)
    for (std::int64_t i = bq; i < bqp; ++i) Qt[c * bqp + i] = T(0);
}

// St[r][i] = sum_c Qt[c][i] krows[r][c] for KR keys and QT queries: a KR x QV register tile.
template <class T>
inline void logits_tile(const T* Qt, std::int64_t ldq, const T* const* krows, std::int64_t d, T* St,
                        std::int64_t lds) {
  using V = Vec<T>;
  constexpr int W = V::W, KR = Tiles<T>::KR, QV = Tiles<T>::QV;
  V acc[KR][QV];
#pragma GCC unroll 16
  for (int r = 0; r < KR; ++r)
#pragma GCC unroll 4
    for (int u = 0; u < QV; ++u) acc[r][u] = V::zero();
  for (std::int64_t c = 0; c < d; ++c) {
    V qv[QV];
#pragma GCC unroll 4
    for (int u = 0; u < QV; ++u) qv[u] = V::load(Qt + c * ldq + u * W);
#pragma GCC unroll 16
    for (int r = 0; r < KR; ++r) {
      const V kb = V::set1(krows[r][c]);
#pragma GCC unroll 4
      for (int u = 0; u < QV; ++u) acc[r][u] = V::fma(qv[u], kb, acc[r][u]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < KR; ++r)
#pragma GCC unroll 4
    for (int u = 0; u < QV; ++u) acc[r][u].store(St + r * lds + u * W);
}

// Logits of one key block, transposed: St[j][i] for j < jn (keys j0 + j), i < bqp (queries i0 + i),
// with bias added and invisible keys (mask, causal) set to -inf. Keys >= key_length never get here.
template <class T>
void block_logits(const AttentionArgs<T>& a, std::int64_t b, std::int64_t i0, std::int64_t bq,
                  std::int64_t bqp, std::int64_t j0, std::int64_t jn, const T* Qt, const T* zero_row,
                  T* St) {
  using V = Vec<T>;
  constexpr int W = V::W, KR = Tiles<T>::KR, QT = Tiles<T>::QT;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T* krows[KR];
  for (std::int64_t jt = 0; jt < jn; jt += KR) {
    // Keys past the block end read a row of zeros: the tile never needs a tail variant.
    for (int r = 0; r < KR; ++r) krows[r] = jt + r < jn ? a.k.row(b, j0 + jt + r) : zero_row;
    T* st_rows = St + jt * bqp;  // BK is a multiple of KR, so the tile stays inside St
    for (std::int64_t it = 0; it < bqp; it += QT) logits_tile(Qt + it, bqp, krows, a.d, st_rows + it, bqp);
  }
  if (a.bias) {
    if (a.bias.row_stride == 0) {  // one bias per key: a broadcast add along the query lanes
      const T* brow = a.bias.row(b, 0) + j0;
      for (std::int64_t j = 0; j < jn; ++j) {
        const V bj = V::set1(brow[j]);
        for (std::int64_t i = 0; i < bqp; i += W) (V::load(St + j * bqp + i) + bj).store(St + j * bqp + i);
      }
    } else {
      for (std::int64_t i = 0; i < bq; ++i) {
        const T* brow = a.bias.row(b, i0 + i) + j0;
        for (std::int64_t j = 0; j < jn; ++j) St[j * bqp + i] += brow[j];
      }
    }
  }
  if (a.mask) {
    if (a.mask.row_stride == 0) {
      const std::uint8_t* mrow = a.mask.row(b, 0) + j0;
      for (std::int64_t j = 0; j < jn; ++j)
        if (!mrow[j])
          for (std::int64_t i = 0; i < bqp; ++i) St[j * bqp + i] = neg_inf;
    } else {
      for (std::int64_t i = 0; i < bq; ++i) {
        const std::uint8_t* mrow = a.mask.row(b, i0 + i) + j0;
        for (std::int64_t j = 0; j < jn; ++j)
          if (!mrow[j]) St[j * bqp + i] = neg_inf;
      }
    }
  }
  if (a.causal) {  // query i0 + i sees key j0 + j iff j0 + j <= i0 + i + (nk - nq)
    const std::int64_t off = a.nk - a.nq;
    for (std::int64_t j = 0; j < jn; ++j) {
      const std::int64_t first = j0 + j - off - i0;  // first query row that sees this key
      for (std::int64_t i = 0; i < bqp && i < first; ++i) St[j * bqp + i] = neg_inf;
    }
  }
}

// The last key (exclusive) that any query of the block may see.
template <class T>
std::int64_t key_end(const AttentionArgs<T>& a, std::int64_t b, std::int64_t i0, std::int64_t bq) {
  std::int64_t kend = a.key_length ? a.key_length[b] : a.nk;
  if (a.causal) kend = min_scalar(kend, i0 + bq + (a.nk - a.nq));
  return kend > 0 ? kend : 0;
}

// acc[r][c0 + ...] = alpha[r] * acc[r][...] + sum_j Pt[j][r] v[j][...] for MR rows and NVt vectors.
template <class T, int MR, int NVt>
inline void values_tile(T* acc, std::int64_t dv, const T* alpha, const T* Pt, std::int64_t ldp,
                        const T* v, std::int64_t v_rs, std::int64_t jn, std::int64_t c0) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V o[MR][NVt];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const V al = V::set1(alpha[r]);
#pragma GCC unroll 8
    for (int u = 0; u < NVt; ++u) o[r][u] = V::load(acc + r * dv + c0 + u * W) * al;
  }
  for (std::int64_t j = 0; j < jn; ++j) {
    const T* vj = v + j * v_rs + c0;
    V vv[NVt];
#pragma GCC unroll 8
    for (int u = 0; u < NVt; ++u) vv[u] = V::load(vj + u * W);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const V p = V::set1(Pt[j * ldp + r]);
#pragma GCC unroll 8
      for (int u = 0; u < NVt; ++u) o[r][u] = V::fma(p, vv[u], o[r][u]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int u = 0; u < NVt; ++u) o[r][u].store(acc + r * dv + c0 + u * W);
}

// One strip of MR query rows: full register tiles along dv, then single vectors, then scalar columns.
template <class T, int MR>
void values_rows(T* acc, std::int64_t dv, const T* alpha, const T* Pt, std::int64_t ldp, const T* v,
                 std::int64_t v_rs, std::int64_t jn) {
  constexpr int W = Tiles<T>::W, NV = Tiles<T>::NV;
  std::int64_t c0 = 0;
  for (; c0 + NV * W <= dv; c0 += NV * W) values_tile<T, MR, NV>(acc, dv, alpha, Pt, ldp, v, v_rs, jn, c0);
  for (; c0 + W <= dv; c0 += W) values_tile<T, MR, 1>(acc, dv, alpha, Pt, ldp, v, v_rs, jn, c0);
  for (; c0 < dv; ++c0) {
    for (int r = 0; r < MR; ++r) {
      T o = acc[r * dv + c0] * alpha[r];
      for (std::int64_t j = 0; j < jn; ++j) o += Pt[j * ldp + r] * v[j * v_rs + c0];
      acc[r * dv + c0] = o;
    }
  }
}

// acc = diag(alpha) acc + P V for the bq rows of the block (P stored transposed in St).
template <class T>
void accumulate_values(T* acc, std::int64_t dv, const T* alpha, const T* St, std::int64_t bqp,
                       std::int64_t bq, const T* v, std::int64_t v_rs, std::int64_t jn) {
  constexpr int MR = Tiles<T>::MR;
  std::int64_t it = 0;
  for (; it + MR <= bq; it += MR) values_rows<T, MR>(acc + it * dv, dv, alpha + it, St + it, bqp, v, v_rs, jn);
  for (; it + 2 <= bq; it += 2) values_rows<T, 2>(acc + it * dv, dv, alpha + it, St + it, bqp, v, v_rs, jn);
  for (; it < bq; ++it) values_rows<T, 1>(acc + it * dv, dv, alpha + it, St + it, bqp, v, v_rs, jn);
}

// True when every v[j][c] (j < jn, c < dv) is finite: sum of v * 0 is 0, or NaN.
template <class T>
bool values_finite(const T* v, std::int64_t v_rs, std::int64_t jn, std::int64_t dv) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const V zero = V::zero();
  V acc = zero;
  T tail = T(0);
  for (std::int64_t j = 0; j < jn; ++j) {
    const T* vj = v + j * v_rs;
    std::int64_t c = 0;
    for (; c + W <= dv; c += W) acc = V::fma(V::load(vj + c), zero, acc);
    for (; c < dv; ++c) tail += vj[c] * T(0);
  }
  return acc.reduce_add() + tail == T(0);
}

// The same update as accumulate_values, but a key with weight 0 contributes nothing even when its
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
      for (std::int64_t c = 0; c < dv; ++c) o[c] += p * vj[c];
    }
  }
}

}  // namespace

template <class T>
void attention(const AttentionArgs<T>& a) {
  using V = Vec<T>;
  using Tl = Tiles<T>;
  constexpr int W = V::W;
  const std::int64_t batch = a.batch, nq = a.nq, d = a.d, dv = a.dv;
  if (batch == 0 || nq == 0) return;
  const std::int64_t bq_max = min_scalar<std::int64_t>(Tl::BQ, nq);
  const std::int64_t bqp_max = round_up(bq_max, Tl::QQ);
  const std::int64_t nqb = (nq + Tl::BQ - 1) / Tl::BQ;
  const std::int64_t tasks = batch * nqb;
  const double flops = double(batch) * double(nq) * double(a.nk) * double(d + dv);
  const int threads = int(min_scalar<std::int64_t>(flops < 2e5 ? 1 : kernel_threads(), tasks));
  Scratch<T> scratch(bqp_max, d, dv, threads);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T lowest = std::numeric_limits<T>::lowest();

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::int64_t b = task / nqb, i0 = (task % nqb) * Tl::BQ;
    const std::int64_t bq = min_scalar(Tl::BQ + i0, nq) - i0, bqp = round_up(bq, Tl::QQ);
    T* base = scratch.of(omp_get_thread_num());
    T *Qt = base + scratch.qt, *St = base + scratch.st, *acc = base + scratch.acc;
    T *m = base + scratch.stats, *l = m + bqp, *alpha = l + bqp, *zero_row = base + scratch.zero;
    for (std::int64_t c = 0; c < d; ++c) zero_row[c] = T(0);
    for (std::int64_t i = 0; i < bqp; ++i) m[i] = neg_inf, l[i] = T(0);
    for (std::int64_t x = 0; x < bqp * dv; ++x) acc[x] = T(0);
    pack_queries(a, b, i0, bq, bqp, Qt);

    const std::int64_t kend = key_end(a, b, i0, bq);
    for (std::int64_t j0 = 0; j0 < kend; j0 += Tl::BK) {
      const std::int64_t jn = min_scalar<std::int64_t>(Tl::BK, kend - j0);
      block_logits(a, b, i0, bq, bqp, j0, jn, Qt, zero_row, St);
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
      // Non-finite values are rare: scanning for them costs ~1/BQ of the work and keeps a NaN at a
      // masked key out of the rows that cannot see it.
      if (values_finite(vb, a.v.row_stride, jn, dv))
        accumulate_values(acc, dv, alpha, St, bqp, bq, vb, a.v.row_stride, jn);
      else
        accumulate_values_skipping_zeros(acc, dv, alpha, St, bqp, bq, vb, a.v.row_stride, jn);
    }

    T* out = a.out + (b * nq + i0) * dv;
    for (std::int64_t i = 0; i < bq; ++i) {
      const T li = l[i];
      // li == 0: nothing visible -> zeros. NaN li (NaN inputs) falls through and stays NaN.
      const T inv = T(1) / li;
      for (std::int64_t c = 0; c < dv; ++c) out[i * dv + c] = li == T(0) ? T(0) : acc[i * dv + c] * inv;
      if (a.lse) a.lse[b * nq + i0 + i] = li == T(0) ? neg_inf : m[i] + std::log(li);
    }
  }
}

template <class T>
void attention_weights(const AttentionWeightsArgs<T>& w) {
  using V = Vec<T>;
  using Tl = Tiles<T>;
  constexpr int W = V::W;
  const AttentionArgs<T>& a = w.attn;
  const std::int64_t batch = a.batch, nq = a.nq, nk = a.nk, d = a.d;
  if (batch == 0 || nq == 0) return;
  const std::int64_t bqp_max = round_up(min_scalar<std::int64_t>(Tl::BQ, nq), Tl::QQ);
  const std::int64_t nqb = (nq + Tl::BQ - 1) / Tl::BQ;
  const std::int64_t tasks = batch * nqb;
  const double flops = double(batch) * double(nq) * double(nk) * double(d);
  const int threads = int(min_scalar<std::int64_t>(flops < 2e5 ? 1 : kernel_threads(), tasks));
  Scratch<T> scratch(bqp_max, d, 0, threads);
  const T lowest = std::numeric_limits<T>::lowest();

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::int64_t b = task / nqb, i0 = (task % nqb) * Tl::BQ;
    const std::int64_t bq = min_scalar(Tl::BQ + i0, nq) - i0, bqp = round_up(bq, Tl::QQ);
    T* base = scratch.of(omp_get_thread_num());
    T *Qt = base + scratch.qt, *St = base + scratch.st, *lse = base + scratch.stats;
    T* zero_row = base + scratch.zero;
    for (std::int64_t c = 0; c < d; ++c) zero_row[c] = T(0);
    for (std::int64_t i = 0; i < bqp; ++i) lse[i] = i < bq ? max_scalar(lowest, a.lse[b * nq + i0 + i]) : T(0);
    pack_queries(a, b, i0, bq, bqp, Qt);
    T* out = w.weights + (b * nq + i0) * nk;
    const std::int64_t kend = key_end(a, b, i0, bq);
    for (std::int64_t i = 0; i < bq; ++i)
      for (std::int64_t j = kend; j < nk; ++j) out[i * nk + j] = T(0);
    for (std::int64_t j0 = 0; j0 < kend; j0 += Tl::BK) {
      const std::int64_t jn = min_scalar<std::int64_t>(Tl::BK, kend - j0);
      block_logits(a, b, i0, bq, bqp, j0, jn, Qt, zero_row, St);
      for (std::int64_t j = 0; j < jn; ++j)
        for (std::int64_t g = 0; g < bqp; g += W)
          exp(V::load(St + j * bqp + g) - V::load(lse + g)).store(St + j * bqp + g);
      for (std::int64_t i = 0; i < bq; ++i)
        for (std::int64_t j = 0; j < jn; ++j) out[i * nk + j0 + j] = St[j * bqp + i];
    }
  }
}

template void attention<float>(const AttentionArgs<float>&);
template void attention<double>(const AttentionArgs<double>&);
template void attention_weights<float>(const AttentionWeightsArgs<float>&);
template void attention_weights<double>(const AttentionWeightsArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

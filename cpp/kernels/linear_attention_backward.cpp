// Backward of causal linear attention (see CausalLinearBackwardArgs in attnkit/linear_attention.h),
// by chunks of rows as the forward, parallel over batch items. A forward-time sweep with the prefix
// state (S, Z) gives den, dnum, dden and dq = dnum S_prev^T + dden Z_prev^T + G phi(K), with
// G = tril(dnum V^T + dden 1^T) inside the chunk; a reverse-time sweep with the suffix state (R, Y)
// gives dk = V R_next^T + Y_next + G^T phi(Q) and dv = phi(K) R_next + tril(phi(Q) phi(K)^T)^T dnum.
// Both states are carried in double; the chunk's products run in T.
#include "attnkit/isa.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"
#include "linear_causal_chunk.h"
#include "linear_tiles.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
struct BackwardWork {
  ChunkBuffers<T> buf;
  T *pkT, *vT, *dnum, *Sf, *SfT, *prod, *Zf, *Zi, *zsum;  // Sf, SfT, Zf: S, Z or R, Y rounded
  T* dphi;  // a chunk's dphi (kChunk x D) for row maps
  double *S, *Z;  // S, Z in the forward sweep, then R, Y in the reverse one
  // Per chunk, its triangles A and G (2 x kChunk x kChunk) from the forward sweep, which the reverse
  // one reads again: kept, not recomputed (O(n kChunk) per thread, the size of a few rows of q).
  T* scores;
  T* A(std::int64_t r0) const { return scores + r0 / kChunk * 2 * kChunk * kChunk; }
  T* G(std::int64_t r0) const { return A(r0) + kChunk * kChunk; }
};

// A = tril(phi(Q) phi(K)^T) (rows x kn) of chunk c.
template <class T>
void key_scores(const CausalChunk<T>& c, std::int64_t D, const BackwardWork<T>& w) {
  chunk_scores(w.A(c.r0), c.pq, c.pk, w.pkT, c.rows, c.kn, D);
}

// G = tril(dnum V^T + dden 1^T) (rows x kn) of chunk c: G_ij = dnum_i.v_j + dden_i for j <= i.
template <class T>
void gradient_scores(const CausalChunk<T>& c, const T* dnum, const T* dden, std::int64_t dv,
                     const BackwardWork<T>& w) {
  const std::int64_t rows = c.rows, kn = c.kn;
  T* G = w.G(c.r0);
  transpose(w.vT, c.v, kn, dv);
  lower_product(G, kn, dnum, dv, w.vT, kn, rows, dv, kn);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < min_scalar(r + 1, kn); ++j) G[r * kn + j] += dden[r];
}

// S (or R) += and Z (or Y) += x^T y and x^T s (s null: ones) over rows, summed in T.
template <class T>
void add_state(const T* x, const T* y, const T* s, std::int64_t rows, std::int64_t D, std::int64_t dv,
               const BackwardWork<T>& w) {
  if (rows == 0) return;
  for (std::int64_t i = 0; i < D * dv; ++i) w.prod[i] = T(0);
  for (std::int64_t i = 0; i < D; ++i) w.zsum[i] = T(0);
  add_outer_products<T>(w.prod, w.zsum, x, y, s, rows, D, dv);
  add_into(w.S, w.prod, D * dv);
  add_into(w.Z, w.zsum, D);
}

// The state in double rounded to T: Sf (D x dv), SfT = Sf^T, Zf.
template <class T>
void round_state(std::int64_t D, std::int64_t dv, const BackwardWork<T>& w) {
  for (std::int64_t x = 0; x < D * dv; ++x) w.Sf[x] = T(w.S[x]);
  transpose(w.SfT, w.Sf, D, dv);
  for (std::int64_t x = 0; x < D; ++x) w.Zf[x] = T(w.Z[x]);
}

// Forward sweep over chunk c: dnum into g.dv's rows (until the reverse sweep), dden into dden, dq, and
// the chunk's triangles. S is zero unless with_s.
template <class T>
void query_chunk(const CausalLinearBackwardArgs<T>& g, std::int64_t b, const CausalChunk<T>& c, T* dden,
                 const BackwardWork<T>& w, bool with_s) {
  const CausalLinearArgs<T>& a = g.fwd;
  const std::int64_t D = a.D, dv = a.dv, rows = c.rows, kn = c.kn, row0 = b * a.n + c.r0;
  T* dnum = g.dv + row0 * dv;
  T* dq = g.dq + row0 * a.d;
  T* dphi = row_map(a.phi) ? w.dphi : dq;  // else d = D: in place
  if (kn > 0) key_scores(c, D, w);
  for (std::int64_t x = 0; x < D; ++x) w.Zi[x] = w.Zf[x];
  for (std::int64_t r = 0; r < rows; ++r) {
    // Rows the forward zeroed pass no gradient; a NaN den stays NaN.
    const GuardedDen<T> den = guarded_den(c, w.A(c.r0), w.Zf, w.Zi, r, D, a.eps);
    const T inv = den.zeroed ? T(0) : T(1) / den.den;
    for (std::int64_t x = 0; x < dv; ++x) dnum[r * dv + x] = g.dout[(row0 + r) * dv + x] * inv;
    dden[r] = den.zeroed ? T(0) : -dot(g.dout + (row0 + r) * dv, a.out + (row0 + r) * dv, dv) * inv;
    for (std::int64_t x = 0; x < D; ++x) dphi[r * D + x] = w.Zf[x] * dden[r];
  }
  if (with_s) tile_product(dphi, D, dnum, dv, 1, w.SfT, D, rows, dv, D);  // + dnum S_prev^T
  if (kn > 0) {
    gradient_scores(c, dnum, dden, dv, w);
    lower_times(dphi, D, w.G(c.r0), kn, 1, c.pk, D, rows, kn, D);  // + G phi(K)
  }
  features_backward(a, a.q + row0 * a.d, rows, c.pq, dphi, dq, true);
}

// Reverse sweep over chunk c: dk and dv of its rows (zero at padded keys) from the suffix state after it
// (R zero unless with_r) and the forward sweep's triangles; dden reaches it only through G and Y.
template <class T>
void key_chunk(const CausalLinearBackwardArgs<T>& g, std::int64_t b, const CausalChunk<T>& c, const BackwardWork<T>& w,
               bool with_r) {
  const CausalLinearArgs<T>& a = g.fwd;
  const std::int64_t D = a.D, dv = a.dv, rows = c.rows, kn = c.kn, row0 = b * a.n + c.r0;
  const std::uint8_t* keep = a.keep ? a.keep + row0 : nullptr;
  T* dk = g.dk + row0 * a.d;
  T* dphi = row_map(a.phi) ? w.dphi : dk;  // else d = D: in place
  T* dvo = g.dv + row0 * dv;
  for (std::int64_t x = 0; x < rows * dv; ++x) w.dnum[x] = dvo[x];
  for (std::int64_t x = 0; x < kn * dv; ++x) dvo[x] = T(0);
  for (std::int64_t j = 0; j < kn; ++j)
    for (std::int64_t x = 0; x < D; ++x) dphi[j * D + x] = w.Zf[x];  // Y_next
  if (kn > 0 && with_r) {
    tile_product(dphi, D, c.v, dv, 1, w.SfT, D, kn, dv, D);    // + V R_next^T
    tile_product(dvo, dv, c.pk, D, 1, w.Sf, dv, kn, D, dv);  // phi(K) R_next
  }
  if (kn > 0) {
    upper_times(dphi, D, w.G(c.r0), 1, kn, c.pq, D, kn, rows, D);    // + G^T phi(Q)
    upper_times(dvo, dv, w.A(c.r0), 1, kn, w.dnum, dv, kn, rows, dv);  // + A^T dnum
  }
  for (std::int64_t j = 0; j < rows; ++j) {
    if (j < kn && (!keep || keep[j])) continue;
    for (std::int64_t x = 0; x < a.d; ++x) dk[j * a.d + x] = T(0);
    for (std::int64_t x = 0; x < dv; ++x) dvo[j * dv + x] = T(0);
  }
  for (std::int64_t j = first_kept(keep, 0, kn); j < kn;) {  // k read at real keys only
    const std::int64_t end = run_end(keep, j, kn);
    features_backward(a, a.k + (row0 + j) * a.d, end - j, c.pk + j * D, dphi + j * D, dk + j * a.d, false);
    j = first_kept(keep, end, kn);
  }
}

template <class T>
void backward_item(const CausalLinearBackwardArgs<T>& g, std::int64_t b, const BackwardWork<T>& w, T* dden_all) {
  const CausalLinearArgs<T>& a = g.fwd;
  const std::int64_t n = a.n, D = a.D, dv = a.dv;
  T* dden = dden_all + b * n;
  for (std::int64_t x = 0; x < D * dv; ++x) w.S[x] = 0.0;
  for (std::int64_t x = 0; x < D; ++x) w.Z[x] = 0.0;
  // As in the forward: no products with a state still zero, no update after a sweep's last chunk.
  bool empty = true;
  for (std::int64_t cs = 0; cs < n; cs += kChunk) {
    round_state(D, dv, w);
    const CausalChunk<T> c = load_chunk(a, b, cs, w.buf);
    query_chunk(g, b, c, dden + cs, w, !empty);
    if (cs + kChunk < n) add_state(c.pk, c.v, static_cast<const T*>(nullptr), c.kn, D, dv, w);
    empty = empty && c.kn == 0;
  }
  for (std::int64_t x = 0; x < D * dv; ++x) w.S[x] = 0.0;
  for (std::int64_t x = 0; x < D; ++x) w.Z[x] = 0.0;
  for (std::int64_t cs = (n - 1) / kChunk * kChunk; cs >= 0; cs -= kChunk) {
    round_state(D, dv, w);
    const CausalChunk<T> c = load_chunk(a, b, cs, w.buf);
    key_chunk(g, b, c, w, cs + kChunk < n);
    if (cs > 0) add_state(c.pq, w.dnum, dden + cs, c.rows, D, dv, w);  // R += phi(Q)^T dnum, Y += phi(Q)^T dden
  }
}

}  // namespace

template <class T>
void causal_linear_attention_backward(const CausalLinearBackwardArgs<T>& g) {
  const CausalLinearArgs<T>& a = g.fwd;
  const std::int64_t batch = a.batch, n = a.n, D = a.D, dv = a.dv;
  if (batch == 0 || n == 0) return;
  const int threads = int(min_scalar<std::int64_t>(kernel_threads(), batch));
  const std::int64_t per_t = 4 * kChunk * D + 3 * kChunk * dv + 3 * D * dv + 3 * D + 64;
  const std::int64_t per_s = (n + kChunk - 1) / kChunk * 2 * kChunk * kChunk;
  const std::int64_t per_d = D * dv + D;
  auto scratch = allocate<T>(std::size_t(threads * per_t));
  auto scores = allocate<T>(std::size_t(threads * per_s));
  auto states = allocate<double>(std::size_t(threads * per_d));
  auto dden = allocate<T>(std::size_t(batch * n));

  claim_loop(threads, batch, 1, [&](std::int64_t b, int t) {
    T* p = scratch.get() + std::int64_t(t) * per_t;
    double* s = states.get() + std::int64_t(t) * per_d;
    BackwardWork<T> w;
    w.buf.pq = p, w.buf.pk = p + kChunk * D, w.buf.v = p + 2 * kChunk * D;
    w.pkT = w.buf.v + kChunk * dv, w.vT = w.pkT + kChunk * D, w.dnum = w.vT + kChunk * dv;
    w.Sf = w.dnum + kChunk * dv;
    w.SfT = w.Sf + D * dv, w.prod = w.SfT + D * dv, w.Zf = w.prod + D * dv, w.Zi = w.Zf + D, w.zsum = w.Zi + D;
    w.dphi = w.zsum + D;
    w.S = s, w.Z = s + D * dv;
    w.scores = scores.get() + std::int64_t(t) * per_s;
    backward_item(g, b, w, dden.get());
  });
}

template void causal_linear_attention_backward<float>(const CausalLinearBackwardArgs<float>&);
template void causal_linear_attention_backward<double>(const CausalLinearBackwardArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

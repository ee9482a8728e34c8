// Causal linear attention by chunks of rows (see CausalLinearArgs in attnkit/linear_attention.h).
//
// Per chunk of C rows, all GEMM-shaped: out = phi(Q) S_prev + tril(phi(Q) phi(K)^T) V, the normaliser
// likewise from Z_prev and the same triangle, then S += phi(K)^T V, Z += the column sums of phi(K).
// The products run in T; S and Z are carried in double, rounded to T once per chunk. When there are
// fewer batch items than threads, each sequence is cut into segments: the segments' state totals are
// summed first (phase 1), prefix-added (phase 2), and then every segment runs from its own starting
// state (phase 3).
#include "attnkit/isa.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"
#include "linear_causal_chunk.h"
#include "linear_tiles.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
struct ForwardWork {
  ChunkBuffers<T> buf;
  T *pkT, *A, *Sf, *prod, *Zf, *Zi, *zsum;  // pkT: phi(K)^T (D x kn); A: the triangle (rows x kn)
};

// S (D x dv) += phi(K)^T V and Z (D) += the column sums of phi(K) over chunk c's keys, summed in T.
template <class T>
void add_chunk_state(const CausalChunk<T>& c, std::int64_t D, std::int64_t dv, double* S, double* Z,
                     const ForwardWork<T>& w) {
  if (c.kn == 0) return;
  for (std::int64_t x = 0; x < D * dv; ++x) w.prod[x] = T(0);
  for (std::int64_t x = 0; x < D; ++x) w.zsum[x] = T(0);
  add_outer_products<T>(w.prod, w.zsum, c.pk, c.v, nullptr, c.kn, D, dv);
  add_into(S, w.prod, D * dv);
  add_into(Z, w.zsum, D);
}

// The output rows of chunk c of batch item b, from the state before it (w.Sf, w.Zf; S zero unless with_s).
template <class T>
void chunk_rows(const CausalLinearArgs<T>& a, std::int64_t b, const CausalChunk<T>& c, const ForwardWork<T>& w,
                bool with_s) {
  const std::int64_t D = a.D, dv = a.dv, rows = c.rows, kn = c.kn;
  T* out = a.out + (b * a.n + c.r0) * dv;
  for (std::int64_t x = 0; x < rows * dv; ++x) out[x] = T(0);
  if (with_s) tile_product(out, dv, c.pq, D, 1, w.Sf, dv, rows, D, dv);  // phi(Q) S_prev
  if (kn > 0) {
    chunk_scores(w.A, c.pq, c.pk, w.pkT, rows, kn, D);
    lower_times(out, dv, w.A, kn, 1, c.v, dv, rows, kn, dv);  // + tril(phi(Q) phi(K)^T) V
  }
  for (std::int64_t x = 0; x < D; ++x) w.Zi[x] = w.Zf[x];
  for (std::int64_t r = 0; r < rows; ++r) {
    const GuardedDen<T> g = guarded_den(c, w.A, w.Zf, w.Zi, r, D, a.eps);
    const T inv = T(1) / g.den;
    T* o = out + r * dv;
    for (std::int64_t x = 0; x < dv; ++x) o[x] = g.zeroed ? T(0) : o[x] * inv;
  }
}

// Rows [r0, r1) of batch item b (r0 a multiple of kChunk), from state (S, Z), which is advanced past r1.
template <class T>
void causal_segment(const CausalLinearArgs<T>& a, std::int64_t b, std::int64_t r0, std::int64_t r1, double* S,
                    double* Z, const ForwardWork<T>& w) {
  const std::int64_t D = a.D, dv = a.dv;
  // Short sequences are one or two chunks: skip the products with a state still zero, and the
  // update after the last row unless the caller wants that state.
  bool empty = r0 == 0;
  for (std::int64_t cs = r0; cs < r1; cs += kChunk) {
    if (!empty)  // else S is zero and not read (Z is, and zero)
      for (std::int64_t x = 0; x < D * dv; ++x) w.Sf[x] = T(S[x]);
    for (std::int64_t x = 0; x < D; ++x) w.Zf[x] = T(Z[x]);
    const CausalChunk<T> c = load_chunk(a, b, cs, w.buf);
    chunk_rows(a, b, c, w, !empty);
    if (cs + kChunk < a.n || a.state_s) add_chunk_state(c, D, dv, S, Z, w);
    empty = empty && c.kn == 0;
  }
}

}  // namespace

template <class T>
void causal_linear_attention(const CausalLinearArgs<T>& a) {
  const std::int64_t batch = a.batch, n = a.n, D = a.D, dv = a.dv;
  if (batch == 0 || n == 0) return;
  const std::int64_t nchunks = (n + kChunk - 1) / kChunk;
  const int max_threads = kernel_threads();
  const std::int64_t nseg =
      batch >= max_threads ? 1 : min_scalar<std::int64_t>(nchunks, (max_threads + batch - 1) / batch);
  const std::int64_t tasks = batch * nseg;
  const int threads = int(min_scalar<std::int64_t>(max_threads, tasks));
  const std::int64_t state = D * dv + D;  // S then Z, in double
  const std::int64_t per_thread = 3 * kChunk * D + kChunk * dv + kChunk * kChunk + 2 * D * dv + 3 * D + 64;
  // One state per segment when items are cut into segments; else one per thread, zeroed per item
  // (one per item, zeroed up front, was a serial pass over batch x D x dv doubles: 35 MB at D = 1057).
  auto states = allocate<double>(std::size_t((nseg > 1 ? tasks : threads) * state));
  auto scratch = allocate<T>(std::size_t(threads * per_thread));
  auto seg_begin = [&](std::int64_t s) { return min_scalar(n, (s * nchunks / nseg) * kChunk); };
  auto write_state = [&](std::int64_t b, const double* S) {  // item b's state after its last row
    for (std::int64_t x = 0; x < D * dv; ++x) a.state_s[b * D * dv + x] = S[x];
    for (std::int64_t d = 0; d < D; ++d) a.state_z[b * D + d] = S[D * dv + d];
  };
  auto workspace = [&](int t) {
    T* p = scratch.get() + std::int64_t(t) * per_thread;
    ForwardWork<T> w;
    w.buf.pq = p, w.buf.pk = p + kChunk * D, w.buf.v = p + 2 * kChunk * D;
    w.pkT = w.buf.v + kChunk * dv, w.A = w.pkT + kChunk * D, w.Sf = w.A + kChunk * kChunk;
    w.prod = w.Sf + D * dv, w.Zf = w.prod + D * dv, w.Zi = w.Zf + D, w.zsum = w.Zi + D;
    return w;
  };
  if (nseg > 1) {
    for (std::int64_t x = 0; x < tasks * state; ++x) states.get()[x] = 0.0;
    // Phase 1: each segment but the last sums its own state into slot (b, s + 1).
    static_loop(threads, tasks, [&](std::int64_t task, int t) {
      const std::int64_t b = task / nseg, s = task % nseg;
      if (s == nseg - 1) return;
      const ForwardWork<T> w = workspace(t);
      double* S = states.get() + (b * nseg + s + 1) * state;
      for (std::int64_t cs = seg_begin(s); cs < seg_begin(s + 1); cs += kChunk)
        add_chunk_state(load_chunk(a, b, cs, w.buf, false), D, dv, S, S + D * dv, w);
    });
    // Phase 2: prefix sums over segments give each segment its starting state.
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t s = 2; s < nseg; ++s)
        add_into(states.get() + (b * nseg + s) * state, states.get() + (b * nseg + s - 1) * state, state);
  }
  // Phase 3: every segment from its starting state.
  static_loop(threads, tasks, [&](std::int64_t task, int t) {
    const std::int64_t b = task / nseg, s = task % nseg;
    double* S = states.get() + (nseg > 1 ? task : t) * state;
    if (nseg == 1)
      for (std::int64_t x = 0; x < state; ++x) S[x] = 0.0;
    causal_segment(a, b, seg_begin(s), seg_begin(s + 1), S, S + D * dv, workspace(t));
    if (nseg == 1 && a.state_s) write_state(b, S);
  });
  if (a.state_s && nseg > 1)
    for (std::int64_t b = 0; b < batch; ++b) write_state(b, states.get() + (b * nseg + nseg - 1) * state);
}

template void causal_linear_attention<float>(const CausalLinearArgs<float>&);
template void causal_linear_attention<double>(const CausalLinearArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

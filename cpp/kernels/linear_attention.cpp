// Causal linear attention by chunked prefix sums (see attnkit/linear_attention.h).
//
// Rows are taken in chunks of C: inside a chunk the visible pairs are summed directly (C^2 / 2 dot
// products), the earlier chunks through the running state (S, Z), which is kept in double and
// rounded to T once per chunk for the products. When there are fewer batch items than threads, each
// sequence is cut into segments: the segments' state totals are summed first (phase 1), prefix-added
// (phase 2), and then every segment runs from its own starting state (phase 3).
#include <omp.h>


#include "attnkit/isa.h"
#include "kernels.h"
#include "linear_tiles.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
struct Workspace {
  T *Sf, *Zf, *Zi, *dS, *dZ, *coef;  // Zi: Z_i, that is Zf plus the chunk's keys up to row i
};

// dS = sum_{j in [r0, r1)} phi_k[j] v[j]^T, dZ = sum phi_k[j], accumulated in T over one chunk.
template <class T>
void chunk_state(const CausalLinearArgs<T>& a, std::int64_t b, std::int64_t r0, std::int64_t r1,
                 const Workspace<T>& w) {
  const std::int64_t D = a.D, dv = a.dv;
  const T* pk = a.phi_k + (b * a.n + r0) * D;
  const T* v = a.v + (b * a.n + r0) * dv;
  const std::int64_t rows = r1 - r0;
  for (std::int64_t x = 0; x < D * dv; ++x) w.dS[x] = T(0);
  for (std::int64_t d = 0; d < D; ++d) w.dZ[d] = T(0);
  for (std::int64_t d = 0; d < D; ++d) {
    T z = T(0);
    for (std::int64_t j = 0; j < rows; ++j) z += (w.coef[j] = pk[j * D + d]);
    w.dZ[d] = z;
    axpy_rows(w.dS + d * dv, w.coef, v, dv, rows, dv);
  }
}

// Rows [r0, r1) of batch item b, from state (S, Z), which is advanced past r1.
template <class T>
void causal_segment(const CausalLinearArgs<T>& a, std::int64_t b, std::int64_t r0, std::int64_t r1,
                    double* S, double* Z, const Workspace<T>& w) {
  const std::int64_t D = a.D, dv = a.dv, n = a.n;
  const T eps = a.eps;
  for (std::int64_t cs = r0; cs < r1; cs += kChunk) {
    const std::int64_t ce = min_scalar(cs + kChunk, r1);
    for (std::int64_t x = 0; x < D * dv; ++x) w.Sf[x] = T(S[x]);
    for (std::int64_t d = 0; d < D; ++d) w.Zi[d] = w.Zf[d] = T(Z[d]);
    for (std::int64_t i = cs; i < ce; ++i) {
      const T* pq = a.phi_q + (b * n + i) * D;
      T* o = a.out + (b * n + i) * dv;
      for (std::int64_t c = 0; c < dv; ++c) o[c] = T(0);
      axpy_rows(o, pq, w.Sf, dv, D, dv);  // phi_q[i] S_{cs-1}
      T den = dot(pq, w.Zf, D);
      const std::int64_t visible = i - cs + 1;  // keys cs..i of this chunk
      for (std::int64_t j = 0; j < visible; ++j) {
        w.coef[j] = dot(pq, a.phi_k + (b * n + cs + j) * D, D);
        den += w.coef[j];
      }
      axpy_rows(o, w.coef, a.v + (b * n + cs) * dv, dv, visible, dv);
      add_into(w.Zi, a.phi_k + (b * n + i) * D, D);
      const bool zeroed = zeroed_row(den, dot<true>(pq, w.Zi, D), eps);
      const T inv = T(1) / den;
      for (std::int64_t c = 0; c < dv; ++c) o[c] = zeroed ? T(0) : o[c] * inv;
    }
    chunk_state(a, b, cs, ce, w);
    add_into(S, w.dS, D * dv);
    add_into(Z, w.dZ, D);
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
  const std::int64_t per_thread = 2 * D * dv + 3 * D + kChunk + 64;
  auto states = allocate<double>(std::size_t(tasks * state));
  auto scratch = allocate<T>(std::size_t(threads * per_thread));
  auto seg_begin = [&](std::int64_t s) { return min_scalar(n, (s * nchunks / nseg) * kChunk); };
  auto workspace = [&](int t) {
    T* base = scratch.get() + std::int64_t(t) * per_thread;
    T* zf = base + D * dv;
    return Workspace<T>{base, zf, zf + D, zf + 2 * D, zf + 2 * D + D * dv, zf + 2 * D + D * dv + D};
  };
  for (std::int64_t x = 0; x < tasks * state; ++x) states.get()[x] = 0.0;

  if (nseg > 1) {
    // Phase 1: each segment but the last sums its own state into slot (b, s + 1).
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t task = 0; task < tasks; ++task) {
      const std::int64_t b = task / nseg, s = task % nseg;
      if (s == nseg - 1) continue;
      const Workspace<T> w = workspace(omp_get_thread_num());
      double* S = states.get() + (b * nseg + s + 1) * state;
      for (std::int64_t cs = seg_begin(s); cs < seg_begin(s + 1); cs += kChunk) {
        chunk_state(a, b, cs, min_scalar(cs + kChunk, seg_begin(s + 1)), w);
        add_into(S, w.dS, D * dv);
        add_into(S + D * dv, w.dZ, D);
      }
    }
    // Phase 2: prefix sums over segments give each segment its starting state.
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t s = 2; s < nseg; ++s)
        add_into(states.get() + (b * nseg + s) * state, states.get() + (b * nseg + s - 1) * state, state);
  }
  // Phase 3: every segment from its starting state.
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t task = 0; task < tasks; ++task) {
    const std::int64_t b = task / nseg, s = task % nseg;
    double* S = states.get() + task * state;
    causal_segment(a, b, seg_begin(s), seg_begin(s + 1), S, S + D * dv, workspace(omp_get_thread_num()));
  }
  if (a.state_s) {
    for (std::int64_t b = 0; b < batch; ++b) {
      const double* S = states.get() + (b * nseg + nseg - 1) * state;
      for (std::int64_t x = 0; x < D * dv; ++x) a.state_s[b * D * dv + x] = S[x];
      for (std::int64_t d = 0; d < D; ++d) a.state_z[b * D + d] = S[D * dv + d];
    }
  }
}

template void causal_linear_attention<float>(const CausalLinearArgs<float>&);
template void causal_linear_attention<double>(const CausalLinearArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

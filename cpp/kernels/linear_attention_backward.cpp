// Backward of causal linear attention (see CausalLinearBackwardArgs in attnkit/linear_attention.h),
// linear in n: a forward-time sweep with the prefix state (S, Z) gives dphi_q, then a reverse-time
// sweep with the suffix state (R, Y) gives dphi_k and dv. Inside a chunk the pairs j <= i are summed
// directly; both states are carried in double. Parallel over batch items.
#include <omp.h>

#include "attnkit/isa.h"
#include "kernels.h"
#include "linear_tiles.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
struct BackwardWork {
  T *SfT, *Zf, *Zi, *Rf, *RfT, *Yf, *coef, *dnum, *dden;  // Zi: Z_i, as in the forward
  double *S, *Z, *R, *Y;
};

// a[r][c] = x[c][r] for an (rows x cols) double matrix into T.
template <class T>
void transpose_into(T* out, const double* x, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = T(x[r * cols + c]);
}

template <class T>
void round_into(T* out, const double* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = T(x[i]);
}

template <class T>
void backward_item(const CausalLinearBackwardArgs<T>& g, std::int64_t b, const BackwardWork<T>& w,
                   T* dden_all) {
  const CausalLinearArgs<T>& a = g.fwd;
  const std::int64_t n = a.n, D = a.D, dv = a.dv;
  const T eps = a.eps;
  const T* phi_q = a.phi_q + b * n * D;
  const T* phi_k = a.phi_k + b * n * D;
  const T* v = a.v + b * n * dv;
  const T* out = a.out + b * n * dv;
  const T* dout = g.dout + b * n * dv;
  T* dphi_q = g.dphi_q + b * n * D;
  T* dphi_k = g.dphi_k + b * n * D;
  T* dvo = g.dv + b * n * dv;  // holds dnum between the sweeps, then dv
  T* dden = dden_all + b * n;
  for (std::int64_t x = 0; x < D * dv; ++x) w.S[x] = 0.0, w.R[x] = 0.0;
  for (std::int64_t x = 0; x < D; ++x) w.Z[x] = 0.0, w.Y[x] = 0.0;

  // Forward sweep: den_i from Z_i; dnum_i, dden_i; dphi_q[i] = S_i dnum_i + Z_i dden_i.
  for (std::int64_t cs = 0; cs < n; cs += kChunk) {
    const std::int64_t ce = min_scalar(cs + kChunk, n);
    transpose_into(w.SfT, w.S, D, dv);
    round_into(w.Zf, w.Z, D);
    for (std::int64_t x = 0; x < D; ++x) w.Zi[x] = w.Zf[x];
    for (std::int64_t i = cs; i < ce; ++i) {
      const T* pq = phi_q + i * D;
      T den = dot(pq, w.Zf, D);
      for (std::int64_t j = cs; j <= i; ++j) den += dot(pq, phi_k + j * D, D);
      add_into(w.Zi, phi_k + i * D, D);
      // Rows the forward zeroed pass no gradient; a NaN den stays NaN.
      const bool zeroed = zeroed_row(den, dot<true>(pq, w.Zi, D), eps);
      const T inv = zeroed ? T(0) : T(1) / den;
      T* dn = dvo + i * dv;
      for (std::int64_t c = 0; c < dv; ++c) dn[c] = dout[i * dv + c] * inv;
      dden[i] = zeroed ? T(0) : -dot(dout + i * dv, out + i * dv, dv) * inv;
      T* dq = dphi_q + i * D;
      for (std::int64_t x = 0; x < D; ++x) dq[x] = w.Zf[x] * dden[i];
      axpy_rows(dq, dn, w.SfT, D, dv, D);  // S_prev dnum_i
      const std::int64_t visible = i - cs + 1;
      for (std::int64_t j = 0; j < visible; ++j) w.coef[j] = dot(v + (cs + j) * dv, dn, dv) + dden[i];
      axpy_rows(dq, w.coef, phi_k + cs * D, D, visible, D);
    }
    for (std::int64_t j = cs; j < ce; ++j) {  // S += phi_k[j] v[j]^T, Z += phi_k[j]
      const T* pk = phi_k + j * D;
      for (std::int64_t x = 0; x < D; ++x) {
        w.Z[x] += double(pk[x]);
        for (std::int64_t c = 0; c < dv; ++c) w.S[x * dv + c] += double(pk[x]) * double(v[j * dv + c]);
      }
    }
  }

  // Reverse sweep: dphi_k[j] = R_j v[j] + Y_j, dv[j] = R_j^T phi_k[j], R_j = sum_{i>=j} phi_q[i] dnum_i^T.
  const std::int64_t last = (n - 1) / kChunk * kChunk;
  for (std::int64_t cs = last; cs >= 0; cs -= kChunk) {
    const std::int64_t ce = min_scalar(cs + kChunk, n), rows = ce - cs;
    round_into(w.Rf, w.R, D * dv);
    transpose_into(w.RfT, w.R, D, dv);
    round_into(w.Yf, w.Y, D);
    for (std::int64_t x = 0; x < rows * dv; ++x) w.dnum[x] = dvo[cs * dv + x];
    for (std::int64_t x = 0; x < rows; ++x) w.dden[x] = dden[cs + x];
    for (std::int64_t j = cs; j < ce; ++j) {
      const T* pk = phi_k + j * D;
      const T* vj = v + j * dv;
      T* dk = dphi_k + j * D;
      for (std::int64_t x = 0; x < D; ++x) dk[x] = w.Yf[x];
      axpy_rows(dk, vj, w.RfT, D, dv, D);  // R_next v_j
      T* dvj = dvo + j * dv;
      for (std::int64_t c = 0; c < dv; ++c) dvj[c] = T(0);
      axpy_rows(dvj, pk, w.Rf, dv, D, dv);  // R_next^T phi_k[j]
      const std::int64_t count = ce - j;     // queries i = j .. ce-1 of this chunk
      for (std::int64_t u = 0; u < count; ++u)
        w.coef[u] = dot(w.dnum + (j - cs + u) * dv, vj, dv) + w.dden[j - cs + u];
      axpy_rows(dk, w.coef, phi_q + j * D, D, count, D);
      for (std::int64_t u = 0; u < count; ++u) w.coef[u] = dot(phi_q + (j + u) * D, pk, D);
      axpy_rows(dvj, w.coef, w.dnum + (j - cs) * dv, dv, count, dv);
    }
    for (std::int64_t i = cs; i < ce; ++i) {  // R += phi_q[i] dnum_i^T, Y += phi_q[i] dden_i
      const T* pq = phi_q + i * D;
      const T* dn = w.dnum + (i - cs) * dv;
      for (std::int64_t x = 0; x < D; ++x) {
        w.Y[x] += double(pq[x]) * double(w.dden[i - cs]);
        for (std::int64_t c = 0; c < dv; ++c) w.R[x * dv + c] += double(pq[x]) * double(dn[c]);
      }
    }
  }
}

}  // namespace

template <class T>
void causal_linear_attention_backward(const CausalLinearBackwardArgs<T>& g) {
  const CausalLinearArgs<T>& a = g.fwd;
  const std::int64_t batch = a.batch, n = a.n, D = a.D, dv = a.dv;
  if (batch == 0 || n == 0) return;
  const int threads = int(min_scalar<std::int64_t>(kernel_threads(), batch));
  const std::int64_t per_t = 3 * D * dv + 3 * D + 2 * kChunk + kChunk * dv + 64;
  const std::int64_t per_d = 2 * D * dv + 2 * D;
  auto scratch = allocate<T>(std::size_t(threads * per_t));
  auto states = allocate<double>(std::size_t(threads * per_d));
  auto dden = allocate<T>(std::size_t(batch * n));

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (std::int64_t b = 0; b < batch; ++b) {
    T* t = scratch.get() + std::int64_t(omp_get_thread_num()) * per_t;
    double* s = states.get() + std::int64_t(omp_get_thread_num()) * per_d;
    BackwardWork<T> w;
    w.SfT = t, w.Rf = t + D * dv, w.RfT = t + 2 * D * dv;
    w.Zf = t + 3 * D * dv, w.Zi = w.Zf + D, w.Yf = w.Zi + D, w.coef = w.Yf + D, w.dden = w.coef + kChunk;
    w.dnum = w.dden + kChunk;
    w.S = s, w.R = s + D * dv, w.Z = s + 2 * D * dv, w.Y = w.Z + D;
    backward_item(g, b, w, dden.get());
  }
}

template void causal_linear_attention_backward<float>(const CausalLinearBackwardArgs<float>&);
template void causal_linear_attention_backward<double>(const CausalLinearBackwardArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

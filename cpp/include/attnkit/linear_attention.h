#pragma once
#include <cstdint>

namespace attnkit {

// The feature map phi the kernels apply on the fly, elementwise (D = d):
//   elu: phi(x) = exp(min(x, 0)) + max(x, 0) (elu + 1),  relu: phi(x) = max(x, 0),
//   features: q and k already hold phi(q), phi(k) (any map, computed by the caller);
// or row by row from rows of width d:
//   projected: random features, D = m or 2m (see ProjectedMap);
//   polynomial: exact features of (q.k + c)^p, p <= 2, D = 1 + d (+ d^2) (see PolynomialMap).
enum class LinearFeatures : int { features = 0, elu = 1, relu = 2, projected = 3, polynomial = 4 };

// The polynomial kernel's features of degree p <= 2, phi(x) = [c0, c1 x, c2 vec(x x^T)] (the last
// block for p = 2 only), with c_i = sqrt(C(p, i) c^(p-i)): phi(q).phi(k) = (q.k + c)^p.
template <class T>
struct PolynomialMap {
  int degree = 2;
  T c0 = T(1), c1 = T(1), c2 = T(1);
};

// A random-feature map applied to a row x of width d (q and k rows), from its projections z = x w:
//   r = norm |x|^2, norm = key_norm or query_norm; for queries with query_max, r = -max_j z instead;
//   exp:    phi(x) = scale e^{z + r}                   (D = m; FAVOR+, input scale folded into w)
//   sincos: phi(x) = scale e^r [sin z, cos z]          (D = 2m; random Fourier features)
// The backward holds r = -max_j z constant (a per-query factor the attention output does not see).
template <class T>
struct ProjectedMap {
  const T* w = nullptr;   // (d, m), C order
  const T* wt = nullptr;  // (m, d) = w^T, C order
  std::int64_t m = 0;
  bool sincos = false, query_max = false;
  T scale = T(1), key_norm = T(0), query_norm = T(0);
};

// Causal kernelized linear attention by prefix sums, linear in n, phi as in LinearFeatures:
//   S_i = sum_{j<=i kept} phi(k[j]) v[j]^T  (D x dv),  Z_i = sum_{j<=i kept} phi(k[j])  (D),
//   out[i] = phi(q[i])^T S_i / den_i,  den_i = phi(q[i])^T Z_i;  0 where den_i <= eps * sum_D |phi(q[i])| |Z_i|.
// The guard is relative because out does not depend on the scale of phi while den does: FAVOR+
// features of long keys legitimately give den ~ 1e-9. For non-negative features only den = 0 (no key
// visible) gives zeros; for features of both signs also estimates that cancelled or went negative.
// A NaN den gives NaN.
// q, k: (batch, n, d), v: (batch, n, dv), keep: (batch, n) bytes, nonzero = real key (null: every key
// is; padded keys are never read), out: (batch, n, dv), all contiguous; d = D but for projected maps. Computed by chunks of rows
// (GEMM-shaped products); S and Z are carried in double between chunks so the error does not grow
// with n. Optional state_s (batch, D, dv) and state_z (batch, D) (double) give the state after the
// last row, for continuing step by step.
template <class T>
struct CausalLinearArgs {
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  const std::uint8_t* keep = nullptr;
  T* out = nullptr;
  std::int64_t batch = 0, n = 0, d = 0, D = 0, dv = 0;
  LinearFeatures phi = LinearFeatures::elu;
  ProjectedMap<T> map;       // read for LinearFeatures::projected
  PolynomialMap<T> poly;     // read for LinearFeatures::polynomial
  T eps = T(1e-6);  // relative guard, see above
  double* state_s = nullptr;
  double* state_z = nullptr;
};

// Backward of causal linear attention, linear in n (reverse-time sums). With den_i = phi(q[i]).Z_i,
// rows the forward's guard kept: dnum_i = dout[i] / den_i, dden_i = -dout[i].out[i] / den_i; others 0.
//   dphi(q[i]) = S_i dnum_i + Z_i dden_i
//   R_j = sum_{i>=j} phi(q[i]) dnum_i^T (D x dv),  Y_j = sum_{i>=j} phi(q[i]) dden_i (D)
//   dphi(k[j]) = R_j v[j] + Y_j,   dv[j] = R_j^T phi(k[j])   (both 0 at padded keys)
// and dq, dk are dphi through phi's derivative (the identity for LinearFeatures::features).
// Inputs as the forward plus out and dout (batch, n, dv); dq, dk, dv shaped like q, k, v, overwritten.
template <class T>
struct CausalLinearBackwardArgs {
  CausalLinearArgs<T> fwd;  // fwd.out is read (the forward output)
  const T* dout = nullptr;
  T *dq = nullptr, *dk = nullptr, *dv = nullptr;
};


// Non-causal linear attention, phi applied on the fly and padded keys skipped (never read):
//   S = sum_{j kept} phi(k[j]) v[j]^T  (D x dv),  Z = sum_{j kept} phi(k[j])  (D),
//   out[i] = phi(q[i])^T S / den_i,  den_i = phi(q[i])^T Z;  0 where den_i <= eps * sum_D |phi(q[i])| |Z|.
// q: (batch, nq, d), k: (batch, nk, d), v: (batch, nk, dv), keep: (batch, nk) bytes, nonzero = real
// key (null: every key is); out: (batch, nq, dv); d = D but for projected maps. S and Z are summed in
// double by chunks of keys and written rounded to T into s (batch, D, dv) and z (batch, D): the
// backward starts from them.
template <class T>
struct LinearArgs {
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  const std::uint8_t* keep = nullptr;
  T *out = nullptr, *s = nullptr, *z = nullptr;
  std::int64_t batch = 0, nq = 0, nk = 0, d = 0, D = 0, dv = 0;
  LinearFeatures phi = LinearFeatures::elu;
  ProjectedMap<T> map;       // read for LinearFeatures::projected
  PolynomialMap<T> poly;     // read for LinearFeatures::polynomial
  T eps = T(1e-6);  // relative guard, as in the causal form
};

// Backward of non-causal linear attention. Rows the forward's guard kept: dnum_i = dout[i] / den_i,
// dden_i = -dout[i].out[i] / den_i; others 0. Then
//   dphi(q[i]) = S dnum_i + Z dden_i,  dS = sum_i phi(q[i]) dnum_i^T,  dZ = sum_i phi(q[i]) dden_i,
//   dphi(k[j]) = dS v[j] + dZ,  dv[j] = dS^T phi(k[j])  (both 0 at padded keys),
// and dq, dk are dphi through phi's derivative (the identity for LinearFeatures::features).
// Inputs: the forward's arguments with fwd.out, fwd.s, fwd.z as it wrote them, and dout
// (batch, nq, dv); dq, dk, dv shaped like q, k, v, contiguous, overwritten.
template <class T>
struct LinearBackwardArgs {
  LinearArgs<T> fwd;  // fwd.out, fwd.s and fwd.z are read
  const T* dout = nullptr;
  T *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

}  // namespace attnkit

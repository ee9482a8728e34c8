// Causal kernelized linear attention by prefix sums, linear in n:
//   S_i = sum_{j<=i} phi_k[j] v[j]^T  (D x dv),  Z_i = sum_{j<=i} phi_k[j]  (D),
//   out[i] = phi_q[i]^T S_i / (phi_q[i]^T Z_i)   if that denominator > eps, else 0.
// phi_q, phi_k: (batch, n, D), v: (batch, n, dv), out: (batch, n, dv), all contiguous.
// S and Z are carried in double between chunks so the error does not grow with n. Optional
// state_s (batch, D, dv) and state_z (batch, D) (double) give the state after the last row, for
// continuing step by step.
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct CausalLinearArgs {
  const T *phi_q, *phi_k, *v;
  T* out;
  std::int64_t batch = 0, n = 0, D = 0, dv = 0;
  T eps = T(1e-6);
  double* state_s = nullptr;
  double* state_z = nullptr;
};

}  // namespace attnkit

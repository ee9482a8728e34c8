// Layer normalisation over the last axis of x (rows, n):
//   mean_r = sum x / n,  rstd_r = 1 / sqrt(var_r + eps)  (biased variance),
//   y = (x - mean_r) rstd_r * gamma + beta                gamma, beta: (n,) (optional: 1 and 0)
// Backward, with xhat = (x - mean) rstd and g = dy * gamma:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),  dgamma = sum_r dy xhat,  dbeta = sum_r dy
// With `rms` (RMS normalisation: scale only, no centring), mean_r is 0 instead: rstd_r = 1 / sqrt(mean(x^2)
// + eps), y = x rstd_r gamma (+ beta), and dx = rstd (g - xhat mean(g xhat)); `mean` is not read or written.
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct LayerNormArgs {
  const T* x;
  const T* gamma = nullptr;
  const T* beta = nullptr;
  T* y;
  T* mean = nullptr;  // (rows,) optional outputs, for the backward
  T* rstd = nullptr;
  std::int64_t rows = 0, n = 0;
  T eps = T(1e-5);
  bool rms = false;
};

template <class T>
struct LayerNormBackwardArgs {
  const T* dy;
  const T* x;
  const T* gamma = nullptr;
  const T* mean;
  const T* rstd;
  T* dx;
  T* dgamma = nullptr;  // (n,), overwritten; optional
  T* dbeta = nullptr;
  std::int64_t rows = 0, n = 0;
  bool rms = false;
};

}  // namespace attnkit

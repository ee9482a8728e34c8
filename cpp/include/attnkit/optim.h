// Optimiser kernels, elementwise over n values of C-contiguous arrays. Each kernel takes a span of tensors (a
// model's parameters): one parallel pass over all their blocks instead of one fork and join per tensor.
// AdamW update, in place (p, m, v, g of shape (n,)), every operation rounded to T in this order:
//   p = p * shrink (only with decay);  m = m * beta1 + g * (1 - beta1);  v = v * beta2 + (g * g) * (1 - beta2);
//   p = p - (m / (sqrt(v) * denom_scale + eps)) * step_size
// Sum of squares: sum_i x_i^2 in double, x of shape (n,), one sum per tensor.
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct AdamWArgs {
  T* param;
  T* grad;  // read; set to zero after it is read when zero_grad
  T* exp_avg;     // m
  T* exp_avg_sq;  // v
  std::int64_t n = 0;
  // Each rounded to T once by the caller, as NumPy rounds a Python float meeting a T array.
  T beta1, one_minus_beta1, beta2, one_minus_beta2, denom_scale, eps, step_size, shrink, grad_scale;
  bool decay = false;      // p *= shrink first
  bool scaled = false;     // g = grad * grad_scale (a clipped gradient), else g = grad
  bool zero_grad = false;  // grad <- 0 once read (the next backward's zero_grad, in the same pass)
};

template <class T>
struct SumOfSquaresArgs {
  const T* x;
  std::int64_t n = 0;
  double* out;  // the sum
};

}  // namespace attnkit

// GELU forward and backward (see attnkit/gelu.h), elementwise in blocks, blocks in parallel.
// The tanh form builds tanh from exp: (1 + tanh u) / 2 = sigmoid(2u) = 1 / (1 + e), e = exp(-2u), so
//   y = x / (1 + e),   gelu'(x) = s (1 + 2 x u' (1 - s)),  s = 1 / (1 + e),  1 - s = e s,
// with u = c (x + k x^3), u' = c (1 + 3 k x^2). This form never subtracts nearly equal numbers (the
// textbook 0.5 x (1 + tanh u) loses the low digits of y for negative x).
// The exact (erf) form takes Q = Phi(-|x|) = g m and g from normal_tail (simd.h), so again nothing cancels:
//   y = x Phi(x) = max(x, 0) - g (|x| m)               (Phi(x) = Q for x < 0, 1 - Q otherwise; Q <= 1/2)
//   gelu'(x) = Phi(x) + x phi(x) = D or 1 - D,  D = g (m - |x| / sqrt(2 pi))
#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "elementwise.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
struct GeluConst {
  static constexpr T c = T(0.79788456080286535588);  // sqrt(2 / pi)
  static constexpr T k = T(0.044715);
  // Beyond +-clip gelu'(x) is 1 or 0; clipping keeps x u' finite where e s is 0 (else inf * 0 = NaN
  // for huge x).
  static constexpr T clip = T(1e4);
};

// -2u for every lane, as x (-2c - 2ck x^2).
template <class T>
Vec<T> minus_2u(Vec<T> x) {
  using V = Vec<T>;
  using C = GeluConst<T>;
  return x * V::fma(x * x, V::set1(-2 * C::c * C::k), V::set1(-2 * C::c));
}

template <class T>
Vec<T> gelu_lanes(Vec<T> x) {
  using V = Vec<T>;
  const V z = minus_2u(x);
  return zero_where_saturated(x / (V::set1(T(1)) + exp(z)), z);
}

template <class T>
Vec<T> gelu_grad_lanes(Vec<T> x, Vec<T> dy) {
  using V = Vec<T>;
  using C = GeluConst<T>;
  const V one = V::set1(T(1));
  const V xc = V::max(V::set1(-C::clip), V::min(V::set1(C::clip), x));  // NaN stays NaN
  const V z = minus_2u(xc);
  const V e = exp(z);
  const V s = one / (one + e);
  const V du = V::fma(xc * xc, V::set1(3 * C::c * C::k), V::set1(C::c));  // u'
  const V two_x_du = (xc + xc) * du;
  return zero_where_saturated(dy * (s * V::fma(two_x_du, e * s, one)), z);
}

// |x| clamped to a bound past which Phi(x) is exactly 0 or 1 (normal_tail needs finite input); NaN stays.
template <class T>
Vec<T> abs_clamped(Vec<T> x) {
  using V = Vec<T>;
  return V::min(V::set1(T(64)), V::abs(x));
}

template <class T>
Vec<T> gelu_exact_lanes(Vec<T> x) {
  using V = Vec<T>;
  const V u = abs_clamped(x);
  V g, m;
  normal_tail(u, g, m);
  // g (u m), not u (g m): u m < 0.4, so the product is subnormal only where y itself is, while g m can
  // be subnormal (and lose digits) with y still normal. +inf - 0 = +inf; -inf gives 0.
  return V::fma(V::zero() - g, u * m, V::max(V::zero(), x));
}

template <class T>
Vec<T> gelu_exact_grad_lanes(Vec<T> x, Vec<T> dy) {
  using V = Vec<T>;
  const V one = V::set1(T(1));
  const V u = abs_clamped(x);
  V g, m;
  normal_tail(u, g, m);
  const V d = g * V::fma(u, V::set1(T(-0.398942280401432677940)), m);  // 1 / sqrt(2 pi)
  const V nonnegative = V::zero_below(one, x, V::zero());               // 1 where x >= 0 (or NaN), else 0
  return dy * V::fma(one - (nonnegative + nonnegative), d, nonnegative);  // D or 1 - D
}

}  // namespace

template <class T>
void gelu(const GeluArgs<T>& a) {
  const T* x = a.x;
  T* out = a.out;
  if (a.exact) {
    elementwise<T>(a.n, [=](std::int64_t i, int w) {
      store_partial(gelu_exact_lanes(load_partial(x + i, w)), out + i, w);
    });
  } else {
    elementwise<T>(a.n, [=](std::int64_t i, int w) { store_partial(gelu_lanes(load_partial(x + i, w)), out + i, w); });
  }
}

template <class T>
void gelu_backward(const GeluArgs<T>& a) {
  const T* x = a.x;
  const T* dy = a.dy;
  T* out = a.out;
  if (a.exact) {
    elementwise<T>(a.n, [=](std::int64_t i, int w) {
      store_partial(gelu_exact_grad_lanes(load_partial(x + i, w), load_partial(dy + i, w)), out + i, w);
    });
  } else {
    elementwise<T>(a.n, [=](std::int64_t i, int w) {
      store_partial(gelu_grad_lanes(load_partial(x + i, w), load_partial(dy + i, w)), out + i, w);
    });
  }
}

template void gelu<float>(const GeluArgs<float>&);
template void gelu<double>(const GeluArgs<double>&);
template void gelu_backward<float>(const GeluArgs<float>&);
template void gelu_backward<double>(const GeluArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// SwiGLU's gate (see attnkit/swiglu.h): silu(g) up = g / (1 + e) up, e = exp(-g), with one SIMD exponential
// per value; no 1 - (...) cancels. Past exp's range (g < -88.3 in float, -709 in double) silu is 0, its
// true value below 4e-37 (3e-305) in magnitude.
#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "elementwise.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

template <class T>
void swiglu(const SwigluArgs<T>& a) {
  using V = Vec<T>;
  const T *gate = a.gate, *up = a.up;
  T* out = a.out;
  elementwise<T>(a.n, [=](std::int64_t i, int w) {
    const V g = load_partial(gate + i, w), z = V::zero() - g;
    const V silu = zero_where_saturated(g / (V::set1(T(1)) + exp(z)), z);
    store_partial(silu * load_partial(up + i, w), out + i, w);
  });
}

template void swiglu<float>(const SwigluArgs<float>&);
template void swiglu<double>(const SwigluArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// GELU, tanh form (as GPT-2 and BERT): y = x / 2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// and its derivative for the backward: dx = dy * gelu'(x). Elementwise over n values.
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct GeluArgs {
  const T* x;
  const T* dy = nullptr;  // backward only
  T* out;                 // y (forward) or dx (backward); may alias x or dy
  std::int64_t n = 0;
};

}  // namespace attnkit

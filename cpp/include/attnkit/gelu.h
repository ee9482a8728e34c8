// GELU, tanh form (GPT-2): y = x / 2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), or with `exact`
// the erf form (BERT, torch's approximate="none"): y = x Phi(x) = x / 2 (1 + erf(x / sqrt 2)); and
// the derivative for the backward: dx = dy * gelu'(x). Elementwise over n values.
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct GeluArgs {
  const T* x;
  const T* dy = nullptr;  // backward only
  T* out;                 // y (forward) or dx (backward); may alias x or dy
  std::int64_t n = 0;
  bool exact = false;  // the erf form
};

}  // namespace attnkit

// SwiGLU's gate (Llama's feed-forward): out = silu(gate) up = gate / (1 + exp(-gate)) up, elementwise over
// n values.
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct SwigluArgs {
  const T* gate;
  const T* up;
  T* out;  // may alias gate or up
  std::int64_t n = 0;
};

}  // namespace attnkit

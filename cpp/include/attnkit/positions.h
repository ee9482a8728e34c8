// Sinusoidal ("clock") positions: out[t, 2k] = sin((start + t) w_k), out[t, 2k+1] = cos((start + t) w_k),
// w_k = base^(-2k / d).  out: (n, d) contiguous, d even. Computed in double, stored as T.
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct PositionsArgs {
  T* out;
  std::int64_t n, d;
  double base, start;
};

}  // namespace attnkit

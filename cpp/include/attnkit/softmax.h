// Row-wise softmax over contiguous rows: out[r, :] = exp(x[r, :] - max_r) / sum(...)   x, out: (rows, n)
// log_softmax: out[r, :] = x[r, :] - max_r - log(sum exp(x[r, :] - max_r)).
// A row of all -inf gives zeros (softmax) or -inf (log_softmax).
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct SoftmaxArgs {
  const T* x;
  T* out;  // may alias x
  std::int64_t rows, n;
  bool log;
};

}  // namespace attnkit

// Row-wise softmax over contiguous rows: out[r, :] = exp(x[r, :] - max_r) / sum(...)   x, out: (rows, n)
// log_softmax: out[r, :] = x[r, :] - max_r - log(sum exp(x[r, :] - max_r)).
// A row of all -inf gives zeros (softmax) or -inf (log_softmax).
// With x_float set (T double), the rows are read from float32 values: each row is widened into out, then
// normalised there in place, the same bits as widening the whole array first, at one pass over it in memory.
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct SoftmaxArgs {
  const T* x;
  T* out;  // may alias x
  std::int64_t rows, n;
  bool log;
  const float* x_float = nullptr;  // read instead of x where set (then x is unused)
  std::int64_t* argmax = nullptr;  // where set: each row's index of its largest output (the first of equals)
};

}  // namespace attnkit

namespace attnkit {

// Backward of the row-wise softmax given its output y (rows, n) and the output gradient dy:
//   softmax:     dx = y * (dy - sum_j dy_j y_j)
//   log_softmax: dx = dy - exp(y) * sum_j dy_j            (y is the log_softmax output)
// All-(-inf) input rows (y all 0, or all -inf) give dx = 0.
template <class T>
struct SoftmaxBackwardArgs {
  const T* y;
  const T* dy;
  T* dx;  // may alias dy
  std::int64_t rows, n;
  bool log;
  const float* x_float = nullptr;  // read instead of x where set (then x is unused)
  std::int64_t* argmax = nullptr;  // where set: each row's index of its largest output (the first of equals)
};

}  // namespace attnkit

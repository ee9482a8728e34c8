// Fused softmax cross-entropy, forward and backward in one pass over the logits (rows, C):
//   p = softmax(logits[r]),  q = (1 - s) onehot(target[r]) + s / C   (s = label_smoothing)
//   loss[r]    = -sum_c q_c log p_c                          (0 where target[r] == ignore_index)
//   dlogits[r] = weight[r] * (p - q)                         (0 where target[r] == ignore_index)
// targets: (rows,) int64 in [0, C) or == ignore_index; weight: optional (rows,) per-row factor of
// the gradient (e.g. 1 / n_counted for a mean); dlogits optional (forward only when null).
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct CrossEntropyArgs {
  const T* logits;
  const std::int64_t* targets;
  const T* weight = nullptr;
  T* loss;               // (rows,)
  T* dlogits = nullptr;  // (rows, C), may alias logits
  std::int64_t rows = 0, classes = 0;
  std::int64_t ignore_index = -100;
  T label_smoothing = T(0);
};

}  // namespace attnkit

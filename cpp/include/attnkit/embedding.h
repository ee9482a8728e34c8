// The gradient of a table lookup (out[t] = weight[ids[t]]): grad_weight[v] += the sum of grad[t] over the
// tokens t with ids[t] == v, padding_idx excepted. Each id's rows are summed in token order, starting from
// its first row, and that sum is added to grad_weight[v] once: the bits depend neither on the thread count
// nor on where the other ids lie (attnkit.reference.embedding_backward writes the same order out).
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct EmbeddingBackwardArgs {
  T* grad_weight;                // (vocab, width), C order; updated in place
  const T* grad;                 // (tokens, width), C order
  const std::int64_t* ids;       // (tokens,), each in [0, vocab)
  std::int64_t tokens = 0, vocab = 0, width = 0;
  std::int64_t padding_idx = -1;  // a row that gets no gradient; -1: none
};

}  // namespace attnkit

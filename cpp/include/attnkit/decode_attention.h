// One decoding step's attention for one key/value head: its `group` query heads (grouped-query attention),
// one query each, against the head's keys and values at positions 0..nk-1, every position visible:
//   out_h = softmax_j(scale q_h . k_j) v_j.
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct DecodeAttentionArgs {
  const T* q;       // (group, d), rows contiguous
  const T* keys;    // (nk, d), rows contiguous
  const T* values;  // (nk, d), rows contiguous
  T* out;           // (group, d), rows contiguous
  std::int64_t group = 1, nk = 0, d = 0;
  T scale = T(1);
};

}  // namespace attnkit

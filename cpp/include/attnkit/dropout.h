// Inverted dropout with a counter-based mask: element i of a C-ordered array is kept when
// keep_bits(key, i) >= threshold, and becomes x_i * scale, else x_i * 0 (NaN stays NaN, as in x * mask).
// The mask is a pure function of (key, i): the same on every ISA and thread count, and the backward
// (dx = dy * mask) is the same call on dy with the same key, so no mask is ever stored.
#pragma once
#include <cstdint>

namespace attnkit {

// Two rounds of the "lowbias32" integer hash (C. Wellons' hash prospector; a bijection of 32 bits). The
// 64-bit key is first mixed into two 32-bit round keys, so that keys differing in a few low bits (a step
// counter) do not give masks that are relabelings of each other (i ^ k0 alone would only permute blocks);
// the high half of a 64-bit index enters the second round. attnkit.reference.dropout_keep computes the
// same bits in NumPy.
inline std::uint32_t lowbias32(std::uint32_t h) {
  h ^= h >> 16;
  h *= 0x7feb352dU;
  h ^= h >> 15;
  h *= 0x846ca68bU;
  h ^= h >> 16;
  return h;
}

struct RoundKeys {
  std::uint32_t k0, k1;
};

inline RoundKeys round_keys(std::uint64_t key) {
  const std::uint32_t k1 = lowbias32(std::uint32_t(key >> 32) ^ 0x9e3779b9U);
  return {lowbias32(std::uint32_t(key) ^ k1), k1};
}

// The hash of element i = hi 2^32 + lo; it is kept when the hash is >= the threshold.
inline std::uint32_t keep_bits(RoundKeys k, std::uint32_t lo, std::uint32_t hi) {
  return lowbias32(lowbias32(lo ^ k.k0) ^ k.k1 ^ (hi * 0x9e3779b9U));
}

template <class T>
struct DropoutArgs {
  const T* x;
  T* out;  // may alias x
  std::int64_t n = 0;
  std::uint64_t key = 0;
  std::uint32_t threshold = 0;  // ceil(p 2^32): P(keep) = 1 - threshold / 2^32
  T scale = T(1);               // 1 / (1 - p)
};

}  // namespace attnkit

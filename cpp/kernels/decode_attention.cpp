// A decoding step's attention (see attnkit/decode_attention.h): one query per head, so no tiles. The general
// kernel (attention.cpp) pads a single query to a block of W and scans the values for non-finite entries per
// call: 16 times the work on AVX-512, which made attention 62% of a 16-sequence SmolLM2 step at 500 positions.
// Here: the scores of a block of keys for every query head of the group (the block read from L1 once per
// head), the row-wise softmax kernel over each head's nk scores, and out_h = sum_j p_hj v_j with d in lanes.
// Called on one thread (the decoding plan shares (row, head) items among its team).
// Past ~100 positions a batched step reads the cache from DRAM (16 sequences of SmolLM2 at 210 positions: 155
// MB of keys and values a step, ~12 ms): 4 keys' FMA chains at once measured no faster there. Short contexts
// are bound by the instructions instead, where the weighted sum's accumulators kept in registers count.
#include <vector>

#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

// Keys scored per block: 32 rows of a 64-wide head are 8 KB (float), read by every query head from L1.
constexpr std::int64_t kKeyBlock = 32;
// Output vectors accumulated at once (8 of AVX-512's 16 lanes: d = 128 in one pass over the values).
constexpr int kOutVectors = 8;

// out = sum_j p[j] v_j over N whole vectors of d = N W, one FMA chain per vector in key order.
template <class T, int N>
void weighted_sum_n(const T* p, const T* values, std::int64_t nk, std::int64_t d, T* out) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V acc[N];
#pragma GCC unroll 8
  for (int u = 0; u < N; ++u) acc[u] = V::zero();
  for (std::int64_t j = 0; j < nk; ++j) {
    const V pj = V::set1(p[j]);
    const T* v = values + j * d;
#pragma GCC unroll 8
    for (int u = 0; u < N; ++u) acc[u] = V::fma(pj, V::load(v + u * W), acc[u]);
  }
#pragma GCC unroll 8
  for (int u = 0; u < N; ++u) acc[u].store(out + u * W);
}

// weighted_sum_n for the common counts of N = vectors (heads of 8 to 128 values); false for another count.
template <class T>
bool weighted_sum(std::int64_t vectors, const T* p, const T* values, std::int64_t nk, std::int64_t d, T* out) {
  switch (vectors) {
    case 1: return weighted_sum_n<T, 1>(p, values, nk, d, out), true;
    case 2: return weighted_sum_n<T, 2>(p, values, nk, d, out), true;
    case 3: return weighted_sum_n<T, 3>(p, values, nk, d, out), true;
    case 4: return weighted_sum_n<T, 4>(p, values, nk, d, out), true;
    case 6: return weighted_sum_n<T, 6>(p, values, nk, d, out), true;
    case 8: return weighted_sum_n<T, 8>(p, values, nk, d, out), true;
    default: return false;  // the general loop
  }
}

}  // namespace

template <class T>
void decode_attention(const DecodeAttentionArgs<T>& a) {
  using V = Vec<T>;
  constexpr int W = V::W;
  const std::int64_t nk = a.nk, d = a.d, group = a.group;
  if (group == 0 || d == 0) return;
  thread_local std::vector<T> scores;
  if (scores.size() < std::size_t(group * nk)) scores.resize(std::size_t(group * nk));
  for (std::int64_t j0 = 0; j0 < nk; j0 += kKeyBlock) {
    const std::int64_t j1 = min_scalar(nk, j0 + kKeyBlock);
    for (std::int64_t h = 0; h < group; ++h) {
      T* s = scores.data() + h * nk;
      std::int64_t j = j0;
      // Four keys at a time (whole vectors of d): each score has dot's bits, its reduction shared by four.
      if (d % W == 0)
        for (; j + 4 <= j1; j += 4) {
          dot4(a.q + h * d, a.keys + j * d, d, s + j);
          for (int r = 0; r < 4; ++r) s[j + r] *= a.scale;
        }
      for (; j < j1; ++j) s[j] = a.scale * dot(a.q + h * d, a.keys + j * d, d);
    }
  }
  // No key (nk = 0) leaves every p empty and the output zeros, as the general kernel gives a query that sees none.
  softmax<T>(SoftmaxArgs<T>{scores.data(), scores.data(), group, nk, false});
  for (std::int64_t h = 0; h < group; ++h) {
    const T* p = scores.data() + h * nk;
    T* out = a.out + h * d;
    // Whole vectors of d (64 or 128 wide heads): the accumulators' count known at compile time, so they stay in
    // registers (a runtime count kept them in memory: 16 rows of SmolLM2, the weighted sums were half of the
    // attention's time). The same FMAs in the same order as the general loop below: the same bits.
    if (d % W == 0 && weighted_sum<T>(d / W, p, a.values, nk, d, out)) continue;
    for (std::int64_t c0 = 0; c0 < d; c0 += kOutVectors * W) {
      const int chunks = int(min_scalar<std::int64_t>(kOutVectors, (d - c0 + W - 1) / W));
      const int tail = int(min_scalar<std::int64_t>(W, d - c0 - (chunks - 1) * W));
      V acc[kOutVectors];
      for (int u = 0; u < chunks; ++u) acc[u] = V::zero();
      for (std::int64_t j = 0; j < nk; ++j) {
        const V pj = V::set1(p[j]);
        const T* v = a.values + j * d + c0;
        for (int u = 0; u + 1 < chunks; ++u) acc[u] = V::fma(pj, V::load(v + u * W), acc[u]);
        acc[chunks - 1] = V::fma(pj, load_partial(v + (chunks - 1) * W, tail), acc[chunks - 1]);
      }
      for (int u = 0; u + 1 < chunks; ++u) acc[u].store(out + c0 + u * W);
      store_partial(acc[chunks - 1], out + c0 + (chunks - 1) * W, tail);
    }
  }
}

template void decode_attention<float>(const DecodeAttentionArgs<float>&);
template void decode_attention<double>(const DecodeAttentionArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

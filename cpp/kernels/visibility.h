// Which keys a query may see: the one statement of the rule for the attention forward, backward and
// packed kernels (included by attention_tiles.h, inside the ISA's namespace; internal linkage).
//
// Key j is visible to query i of batch item b iff, with offset = nk - nq (the queries end-aligned
// with the keys, as when decoding with a cache) and i' = i + offset,
//   j < key_length[b]                     keys from key_length on are padding,
//   i' - left <= j <= i' + right          the window: left = window_left, right = window_right (each
//                                         unbounded when not given), right = 0 when causal.
// An explicit mask and the bias are inputs on top of the rule (block_logits applies them). Ranges
// are [first, end); every bound is nondecreasing in its argument, so a block's range is the first
// bound of its first element and the end bound of its last.
#pragma once
#include <cstdint>

#include "attnkit/attention.h"
#include "attnkit/simd.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {
namespace {

struct Range {
  std::int64_t first, end;  // empty when end <= first
};

// Where the coefficients of accumulate_rows may be nonzero: output row r needs s in
// [first + r, last + r] only (a diagonal band); the default band is every s.
struct Band {
  static constexpr std::int64_t kFar = std::int64_t(1) << 50;
  std::int64_t first = -kFar, last = kFar;
};

// The rule for one batch item: every kernel asks these functions, never the arguments themselves.
struct Visibility {
  std::int64_t nq, offset, key_length;
  std::int64_t left, right;  // the window around i + offset; Band::kFar when unbounded

  template <class T>
  Visibility(const AttentionArgs<T>& a, std::int64_t b)
      : nq(a.nq),
        offset(a.nk - a.nq),
        key_length(a.key_length ? a.key_length[b] : a.nk),
        left(a.window_left < 0 ? Band::kFar : a.window_left),
        right(a.causal ? 0 : a.window_right < 0 ? Band::kFar : a.window_right) {}

  // Whether some query may not see some real key: otherwise a key's queries are all of them.
  bool limits_queries() const { return left < Band::kFar || right < Band::kFar; }

  // The keys query i may see: [first_key(i), end_key(i)).
  std::int64_t first_key(std::int64_t i) const { return max_scalar<std::int64_t>(0, i + offset - left); }
  std::int64_t end_key(std::int64_t i) const {
    return max_scalar<std::int64_t>(0, min_scalar(key_length, i + offset + right + 1));
  }
  // The queries that may see key j: [first_query(j), end_query(j)), empty for a padded key.
  std::int64_t first_query(std::int64_t j) const { return max_scalar<std::int64_t>(0, j - offset - right); }
  std::int64_t end_query(std::int64_t j) const {
    return j < key_length ? max_scalar<std::int64_t>(0, min_scalar(nq, j - offset + left + 1)) : 0;
  }

  // The keys some query of [i0, i0 + bq) may see (bq >= 1).
  Range keys_of_queries(std::int64_t i0, std::int64_t bq) const { return {first_key(i0), end_key(i0 + bq - 1)}; }
  // The queries that may see some key of [j0, j0 + jn) (jn >= 1).
  Range queries_of_keys(std::int64_t j0, std::int64_t jn) const {
    return {first_query(j0), j0 < key_length ? end_query(min_scalar(j0 + jn, key_length) - 1) : 0};
  }

  // accumulate_rows with rows = queries i0 + r and s = keys j0 + s (O += P V, dQ += dS K): key j0 + s
  // is visible to query i0 + r only for r + (i0 + offset - left - j0) <= s <= r + (i0 + offset + right - j0).
  Band key_band(std::int64_t i0, std::int64_t j0) const {
    Band band;
    if (left < Band::kFar) band.first = i0 + offset - left - j0;
    if (right < Band::kFar) band.last = i0 + offset + right - j0;
    return band;
  }
  // accumulate_rows with rows = keys j0 + r and s = queries i0 + s (dV += P^T dO, dK += dS^T Q).
  Band query_band(std::int64_t i0, std::int64_t j0) const {
    Band band;
    if (right < Band::kFar) band.first = j0 - i0 - offset - right;
    if (left < Band::kFar) band.last = j0 - i0 - offset + left;
    return band;
  }
};

}  // namespace
}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// Which keys a query may see: the one statement of the rule for the attention forward, backward and
// packed kernels (included by attention_tiles.h, inside the ISA's namespace; internal linkage).
//
// Key j is visible to query i of batch item b iff
//   j < key_length[b]                 keys from key_length on are padding, and, if causal,
//   j <= i + offset,  offset = nk - nq  the queries end-aligned with the keys (decoding with a cache).
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

// The rule for one batch item. A sliding window (query i sees i + offset - left <= j <=
// i + offset + right) is two fields here, read by first_key / end_query (left), end_key /
// first_query (right), the two bands' other edges and limits_queries; the kernels use only these.
struct Visibility {
  std::int64_t nq, offset, key_length;
  bool causal;

  template <class T>
  Visibility(const AttentionArgs<T>& a, std::int64_t b)
      : nq(a.nq), offset(a.nk - a.nq), key_length(a.key_length ? a.key_length[b] : a.nk), causal(a.causal) {}

  // Whether some query may not see some real key: otherwise a key's queries are all of them.
  bool limits_queries() const { return causal; }

  // The keys query i may see: [first_key(i), end_key(i)).
  std::int64_t first_key(std::int64_t) const { return 0; }
  std::int64_t end_key(std::int64_t i) const {
    return max_scalar<std::int64_t>(0, causal ? min_scalar(key_length, i + offset + 1) : key_length);
  }
  // The queries that may see key j: [first_query(j), end_query(j)), empty for a padded key.
  std::int64_t first_query(std::int64_t j) const { return causal ? max_scalar<std::int64_t>(0, j - offset) : 0; }
  std::int64_t end_query(std::int64_t j) const { return j < key_length ? nq : 0; }

  // The keys some query of [i0, i0 + bq) may see (bq >= 1).
  Range keys_of_queries(std::int64_t i0, std::int64_t bq) const { return {first_key(i0), end_key(i0 + bq - 1)}; }
  // The queries that may see some key of [j0, j0 + jn) (jn >= 1).
  Range queries_of_keys(std::int64_t j0, std::int64_t jn) const {
    return {first_query(j0), j0 < key_length ? end_query(min_scalar(j0 + jn, key_length) - 1) : 0};
  }

  // accumulate_rows with rows = queries i0 + r and s = keys j0 + s (O += P V, dQ += dS K):
  // key j0 + s is visible to query i0 + r only for s <= r + (i0 + offset - j0).
  Band key_band(std::int64_t i0, std::int64_t j0) const {
    Band band;
    if (causal) band.last = i0 + offset - j0;
    return band;
  }
  // accumulate_rows with rows = keys j0 + r and s = queries i0 + s (dV += P^T dO, dK += dS^T Q).
  Band query_band(std::int64_t i0, std::int64_t j0) const {
    Band band;
    if (causal) band.first = j0 - i0 - offset;
    return band;
  }
};

}  // namespace
}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

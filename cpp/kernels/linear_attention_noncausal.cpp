// Non-causal linear attention (see LinearArgs in attnkit/linear_attention.h). Per batch item, the
// keys' sums S, Z by chunks: phi (random features too) of the real keys only (padded keys are never
// read), the products of kSumChunks chunks summed in T, then added into double. Then every query from
// S, Z rounded to T. When the items split evenly over the threads, a thread takes whole items, sums
// and queries; otherwise each item's keys are cut into segments summed separately, then added in
// segment order, and the queries run in one flat parallel loop over batch items x query chunks.
#include "attnkit/isa.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"
#include "linear_tiles.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

// Chunks whose products are summed in T before the double sums take them: widening D x dv floats per
// 64 keys cost 4% of relu's forward at N = 4096; per 256 keys the T sums still cannot drift with N.
constexpr std::int64_t kSumChunks = 4;

template <class T>
struct ForwardWork {
  T *phi, *prod, *zsum;  // phi: a chunk's features (kChunk x D); prod, zsum: its sums in T
};

// S (D x dv) += and Z (D) += the sums over batch item b's keys [j0, j1) (j0 a multiple of kChunk).
template <class T>
void key_sums(const LinearArgs<T>& a, std::int64_t b, std::int64_t j0, std::int64_t j1, double* S, double* Z,
              const ForwardWork<T>& w) {
  const std::int64_t nk = a.nk, D = a.D, dv = a.dv;
  const T* k = a.k + b * nk * a.d;
  const T* v = a.v + b * nk * dv;
  const std::uint8_t* keep = a.keep ? a.keep + b * nk : nullptr;
  bool any = false;
  for (std::int64_t js = j0; js < j1; js += kChunk) {
    const std::int64_t je = min_scalar(js + kChunk, j1);
    for (std::int64_t j = first_kept(keep, js, je); j < je;) {
      const std::int64_t end = run_end(keep, j, je);
      if (!any) {
        for (std::int64_t x = 0; x < D * dv; ++x) w.prod[x] = T(0);
        for (std::int64_t x = 0; x < D; ++x) w.zsum[x] = T(0);
        any = true;
      }
      row_features(a, k + j * a.d, end - j, w.phi, false);
      add_outer_products<T>(w.prod, w.zsum, w.phi, v + j * dv, nullptr, end - j, D, dv);
      j = first_kept(keep, end, je);
    }
    const bool group_end = (js / kChunk + 1) % kSumChunks == 0 || je == j1;
    if (any && group_end) {
      add_into(S, w.prod, D * dv);
      add_into(Z, w.zsum, D);
      any = false;
    }
  }
}

// Rows [i0, i1) of batch item b's output.
template <class T>
void query_rows(const LinearArgs<T>& a, std::int64_t b, std::int64_t i0, std::int64_t i1, T* phi) {
  const std::int64_t D = a.D, dv = a.dv, rows = i1 - i0;
  const T* S = a.s + b * D * dv;
  const T* Z = a.z + b * D;
  T* out = a.out + (b * a.nq + i0) * dv;
  const bool non_negative = non_negative_features(a);
  row_features(a, a.q + (b * a.nq + i0) * a.d, rows, phi, true);
  for (std::int64_t x = 0; x < rows * dv; ++x) out[x] = T(0);
  tile_product(out, dv, phi, D, 1, S, dv, rows, D, dv);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* pq = phi + r * D;
    T* o = out + r * dv;
    const T den = dot(pq, Z, D);
    const bool zeroed = zeroed_row(den, non_negative ? den : dot<true>(pq, Z, D), a.eps);
    const T inv = T(1) / den;
    for (std::int64_t c = 0; c < dv; ++c) o[c] = zeroed ? T(0) : o[c] * inv;
  }
}

}  // namespace

template <class T>
void linear_attention(const LinearArgs<T>& a) {
  const std::int64_t batch = a.batch, D = a.D, dv = a.dv;
  if (batch == 0) return;
  const int max_threads = kernel_threads();
  const std::int64_t per_thread = kChunk * D + D * dv + D + 64, state = D * dv + D;
  auto scratch = allocate<T>(std::size_t(max_threads * per_thread));
  auto work = [&](int t) {
    T* base = scratch.get() + std::int64_t(t) * per_thread;
    return ForwardWork<T>{base, base + kChunk * D, base + kChunk * D + D * dv};
  };
  auto round_sums = [&](std::int64_t b, const double* S) {
    for (std::int64_t x = 0; x < D * dv; ++x) a.s[b * D * dv + x] = T(S[x]);
    for (std::int64_t x = 0; x < D; ++x) a.z[b * D + x] = T(S[D * dv + x]);
  };

  const std::int64_t chunks = (a.nq + kChunk - 1) / kChunk;
  if (whole_items(batch, max_threads)) {
    // An item's queries right after its sums, on the same thread: 0.77x the time of a padded forward
    // (32 items, N=64, d=32) with sleeping workers, and S, Z are still in cache.
    return for_each_item(batch, state, max_threads, [&](std::int64_t b, double* S, int t) {
      const ForwardWork<T> w = work(t);
      key_sums(a, b, 0, a.nk, S, S + D * dv, w);
      round_sums(b, S);
      for (std::int64_t i0 = 0; i0 < a.nq; i0 += kChunk) query_rows(a, b, i0, min_scalar(i0 + kChunk, a.nq), w.phi);
    });
  }
  segmented_sums(
      batch, a.nk, state, max_threads,
      [&](std::int64_t b, std::int64_t j0, std::int64_t j1, double* S, int t) {
        key_sums(a, b, j0, j1, S, S + D * dv, work(t));
      },
      round_sums);

  const std::int64_t tasks = batch * chunks;
  if (tasks == 0) return;
  const int query_threads = int(min_scalar<std::int64_t>(max_threads, tasks));
  static_loop(query_threads, tasks, [&](std::int64_t task, int t) {
    const std::int64_t b = task / chunks, i0 = task % chunks * kChunk;
    query_rows(a, b, i0, min_scalar(i0 + kChunk, a.nq), work(t).phi);
  });
}

template void linear_attention<float>(const LinearArgs<float>&);
template void linear_attention<double>(const LinearArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// Backward of non-causal linear attention (see LinearBackwardArgs in attnkit/linear_attention.h).
// Per batch item, a pass over the queries gives dq and the sums dS, dZ (by chunks, added into double),
// then a pass over the keys gives dk and dv from dS, dZ rounded to T. Features are recomputed from q and
// k, as the forward computed them. When the items split evenly over the threads, a thread takes whole
// items, both passes; otherwise (fewer items than threads: by segments of queries added in order) the
// key pass is one flat parallel loop over batch items x key chunks.
#include "attnkit/isa.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"
#include "linear_tiles.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
struct BackwardWork {
  // prod, zsum: a chunk's dS, dZ in T; ST: S^T (dv x D); dphi: a chunk's dphi for row maps
  T *phi, *dnum, *dden, *prod, *zsum, *ST, *dphi;
};

// dq of batch item b's queries [i0, i1) (i0 a multiple of kChunk); their sums added into dS (D x dv)
// and dZ (D).
template <class T>
void query_pass(const LinearBackwardArgs<T>& g, std::int64_t b, std::int64_t i0, std::int64_t i1,
                const BackwardWork<T>& w, double* dS, double* dZ) {
  const LinearArgs<T>& a = g.fwd;
  const std::int64_t nq = a.nq, D = a.D, dv = a.dv;
  const T* S = a.s + b * D * dv;
  const T* Z = a.z + b * D;
  transpose(w.ST, S, D, dv);
  for (std::int64_t is = i0; is < i1; is += kChunk) {
    const std::int64_t ie = min_scalar(is + kChunk, i1), rows = ie - is;
    const T* q = a.q + (b * nq + is) * a.d;
    T* dq = g.dq + (b * nq + is) * a.d;
    T* dphi = row_map(a.phi) ? w.dphi : dq;  // else d = D: in place
    row_features(a, q, rows, w.phi, true);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = b * nq + is + r;
      const T* pq = w.phi + r * D;
      const T den = dot(pq, Z, D);
      // Rows the forward zeroed pass no gradient; a NaN den stays NaN.
      const bool zeroed = zeroed_row(den, non_negative_features(a) ? den : dot<true>(pq, Z, D), a.eps);
      const T inv = zeroed ? T(0) : T(1) / den;
      T* dn = w.dnum + r * dv;
      for (std::int64_t c = 0; c < dv; ++c) dn[c] = g.dout[i * dv + c] * inv;
      w.dden[r] = zeroed ? T(0) : -dot(g.dout + i * dv, a.out + i * dv, dv) * inv;
      for (std::int64_t x = 0; x < D; ++x) dphi[r * D + x] = Z[x] * w.dden[r];
    }
    tile_product(dphi, D, w.dnum, dv, 1, w.ST, D, rows, dv, D);  // + S dnum_i
    features_backward(a, q, rows, w.phi, dphi, dq, true);
    for (std::int64_t x = 0; x < D * dv; ++x) w.prod[x] = T(0);
    for (std::int64_t x = 0; x < D; ++x) w.zsum[x] = T(0);
    add_outer_products(w.prod, w.zsum, w.phi, w.dnum, w.dden, rows, D, dv);
    add_into(dS, w.prod, D * dv);
    add_into(dZ, w.zsum, D);
  }
}

// dk and dv of keys [j0, j1) of batch item b from ds, dz and dsT = ds^T; zeros at padded keys.
template <class T>
void key_rows(const LinearBackwardArgs<T>& g, std::int64_t b, std::int64_t j0, std::int64_t j1, const T* ds,
              const T* dsT, const T* dz, T* phi, T* dphi_scratch) {
  const LinearArgs<T>& a = g.fwd;
  const std::int64_t nk = a.nk, d = a.d, D = a.D, dv = a.dv;
  const std::uint8_t* keep = a.keep ? a.keep + b * nk : nullptr;
  T* dk = g.dk + b * nk * d;
  T* dvo = g.dv + b * nk * dv;
  for (std::int64_t x = j0 * d; x < j1 * d; ++x) dk[x] = T(0);
  for (std::int64_t x = j0 * dv; x < j1 * dv; ++x) dvo[x] = T(0);
  for (std::int64_t j = first_kept(keep, j0, j1); j < j1;) {
    const std::int64_t end = run_end(keep, j, j1), rows = end - j;
    const T* k = a.k + (b * nk + j) * d;
    T* dphi = row_map(a.phi) ? dphi_scratch : dk + j * D;  // else d = D: in place
    row_features(a, k, rows, phi, false);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t x = 0; x < D; ++x) dphi[r * D + x] = dz[x];
    tile_product(dphi, D, a.v + (b * nk + j) * dv, dv, 1, dsT, D, rows, dv, D);  // + dS v_j
    tile_product(dvo + j * dv, dv, phi, D, 1, ds, dv, rows, D, dv);  // dS^T phi(k_j)
    features_backward(a, k, rows, phi, dphi, dk + j * d, false);
    j = first_kept(keep, end, j1);
  }
}

}  // namespace

template <class T>
void linear_attention_backward(const LinearBackwardArgs<T>& g) {
  const LinearArgs<T>& a = g.fwd;
  const std::int64_t batch = a.batch, D = a.D, dv = a.dv;
  if (batch == 0) return;
  const int max_threads = kernel_threads();
  const std::int64_t per_thread = 2 * kChunk * D + kChunk * dv + kChunk + 2 * D * dv + D + 64;
  const std::int64_t per_item = 2 * D * dv + D, state = D * dv + D;  // per item: dS, dS^T, dZ
  auto scratch = allocate<T>(std::size_t(max_threads * per_thread));
  auto grads = allocate<T>(std::size_t(batch * per_item));
  auto work = [&](int t) {
    T* base = scratch.get() + std::int64_t(t) * per_thread;
    BackwardWork<T> w;
    w.phi = base, w.dnum = base + kChunk * D, w.dden = w.dnum + kChunk * dv, w.prod = w.dden + kChunk;
    w.zsum = w.prod + D * dv, w.ST = w.zsum + D, w.dphi = w.ST + D * dv;
    return w;
  };
  auto round_sums = [&](std::int64_t b, const double* dS) {  // dS, dS^T and dZ of item b in T
    T* item = grads.get() + b * per_item;
    for (std::int64_t x = 0; x < D * dv; ++x) item[x] = T(dS[x]);
    for (std::int64_t x = 0; x < D; ++x) item[2 * D * dv + x] = T(dS[D * dv + x]);
    transpose(item + D * dv, item, D, dv);
  };

  const std::int64_t chunks = (a.nk + kChunk - 1) / kChunk;
  if (whole_items(batch, max_threads)) {  // an item's keys right after its queries, as the forward
    return for_each_item(batch, state, max_threads, [&](std::int64_t b, double* dS, int t) {
      const BackwardWork<T> w = work(t);
      query_pass(g, b, 0, a.nq, w, dS, dS + D * dv);
      round_sums(b, dS);
      const T* item = grads.get() + b * per_item;
      for (std::int64_t j0 = 0; j0 < a.nk; j0 += kChunk)
        key_rows(g, b, j0, min_scalar(j0 + kChunk, a.nk), item, item + D * dv, item + 2 * D * dv, w.phi, w.dphi);
    });
  }
  segmented_sums(
      batch, a.nq, state, max_threads,
      [&](std::int64_t b, std::int64_t i0, std::int64_t i1, double* dS, int t) {
        query_pass(g, b, i0, i1, work(t), dS, dS + D * dv);
      },
      round_sums);

  const std::int64_t tasks = batch * chunks;
  if (tasks == 0) return;
  const int key_threads = int(min_scalar<std::int64_t>(max_threads, tasks));
  static_loop(key_threads, tasks, [&](std::int64_t task, int t) {
    const std::int64_t b = task / chunks, j0 = task % chunks * kChunk;
    const T* item = grads.get() + b * per_item;
    const BackwardWork<T> w = work(t);
    key_rows(g, b, j0, min_scalar(j0 + kChunk, a.nk), item, item + D * dv, item + 2 * D * dv, w.phi, w.dphi);
  });
}

template void linear_attention_backward<float>(const LinearBackwardArgs<float>&);
template void linear_attention_backward<double>(const LinearBackwardArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

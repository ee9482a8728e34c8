// Fused random-feature transforms (see attnkit/random_features.h): the projection x W is a BLAS
// matmul in the op layer; this pass adds the offsets, applies sin/cos/exp with SIMD and scales, in
// one sweep over memory, rows in parallel.
#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {

template <class T>
void features_row(const RandomFeaturesArgs<T>& a, std::int64_t i) {
  using V = Vec<T>;
  const std::int64_t D = a.D;
  const T* z = a.z + i * D;
  const T row_log = a.row_log ? a.row_log[i] : T(0);
  const V rl = V::set1(row_log);
  const V scale = V::set1(a.kind == FeatureKind::exp ? a.scale : a.scale * exp_scalar(row_log));
  const std::int64_t out_width = a.kind == FeatureKind::sincos ? 2 * D : D;
  T* out = a.out + i * out_width;
  for_each_lane<T>(D, [&](std::int64_t j, int count) {
    V x = load_partial(z + j, count);
    if (a.offset) x = x + load_partial(a.offset + j, count);
    if (a.kind == FeatureKind::exp) {
      store_partial(exp(x + rl) * scale, out + j, count);
      return;
    }
    V s, c;
    sincos(x, s, c);
    if (a.kind == FeatureKind::sincos) store_partial(s * scale, out + j, count);
    store_partial(c * scale, out + (a.kind == FeatureKind::sincos ? D : 0) + j, count);
  });
}

}  // namespace

template <class T>
void random_features(const RandomFeaturesArgs<T>& a) {
  const std::int64_t n = a.n;
  const int threads = n * a.D >= (1 << 15) ? kernel_threads() : 1;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) features_row(a, i);
}

template void random_features<float>(const RandomFeaturesArgs<float>&);
template void random_features<double>(const RandomFeaturesArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

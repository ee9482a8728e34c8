// Fused random-feature transform of projections z = x W (n, D), either precomputed (z) or computed
// here from x (n, f) and w (f, D) a block of rows at a time (z stays in cache):
//   cos:     out[i, j]      = scale e^{row_log[i]} cos(z[i, j] + offset[j])            out: (n, D)
//   sincos:  out[i, j]      = scale e^{row_log[i]} sin(z[i, j] + offset[j]),
//            out[i, D + j]  = scale e^{row_log[i]} cos(z[i, j] + offset[j])            out: (n, 2D)
//   exp:     out[i, j]      = scale e^{z[i, j] + offset[j] + row_log[i]}               out: (n, D)
// offset and row_log are optional (0). For cos and exp, out may alias z (not x).
#pragma once
#include <cstdint>

namespace attnkit {

enum class FeatureKind : int { cos = 0, sincos = 1, exp = 2 };

template <class T>
struct RandomFeaturesArgs {
  const T* z = nullptr;        // (n, D); null: z = x w
  const T* x = nullptr;        // (n, f), C order
  const T* w = nullptr;        // (f, D), C order
  const T* offset = nullptr;   // (D,)
  const T* row_log = nullptr;  // (n,)
  T* out = nullptr;
  std::int64_t n = 0, D = 0, f = 0;
  T scale = T(1);
  FeatureKind kind = FeatureKind::cos;
  // Set by the kernel when it has bounded |z + offset| within sincos's exact range (then the
  // per-vector range check is skipped).
  bool bounded = false;
};

}  // namespace attnkit

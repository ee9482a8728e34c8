// Fused random-feature transform of precomputed projections z = x W (n, D):
//   cos:     out[i, j]      = scale e^{row_log[i]} cos(z[i, j] + offset[j])            out: (n, D)
//   sincos:  out[i, j]      = scale e^{row_log[i]} sin(z[i, j] + offset[j]),
//            out[i, D + j]  = scale e^{row_log[i]} cos(z[i, j] + offset[j])            out: (n, 2D)
//   exp:     out[i, j]      = scale e^{z[i, j] + offset[j] + row_log[i]}               out: (n, D)
// offset and row_log are optional (0). For cos and exp, out may alias z.
#pragma once
#include <cstdint>

namespace attnkit {

enum class FeatureKind : int { cos = 0, sincos = 1, exp = 2 };

template <class T>
struct RandomFeaturesArgs {
  const T* z;
  const T* offset = nullptr;   // (D,)
  const T* row_log = nullptr;  // (n,)
  T* out;
  std::int64_t n = 0, D = 0;
  T scale = T(1);
  FeatureKind kind = FeatureKind::cos;
};

}  // namespace attnkit

// Dynamically quantised int8 linear map:
//   C[i, j] = sx_i sw_j (sum_p qx[i, p] qw[p, j] - zx_i colsum_j) (+ bias_j)   x (m, k) float, C (m, n) float
// where each row of x is quantised per call to u8 (asymmetric: qx = clamp(rint(x / sx_i) + zx_i, 0, 255))
// and the weights were quantised once to s8 in [-127, 127] per output column (symmetric: qw = w / sw_j).
#pragma once
#include <cstdint>

namespace attnkit {

// Weights packed once (ops/int8_linear.py) in an ISA-independent layout: columns padded to a multiple of
// 64 in panels of 16, k padded to a multiple of 4; panel q holds groups g = 0 .. k4 / 4 - 1 of 64 bytes,
// byte (j, r) of group g at q * k4 * 16 + g * 64 + j * 4 + r is qw[4 g + r, 16 q + j] (zero in padding).
// This is the operand order of vpdpbusd: four consecutive k of one column form one 32-bit lane.
constexpr int kInt8PanelColumns = 16;
constexpr int kInt8ColumnPadding = 64;

struct Int8LinearArgs {
  const float* x = nullptr;          // (m, k), element (i, p) at x[i * x_row_stride + p]
  const std::int8_t* w = nullptr;    // packed as above
  const float* w_scale = nullptr;    // (n,) sw_j
  const std::int32_t* w_colsum = nullptr;  // (n,) sum_p qw[p, j]
  const float* bias = nullptr;       // (n,) optional
  float* c = nullptr;                // (m, n), element (i, j) at c[i * c_row_stride + j]
  std::int32_t* acc = nullptr;       // optional (m, n) contiguous: if set, receives sum_p qx qw instead of C
  std::int64_t m = 0, k = 0, n = 0;
  std::int64_t x_row_stride = 0, c_row_stride = 0;
};

}  // namespace attnkit

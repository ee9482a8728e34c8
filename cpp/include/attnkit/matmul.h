// Matrix product: C = A B (+ C if accumulate) (+ bias per row)   A (m, k), B (k, n), C (m, n), bias (n,);
// optionally also B's column sums, b_column_sums[j] = 0 + B[0, j] + B[1, j] + ... in row order (NumPy's
// B.sum(axis=0) for n > 1), read while B is packed: a layer's bias gradient without a pass of its own.
// A and B are read in place through element strides along both axes (transposed views, slices and
// negative strides need no copy); C is row-major with contiguous rows, row_stride elements apart.
#pragma once
#include <cstdint>

namespace attnkit {

template <class T>
struct MatmulArgs {
  const T* a;
  const T* b;
  const T* bias = nullptr;  // (n,) contiguous, optional
  T* c;
  std::int64_t m = 0, k = 0, n = 0;
  std::int64_t a_row_stride = 0, a_col_stride = 0;  // element (i, p) of A at a[i * a_row_stride + p * a_col_stride]
  std::int64_t b_row_stride = 0, b_col_stride = 0;  // element (p, j) of B at b[p * b_row_stride + j * b_col_stride]
  std::int64_t c_row_stride = 0;                    // element (i, j) of C at c[i * c_row_stride + j]
  bool accumulate = false;
  T* b_column_sums = nullptr;  // (n,) contiguous, optional: written
};

}  // namespace attnkit

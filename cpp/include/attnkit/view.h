// Plain views of the arrays the kernels read: a base pointer, one element offset per flattened batch
// item (so broadcast and strided leading dims need no copy) and a row stride; elements within a row
// are contiguous. Built by cpp/python/arrays.h, read by cpp/kernels/.
#pragma once
#include <cstdint>

namespace attnkit {

// Matrix b of a batch starts at data + batch_offset[b]; row i at + i * row_stride.
template <class T>
struct BatchedRows {
  const T* data = nullptr;
  const std::int64_t* batch_offset = nullptr;
  std::int64_t row_stride = 0;

  const T* row(std::int64_t b, std::int64_t i) const { return data + batch_offset[b] + i * row_stride; }
  explicit operator bool() const { return data != nullptr; }
};

// The same view of an output, written in place.
template <class T>
struct BatchedRowsOut {
  T* data = nullptr;
  const std::int64_t* batch_offset = nullptr;
  std::int64_t row_stride = 0;

  T* row(std::int64_t b, std::int64_t i) const { return data + batch_offset[b] + i * row_stride; }
};

}  // namespace attnkit

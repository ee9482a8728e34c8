// NumPy arrays -> kernel views. The op layer (python/attnkit/ops/) validates and lays out every
// input; these checks only make sure a view can never reach outside its array's memory.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "attnkit/view.h"

namespace attnkit {
namespace py = pybind11;

template <class T>
using CArray = py::array_t<T, py::array::c_style>;
using Offsets = py::array_t<std::int64_t, py::array::c_style>;

inline void require(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}

// The object as an array of exactly type A, never a converted copy (it would not outlive the call).
template <class A>
A exactly(const py::handle& obj, const char* name) {
  require(py::isinstance<A>(obj), std::string(name) + ": array of the expected dtype and layout required");
  return obj.cast<A>();
}

// An operand is (array, batch offsets, row stride): matrix b of the batch starts batch_offset[b]
// elements after the array's first element; rows are row_stride elements apart; elements within a row
// are contiguous (cols of them). Item b has `rows` rows, or item_rows[b] where given (packed items).
template <class T>
BatchedRows<T> batched_rows(const py::tuple& operand, std::int64_t batch, std::int64_t rows,
                            std::int64_t cols, const char* name, const std::int64_t* item_rows = nullptr) {
  require(operand.size() == 3, std::string(name) + ": expected (array, offsets, row_stride)");
  // isinstance first: a cast that converted would copy, and the view would outlive the copy.
  require(py::isinstance<py::array_t<T>>(operand[0]), std::string(name) + ": array of the kernel's dtype expected");
  require(py::isinstance<Offsets>(operand[1]), std::string(name) + ": offsets must be a C-contiguous int64 array");
  auto arr = operand[0].cast<py::array_t<T>>();
  auto off = operand[1].cast<Offsets>();
  const auto row_stride = operand[2].cast<std::int64_t>();
  require(off.ndim() == 1 && off.shape(0) == batch, std::string(name) + ": offsets must have one entry per batch item");
  const auto nd = arr.ndim();
  const auto item = static_cast<py::ssize_t>(sizeof(T));
  if (arr.size() == 0) return {arr.data(), off.data(), row_stride};  // empty: nothing is read
  require(nd >= 1 && (cols <= 1 || arr.strides(nd - 1) == item), std::string(name) + ": rows must be contiguous");
  // Element span [lo, hi] the array covers, relative to its first element.
  std::int64_t lo = 0, hi = 0;
  for (py::ssize_t ax = 0; ax < nd; ++ax) {
    const std::int64_t reach = (arr.shape(ax) - 1) * (arr.strides(ax) / item);
    (reach < 0 ? lo : hi) += reach;
  }
  if (cols > 0) {
    const auto* o = off.data();
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t n = item_rows ? item_rows[b] : rows;
      if (n <= 0) continue;
      const std::int64_t row_reach = (n - 1) * row_stride;
      const std::int64_t first = o[b] + (row_reach < 0 ? row_reach : 0);
      const std::int64_t last = o[b] + (row_reach > 0 ? row_reach : 0) + cols - 1;
      require(first >= lo && last <= hi, std::string(name) + ": view reaches outside the array");
    }
  }
  return {arr.data(), off.data(), row_stride};
}

// An output operand: the same view, written in place. Rows of distinct (batch item, row) pairs must not
// overlap; the op layer checks that before it builds the operand.
template <class T>
BatchedRowsOut<T> output_rows(const py::tuple& operand, std::int64_t batch, std::int64_t rows, std::int64_t cols,
                              const char* name) {
  const BatchedRows<T> view = batched_rows<T>(operand, batch, rows, cols, name);
  require(operand[0].cast<py::array>().writeable(), std::string(name) + ": array must be writeable");
  return {const_cast<T*>(view.data), view.batch_offset, view.row_stride};
}

}  // namespace attnkit

// One bind_<concept> function per kernel concept (bind_<concept>.cpp), called by module.cpp.
#pragma once
#include <pybind11/pybind11.h>

#include <cstdint>

#include "attnkit/block_quantized.h"

namespace attnkit {
namespace py = pybind11;

template <class T>
struct DtypeTag {
  using type = T;
};

// Calls f(DtypeTag<float>{}) then f(DtypeTag<double>{}): pybind11 tries overloads in that order,
// and noconvert arguments make each overload accept only its own dtype.
template <class F>
void for_each_dtype(F&& f) {
  f(DtypeTag<float>{});
  f(DtypeTag<double>{});
}

void bind_softmax(py::module_& m);
void bind_attention(py::module_& m);
void bind_positions(py::module_& m);
void bind_random_features(py::module_& m);
void bind_linear_attention(py::module_& m);
void bind_cross_entropy(py::module_& m);
void bind_layer_norm(py::module_& m);
void bind_gelu(py::module_& m);
void bind_swiglu(py::module_& m);
void bind_dropout(py::module_& m);
void bind_embedding(py::module_& m);
void bind_matmul(py::module_& m);
void bind_optim(py::module_& m);
void bind_int8_linear(py::module_& m);
void bind_block_quantized(py::module_& m);
void bind_decoding_plan(py::module_& m);
void bind_number_text(py::module_& m);

// The data of `packed` (None: null) after checking it holds the packed blocks of an (n_in, n_out) matrix
// (attnkit/block_quantized.h), appended to `keep` so that it outlives the pointer's use.
const std::uint8_t* packed_blocks(const py::object& packed, BlockKind kind, std::int64_t n_in, std::int64_t n_out,
                                  py::list& keep);

}  // namespace attnkit

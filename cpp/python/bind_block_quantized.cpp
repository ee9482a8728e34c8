// Binding of the GGML block-quantised kernels. The op layer (ops/block_quantized.py) validates; this file
// only checks that every view stays inside its array. The blocks are taken read-only and never copied
// (they may be a memory-mapped file).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "arrays.h"
#include "attnkit/isa.h"
#include "bindings.h"

namespace attnkit {

namespace {

BlockKind block_kind(const std::string& kind) {
  if (kind == "q8_0") return BlockKind::q8_0;
  require(kind == "q4_1", "kind must be 'q4_1' or 'q8_0', got '" + kind + "'");
  return BlockKind::q4_1;
}

// The blocks' kind, after checking that they are (n_out, n_in / 32 * block_bytes).
BlockKind check_blocks(const CArray<std::uint8_t>& blocks, const std::string& kind, std::int64_t n_in) {
  const BlockKind k = block_kind(kind);
  require(n_in >= 0 && n_in % kBlockValues == 0, "n_in must be a multiple of 32");
  require(blocks.ndim() == 2 && blocks.shape(1) == n_in / kBlockValues * block_bytes(k),
          "blocks must be (n_out, n_in / 32 * block_bytes)");
  return k;
}

}  // namespace

const std::uint8_t* packed_blocks(const py::object& packed, BlockKind kind, std::int64_t n_in, std::int64_t n_out,
                                  py::list& keep) {
  if (packed.is_none()) return nullptr;
  auto a = exactly<CArray<std::uint8_t>>(packed, "packed");
  const std::int64_t groups = (n_out + kPackedColumns - 1) / kPackedColumns;
  require(a.ndim() == 1 && a.shape(0) == groups * (n_in / kBlockValues) * packed_bytes(kind),
          "packed must hold ceil(n_out / 16) * n_in / 32 * packed_bytes(kind) bytes");
  keep.append(a);
  return a.data();
}

namespace {

void block_quantized_matmul(CArray<std::uint8_t> blocks, const std::string& kind, std::int64_t n_in, CArray<float> x,
                            const py::object& bias, CArray<float> out, bool int8_x, const py::object& packed) {
  BlockQuantizedMatmulArgs g;
  g.int8_x = int8_x;
  g.kind = check_blocks(blocks, kind, n_in);
  const std::int64_t n_out = blocks.shape(0);
  py::list keep;
  g.packed = packed_blocks(packed, g.kind, n_in, n_out, keep);
  require(x.ndim() == 2 && x.shape(1) == n_in, "x must be (m, n_in)");
  const std::int64_t m = x.shape(0);
  require(out.ndim() == 2 && out.shape(0) == m && out.shape(1) == n_out, "out must be (m, n_out)");
  require(out.writeable(), "out must be writeable");
  CArray<float> bias_array;
  if (!bias.is_none()) {
    bias_array = exactly<CArray<float>>(bias, "bias");
    require(bias_array.ndim() == 1 && bias_array.shape(0) == n_out, "bias must be (n_out,)");
    g.bias = bias_array.data();
  }
  g.blocks = blocks.data(), g.x = x.data(), g.c = out.mutable_data();
  g.m = m, g.n_in = n_in, g.n_out = n_out;
  g.x_row_stride = n_in, g.c_row_stride = n_out;
  const auto kernel = active_block_quantized_matmul();
  py::gil_scoped_release release;
  kernel(g);
}

void block_quantized_rows(CArray<std::uint8_t> blocks, const std::string& kind, std::int64_t n_in,
                          CArray<std::int64_t> ids, CArray<float> out) {
  BlockQuantizedRowsArgs g;
  g.kind = check_blocks(blocks, kind, n_in);
  const std::int64_t n_out = blocks.shape(0);
  require(ids.ndim() == 1, "ids must be 1-D");
  const std::int64_t count = ids.shape(0);
  require(out.ndim() == 2 && out.shape(0) == count && out.shape(1) == n_in, "out must be (len(ids), n_in)");
  require(out.writeable(), "out must be writeable");
  const std::int64_t* id = ids.data();
  for (std::int64_t r = 0; r < count; ++r) require(id[r] >= 0 && id[r] < n_out, "ids must be in [0, n_out)");
  g.blocks = blocks.data(), g.ids = id, g.out = out.mutable_data();
  g.count = count, g.n_in = n_in, g.out_row_stride = n_in;
  const auto kernel = active_kernels().block_quantized_rows;
  py::gil_scoped_release release;
  kernel(g);
}

}  // namespace

void bind_block_quantized(py::module_& m) {
  m.def("block_quantized_matmul", &block_quantized_matmul, py::arg("blocks").noconvert(), py::arg("kind"),
        py::arg("n_in"), py::arg("x").noconvert(), py::arg("bias"), py::arg("out").noconvert(),
        py::arg("int8_x") = false, py::arg("packed") = py::none(),
        "out = x @ W (+ bias), W (n_in, n_out) stored as n_out rows of GGML blocks; int8_x: x as int8 blocks; "
        "packed: the blocks in column groups, read instead of blocks with int8_x.");
  m.def("block_quantized_rows", &block_quantized_rows, py::arg("blocks").noconvert(), py::arg("kind"),
        py::arg("n_in"), py::arg("ids").noconvert(), py::arg("out").noconvert(),
        "out[r] = the stored row ids[r] of the blocks, dequantised.");
}

}  // namespace attnkit

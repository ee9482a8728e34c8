// GGML block-quantised weights, read in place (blocks of 32 values, little-endian):
//   q8_0: half d, 32 x int8 q                 value t = d q[t]                                   34 bytes
//   q4_1: half d, half m, 16 x uint8 qs       value t = d (qs[t] & 15) + m, t + 16: d (qs[t] >> 4) + m   20 bytes
// W (n_in, n_out) is stored as n_out rows of n_in / 32 consecutive blocks: row j holds column j of W.
//   block_quantized_matmul:  C = X W (+ bias)      X (m, n_in), C (m, n_out), bias (n_out,)
//   block_quantized_rows:    R[r, :] = W[:, ids[r]]   R (count, n_in)  (the stored rows, dequantised)
//   block_quantize_x:        X's blocks as int8 codes and scales, as the products with int8 activations read them
#pragma once
#include <cstdint>

namespace attnkit {

enum class BlockKind : int { q8_0, q4_1 };
constexpr int kBlockValues = 32;
constexpr std::int64_t block_bytes(BlockKind kind) { return kind == BlockKind::q8_0 ? 34 : 20; }

// Blocks packed for int8 activations (ops.BlockQuantizedMatrix packs them): columns in groups of 16 (the last
// padded with zero columns), per group the n_in / 32 blocks in order, per block packed_bytes(kind) bytes, where
// a vector lane is one column's quad (4 bytes):
//   q4_1 (320): for each quad q = 0..3, the 16 columns' bytes qs[4q, 4q + 4) (64 bytes: low nibbles are values
//               4q..4q+3, high nibbles 16+4q..), then the 16 columns' float16 d, then their float16 m;
//   q8_0 (608): for each quad q = 0..7, the 16 columns' int8 values [4q, 4q + 4), then their float16 d, then their
//               int32 -128 sum(q) (VNNI's products read x's codes + 128 as unsigned bytes: this takes it back).
constexpr std::int64_t kPackedColumns = 16;
constexpr std::int64_t packed_bytes(BlockKind kind) { return kind == BlockKind::q8_0 ? 608 : 320; }

struct BlockQuantizedMatmulArgs {
  const std::uint8_t* blocks = nullptr;  // (n_out, n_in / 32 * block_bytes) contiguous
  BlockKind kind = BlockKind::q8_0;
  const float* x = nullptr;              // (m, n_in), element (i, p) at x[i * x_row_stride + p]
  const float* bias = nullptr;           // (n_out,) optional
  float* c = nullptr;                    // (m, n_out), element (i, j) at c[i * c_row_stride + j]
  std::int64_t m = 0, n_in = 0, n_out = 0;
  std::int64_t x_row_stride = 0, c_row_stride = 0;
  // X read as llama.cpp reads it: each block of 32 values as int8 codes and a scale (kernels/block_quantized.cpp)
  bool int8_x = false;
  // With int8_x: the same weights packed in column groups (packed_bytes per group and block, groups of columns
  // [j, j + 16) in order from the first column of `blocks`), read instead of `blocks` where the ISA has the
  // packed kernels (kernels/block_int8.h). Optional.
  const std::uint8_t* packed = nullptr;
  // With int8_x: X already read as int8 blocks (block_quantize_x over its m rows), used instead of x. Optional: a
  // decoding plan reads each input once for all the products that take it, with its team sharing the rows.
  const std::int8_t* x_codes = nullptr;
  const float* x_scales = nullptr;
  const float* x_scaled_sums = nullptr;
};

// X (m, n) read as int8 blocks as the products with int8_x read it: per block of 32 values of a row, the codes
// rint(x 127 / amax) (n a row), the scale e = amax / 127 and e sum(codes) (n / 32 a row), the same bits on every ISA.
struct BlockQuantizeXArgs {
  const float* x = nullptr;  // (m, n), element (i, p) at x[i * x_row_stride + p]
  std::int8_t* codes = nullptr;
  float* scales = nullptr;
  float* scaled_sums = nullptr;
  std::int64_t m = 0, n = 0, x_row_stride = 0;
};

struct BlockQuantizedRowsArgs {
  const std::uint8_t* blocks = nullptr;  // as above
  BlockKind kind = BlockKind::q8_0;
  const std::int64_t* ids = nullptr;     // (count,), each in [0, n_out)
  float* out = nullptr;                  // (count, n_in), row r at out[r * out_row_stride]
  std::int64_t count = 0, n_in = 0, out_row_stride = 0;
};

}  // namespace attnkit

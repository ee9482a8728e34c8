// The int8-activation block product of kernels/block_int8.h with vpdpbusd (BlockDotVnni), compiled once with
// x86-64-v4 and AVX512-VNNI like int8_linear_vnni.cpp. Float activations, empty shapes and every other path
// stay with the avx512 table's kernel; BlockDotVnni's sums are BlockDot's, so the bits are the same.
#include "block_int8.h"

#if !defined(__AVX512VNNI__)
#error "block_quantized_vnni.cpp must be compiled with -mavx512vnni"
#endif

namespace attnkit {

void block_quantized_matmul_avx512vnni(const BlockQuantizedMatmulArgs& g) {
  if (!g.int8_x || g.m == 0 || g.n_out == 0 || g.n_in == 0) return kernels_avx512().block_quantized_matmul(g);
  ATTNKIT_KERNEL_NS::block_int8_matmul<ATTNKIT_KERNEL_NS::BlockDotVnni>(g);
}

}  // namespace attnkit

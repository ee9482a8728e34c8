// The int8-activation block product of kernels/block_int8.h with vpdpbusd (BlockDotVnni), compiled once per
// VNNI variant like int8_linear_vnni.cpp. Float activations, empty shapes and every other path stay with the
// base ISA's kernel; BlockDotVnni's sums are BlockDot's, so the bits are the same.
#include "block_int8.h"

namespace attnkit {

namespace {

void block_quantized_vnni(const KernelTable& base, const BlockQuantizedMatmulArgs& g) {
  if (!g.int8_x || g.m == 0 || g.n_out == 0 || g.n_in == 0) return base.block_quantized_matmul(g);
  ATTNKIT_KERNEL_NS::block_int8_matmul<ATTNKIT_KERNEL_NS::BlockDotVnni>(g);
}

}  // namespace

#if defined(__AVX512VNNI__)
void block_quantized_matmul_avx512vnni(const BlockQuantizedMatmulArgs& g) { block_quantized_vnni(kernels_avx512(), g); }
#elif defined(__AVXVNNI__)
void block_quantized_matmul_avx2vnni(const BlockQuantizedMatmulArgs& g) { block_quantized_vnni(kernels_avx2(), g); }
#else
#error "block_quantized_vnni.cpp must be compiled with -mavx512vnni or -mavxvnni"
#endif

}  // namespace attnkit

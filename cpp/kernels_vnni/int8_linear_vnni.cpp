// The int8 linear kernel of kernels/int8_gemm.h with vpdpbusd, compiled once with x86-64-v4 and
// AVX512-VNNI (x86-64-v4 lacks VNNI, and a fourth ISA level would recompile every kernel for one).
// dispatch.cpp calls it under the avx512 ISA when CPUID reports VNNI.
#include "int8_gemm.h"

#if !defined(__AVX512VNNI__)
#error "int8_linear_vnni.cpp must be compiled with -mavx512vnni"
#endif

namespace attnkit {

void int8_linear_avx512vnni(const Int8LinearArgs& g) { ATTNKIT_KERNEL_NS::int8_linear_with<ATTNKIT_KERNEL_NS::DotVnni>(g); }

}  // namespace attnkit

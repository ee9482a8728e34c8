// The int8 linear kernel of kernels/int8_gemm.h with vpdpbusd, compiled once per VNNI variant: with
// x86-64-v4 and AVX512-VNNI, and with x86-64-v3 and AVX-VNNI (a level above each ISA's own would recompile
// every kernel for one instruction). dispatch.cpp calls it under the avx512 or avx2 ISA when CPUID reports it.
#include "int8_gemm.h"

namespace attnkit {

#if defined(__AVX512VNNI__)
void int8_linear_avx512vnni(const Int8LinearArgs& g) { ATTNKIT_KERNEL_NS::int8_linear_with<ATTNKIT_KERNEL_NS::DotVnni>(g); }
#elif defined(__AVXVNNI__)
void int8_linear_avx2vnni(const Int8LinearArgs& g) { ATTNKIT_KERNEL_NS::int8_linear_with<ATTNKIT_KERNEL_NS::DotVnni>(g); }
#else
#error "int8_linear_vnni.cpp must be compiled with -mavx512vnni or -mavxvnni"
#endif

}  // namespace attnkit

// Dynamically quantised int8 linear map (see attnkit/int8_linear.h) with the exact pmaddwd product
// of every ISA; the VNNI variant of the same kernel is kernels_vnni/int8_linear_vnni.cpp.
#include "int8_gemm.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

void int8_linear(const Int8LinearArgs& g) { int8_linear_with<DotExact>(g); }

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

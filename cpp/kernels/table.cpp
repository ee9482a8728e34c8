// This variant's kernel table (compiled once per ISA; ATTNKIT_ISA_NAME names the variant).
#include "attnkit/isa.h"
#include "kernels.h"

#define ATTNKIT_CAT2(a, b) a##b
#define ATTNKIT_CAT(a, b) ATTNKIT_CAT2(a, b)
#define ATTNKIT_STR2(a) #a
#define ATTNKIT_STR(a) ATTNKIT_STR2(a)

namespace attnkit {

namespace ATTNKIT_KERNEL_NS {
template <class T>
constexpr TypedKernels<T> typed() {
  return {&softmax<T>, &attention<T>, &attention_weights<T>, &attention_backward<T>,
          &decode_attention<T>, &positions<T>,
          &random_features<T>, &causal_linear_attention<T>, &causal_linear_attention_backward<T>,
          &linear_attention<T>, &linear_attention_backward<T>, &softmax_backward<T>, &cross_entropy<T>,
          &layer_norm<T>, &layer_norm_backward<T>, &gelu<T>, &gelu_backward<T>, &swiglu<T>, &matmul<T>,
          &adamw_update<T>, &sum_of_squares<T>, &argmax_attention<T>, &dropout<T>, &embedding_backward<T>};
}
}  // namespace ATTNKIT_KERNEL_NS

const KernelTable& ATTNKIT_CAT(kernels_, ATTNKIT_ISA_NAME)() {
  static const KernelTable table{ATTNKIT_STR(ATTNKIT_ISA_NAME), ATTNKIT_KERNEL_NS::typed<float>(),
                                 ATTNKIT_KERNEL_NS::typed<double>(), &ATTNKIT_KERNEL_NS::int8_linear,
                                 &ATTNKIT_KERNEL_NS::block_quantized_matmul,
                                 &ATTNKIT_KERNEL_NS::block_quantized_rows,
                                 &ATTNKIT_KERNEL_NS::block_quantize_x};
  return table;
}

}  // namespace attnkit

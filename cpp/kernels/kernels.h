// Declarations of the kernels of one ISA variant (this header is compiled inside each variant's
// namespace). Each kernel assumes valid input: checks live in python/attnkit/ops/.
#pragma once
#include "attnkit/attention.h"
#include "attnkit/block_quantized.h"
#include "attnkit/cross_entropy.h"
#include "attnkit/decode_attention.h"
#include "attnkit/dropout.h"
#include "attnkit/embedding.h"
#include "attnkit/gelu.h"
#include "attnkit/int8_linear.h"
#include "attnkit/isa.h"
#include "attnkit/layer_norm.h"
#include "attnkit/linear_attention.h"
#include "attnkit/matmul.h"
#include "attnkit/optim.h"
#include "attnkit/positions.h"
#include "attnkit/random_features.h"
#include "attnkit/softmax.h"
#include "attnkit/swiglu.h"
#include "attnkit/thread_pool.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

template <class T>
void softmax(const SoftmaxArgs<T>& a);
template <class T>
void attention(const AttentionArgs<T>& a);
template <class T>
void attention_weights(const AttentionWeightsArgs<T>& a);
template <class T>
void argmax_attention(const AttentionArgs<T>& a);
template <class T>
void attention_backward(const AttentionBackwardArgs<T>& a);
template <class T>
void positions(const PositionsArgs<T>& a);
template <class T>
void random_features(const RandomFeaturesArgs<T>& a);
template <class T>
void causal_linear_attention(const CausalLinearArgs<T>& a);
template <class T>
void causal_linear_attention_backward(const CausalLinearBackwardArgs<T>& a);
template <class T>
void linear_attention(const LinearArgs<T>& a);
template <class T>
void linear_attention_backward(const LinearBackwardArgs<T>& a);
template <class T>
void decode_attention(const DecodeAttentionArgs<T>& a);
template <class T>
void softmax_backward(const SoftmaxBackwardArgs<T>& a);
template <class T>
void cross_entropy(const CrossEntropyArgs<T>& a);
template <class T>
void layer_norm(const LayerNormArgs<T>& a);
template <class T>
void layer_norm_backward(const LayerNormBackwardArgs<T>& a);
template <class T>
void gelu(const GeluArgs<T>& a);
template <class T>
void gelu_backward(const GeluArgs<T>& a);
template <class T>
void swiglu(const SwigluArgs<T>& a);
template <class T>
void dropout(const DropoutArgs<T>& a);
template <class T>
void embedding_backward(const EmbeddingBackwardArgs<T>& a);
template <class T>
void matmul(const MatmulArgs<T>& a);
template <class T>
void adamw_update(const AdamWArgs<T>* items, std::int64_t count);
template <class T>
void sum_of_squares(const SumOfSquaresArgs<T>* items, std::int64_t count);
void int8_linear(const Int8LinearArgs& a);
void block_quantized_matmul(const BlockQuantizedMatmulArgs& a);
void block_quantized_rows(const BlockQuantizedRowsArgs& a);
void block_quantize_x(const BlockQuantizeXArgs& a);

// Threads for an elementwise or row-wise pass over n elements: the caller's alone below 2^18 (1 MB of
// float32, 50-100 us on one core), about what waking a sleeping worker costs on a virtual machine
// (40-200 us; attnkit/thread_pool.h). From 2^15 to 2^18: the default classifier's fit in 0.9x the time
// (benchmarks/results/wait_policy.md).
constexpr std::int64_t kElementwiseParallel = std::int64_t(1) << 18;
// With a worker spinning (team_awake), from 2^15: GELU 1.56x and layer norm 1.13x there on two threads, 0.98x at
// 2^14 (Zen 5 held to AVX2).
constexpr std::int64_t kElementwiseParallelAwake = std::int64_t(1) << 15;
inline int elementwise_threads(std::int64_t n) {
  return n >= (team_awake() ? kElementwiseParallelAwake : kElementwiseParallel) ? kernel_threads() : 1;
}

// Rows of n values per work item of a row-wise kernel's dynamic schedule: ~16K values, so a worker woken late
// (60-80 us on a 2-core VM, from sleep) takes fewer rows than the one that woke it, at one atomic
// increment per item. Every row is computed alone, so the bits do not depend on the split.
inline std::int64_t row_chunk(std::int64_t n) {
  constexpr std::int64_t kValues = std::int64_t(1) << 14;
  return n >= kValues ? 1 : kValues / (n > 0 ? n : 1);
}

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

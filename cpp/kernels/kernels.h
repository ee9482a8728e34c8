// Declarations of the kernels of one ISA variant (this header is compiled inside each variant's
// namespace). Each kernel assumes valid input: checks live in python/attnkit/ops.py.
#pragma once
#include "attnkit/attention.h"
#include "attnkit/linear_attention.h"
#include "attnkit/positions.h"
#include "attnkit/random_features.h"
#include "attnkit/softmax.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

template <class T>
void softmax(const SoftmaxArgs<T>& a);
template <class T>
void attention(const AttentionArgs<T>& a);
template <class T>
void attention_weights(const AttentionWeightsArgs<T>& a);
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

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

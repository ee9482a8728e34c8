// The kernel table: one instance per ISA variant (cpp/kernels/table.cpp, compiled per ISA), one chosen
// at import by cpp/src/dispatch.cpp. Bindings call kernels only through active_kernels().
#pragma once
#include <string>
#include <vector>

#include "attnkit/attention.h"
#include "attnkit/block_quantized.h"
#include "attnkit/cross_entropy.h"
#include "attnkit/decode_attention.h"
#include "attnkit/dropout.h"
#include "attnkit/embedding.h"
#include "attnkit/gelu.h"
#include "attnkit/int8_linear.h"
#include "attnkit/layer_norm.h"
#include "attnkit/linear_attention.h"
#include "attnkit/matmul.h"
#include "attnkit/optim.h"
#include "attnkit/positions.h"
#include "attnkit/random_features.h"
#include "attnkit/softmax.h"
#include "attnkit/swiglu.h"

namespace attnkit {

template <class T>
struct TypedKernels {
  void (*softmax)(const SoftmaxArgs<T>&);
  void (*attention)(const AttentionArgs<T>&);
  void (*attention_weights)(const AttentionWeightsArgs<T>&);
  void (*attention_backward)(const AttentionBackwardArgs<T>&);
  void (*decode_attention)(const DecodeAttentionArgs<T>&);
  void (*positions)(const PositionsArgs<T>&);
  void (*random_features)(const RandomFeaturesArgs<T>&);
  void (*causal_linear_attention)(const CausalLinearArgs<T>&);
  void (*causal_linear_attention_backward)(const CausalLinearBackwardArgs<T>&);
  void (*linear_attention)(const LinearArgs<T>&);
  void (*linear_attention_backward)(const LinearBackwardArgs<T>&);
  void (*softmax_backward)(const SoftmaxBackwardArgs<T>&);
  void (*cross_entropy)(const CrossEntropyArgs<T>&);
  void (*layer_norm)(const LayerNormArgs<T>&);
  void (*layer_norm_backward)(const LayerNormBackwardArgs<T>&);
  void (*gelu)(const GeluArgs<T>&);
  void (*gelu_backward)(const GeluArgs<T>&);
  void (*swiglu)(const SwigluArgs<T>&);
  void (*matmul)(const MatmulArgs<T>&);
  void (*adamw_update)(const AdamWArgs<T>*, std::int64_t);
  void (*sum_of_squares)(const SumOfSquaresArgs<T>*, std::int64_t);
  void (*argmax_attention)(const AttentionArgs<T>&);
  void (*dropout)(const DropoutArgs<T>&);
  void (*embedding_backward)(const EmbeddingBackwardArgs<T>&);
};

struct KernelTable {
  const char* isa;
  TypedKernels<float> f32;
  TypedKernels<double> f64;
  void (*int8_linear)(const Int8LinearArgs&);
  void (*block_quantized_matmul)(const BlockQuantizedMatmulArgs&);
  void (*block_quantized_rows)(const BlockQuantizedRowsArgs&);
  void (*block_quantize_x)(const BlockQuantizeXArgs&);

  template <class T>
  const TypedKernels<T>& get() const;
};
template <>
inline const TypedKernels<float>& KernelTable::get<float>() const { return f32; }
template <>
inline const TypedKernels<double>& KernelTable::get<double>() const { return f64; }

// Defined in kernels/table.cpp once per compiled ISA.
const KernelTable& kernels_baseline();
const KernelTable& kernels_avx2();
const KernelTable& kernels_avx512();

// kernels_vnni/ (int8_linear_vnni.cpp, block_quantized_vnni.cpp), compiled once more for each of the avx512
// and avx2 variants that is compiled: with AVX512-VNNI and with AVX-VNNI.
void int8_linear_avx512vnni(const Int8LinearArgs& g);
void block_quantized_matmul_avx512vnni(const BlockQuantizedMatmulArgs& g);
void int8_linear_avx2vnni(const Int8LinearArgs& g);
void block_quantized_matmul_avx2vnni(const BlockQuantizedMatmulArgs& g);

// dispatch.cpp
std::vector<std::string> available_isas();  // ISAs compiled in and supported by this CPU, low to high
const KernelTable& active_kernels();
std::string active_isa();
void set_isa(const std::string& name);  // throws std::invalid_argument if unavailable
// The int8 linear kernel: the active table's, or its VNNI variant when the active ISA has one on this CPU
// (avx512 with AVX512-VNNI, avx2 with AVX-VNNI) and VNNI is enabled (ATTNKIT_INT8_VNNI=0 or
// set_int8_vnni(false) disable it, for tests and benchmarks).
using Int8LinearKernel = void (*)(const Int8LinearArgs&);
Int8LinearKernel active_int8_linear();
// The block-quantised product, likewise: its int8-activation path runs vpdpbusd in the VNNI variants.
using BlockQuantizedKernel = void (*)(const BlockQuantizedMatmulArgs&);
BlockQuantizedKernel active_block_quantized_matmul();
std::string active_int8_variant();         // "avx512vnni", "avx2vnni" or the active ISA's name
std::vector<std::string> int8_vnni_isas();  // the ISAs with a VNNI variant on this CPU and build, low to high
bool int8_vnni_available();                 // whether int8_vnni_isas() is not empty
void set_int8_vnni(bool enabled);           // throws std::invalid_argument if enabling and unavailable

// threads.cpp: the thread count kernels use: the calling thread's own count when it set one
// (set_call_threads, > 0), else the min of set_num_threads and omp_get_max_threads().
int kernel_threads();
void set_num_threads(int n);
int get_num_threads();
void set_call_threads(int n);  // the calling thread's count, 0 for the process's; no other thread sees it
int get_call_threads();

}  // namespace attnkit

// Vector helpers for kernel files. Included only by cpp/kernels/*.cpp, which are compiled once per
// ISA; everything here lives in that ISA's namespace so no inline function is shared (ODR) between
// variants compiled with different flags. Vec<T> has W lanes; the kernels are written against Vec<T>
// only, so the baseline build runs the same algorithm as the AVX-512 one.
#pragma once

#ifndef ATTNKIT_KERNEL_NS
#error "simd.h is for kernel files compiled once per ISA (ATTNKIT_KERNEL_NS undefined)"
#endif

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

template <class T>
struct Vec;

// exp() constants: x is clamped to [lo, hi]; below lo the result is 0. Above hi it saturates, which
// kernels never reach (they exponentiate x - max <= 0).
template <class T>
struct ExpConst;
template <>
struct ExpConst<float> {
  static constexpr float lo = -87.3f, hi = 88.3f;
  static constexpr float log2e = 1.44269504088896341f;
  static constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
  static constexpr float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  static constexpr int degree = 7;
};
template <>
struct ExpConst<double> {
  static constexpr double lo = -708.3, hi = 709.0;
  static constexpr double log2e = 1.4426950408889634074;
  static constexpr double ln2_hi = 0.693145751953125, ln2_lo = 1.42860682030941723212e-6;
  static constexpr double magic = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr int degree = 13;
};

#if defined(__AVX2__)
// The sum of 8 float lanes as a tree: the 128-bit halves added, then lanes 0 + 2 and 1 + 3, then those two.
// AVX2's Vec<float>::reduce_add; AVX-512's adds its 256-bit halves first (GCC's _mm512_reduce_add_ps, written
// out here so that tree_sum8x4 is known to give its bits).
inline float tree_sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// tree_sum8 of a, b, c and d into out[0..3]: the same adds (so the same bits), transposed so that the four
// share their shuffles (a decoding step scores keys four at a time: 17 instructions where four sums took 28).
inline void tree_sum8x4(__m256 a, __m256 b, __m256 c, __m256 d, float* out) {
  const __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  const __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
  // Lanes 0 + 2 and 1 + 3 of each half: (a, c | b, d) side by side in each 128-bit lane.
  const __m256 pairs = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 sums = _mm256_hadd_ps(pairs, pairs);  // a c a c | b d b d
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sums);
  out[0] = lanes[0], out[1] = lanes[4], out[2] = lanes[1], out[3] = lanes[5];
}
#endif

#if defined(__AVX512F__)

template <>
struct Vec<float> {
  static constexpr int W = 16;
  __m512 v;
  static Vec zero() { return {_mm512_setzero_ps()}; }
  static Vec set1(float x) { return {_mm512_set1_ps(x)}; }
  static Vec load(const float* p) { return {_mm512_loadu_ps(p)}; }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  // The first n lanes (0 <= n <= W); the others load as 0 and are not stored (never touched).
  static Vec load_n(const float* p, int n) { return {_mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p)}; }
  void store_n(float* p, int n) const { _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), v); }
  friend Vec operator+(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
  friend Vec operator/(Vec a, Vec b) { return {_mm512_div_ps(a.v, b.v)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  // x86 min/max return the second operand when either is NaN: callers pass x second to keep NaN.
  static Vec max(Vec a, Vec b) { return {_mm512_max_ps(a.v, b.v)}; }
  static Vec min(Vec a, Vec b) { return {_mm512_min_ps(a.v, b.v)}; }
  static Vec abs(Vec a) { return {_mm512_abs_ps(a.v)}; }
  static Vec sqrt(Vec a) { return {_mm512_sqrt_ps(a.v)}; }
  static bool any_greater(Vec a, Vec b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ) != 0; }
  float reduce_add() const { return tree_sum8(half_sum(v)); }
  static __m256 half_sum(__m512 x) {  // the 256-bit halves added
    return _mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  }
  float reduce_max() const { return _mm512_reduce_max_ps(v); }
  // 2^n from kf = n + magic (n integral): (bits(kf) + 127) << 23 (magic's low bits are zero mod 2^9).
  static Vec pow2_from_magic(Vec kf) {
    __m512i b = _mm512_add_epi32(_mm512_castps_si512(kf.v), _mm512_set1_epi32(127));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(b, 23))};
  }
  // r where !(x < lo), else 0 (NaN x keeps r).
  static Vec zero_below(Vec r, Vec x, Vec lo) {
    return {_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x.v, lo.v, _CMP_NLT_UQ), r.v)};
  }
  // Bit helpers for sincos: kf = n + magic carries the integer n in its low mantissa bits.
  static Vec odd_mask(Vec kf) {  // all ones where n is odd
    __m512i b = _mm512_and_si512(_mm512_castps_si512(kf.v), _mm512_set1_epi32(1));
    return {_mm512_castsi512_ps(_mm512_sub_epi32(_mm512_setzero_si512(), b))};
  }
  static Vec sign_of_bit1(Vec kf, int add) {  // sign bit set where (n + add) & 2
    __m512i b = _mm512_add_epi32(_mm512_castps_si512(kf.v), _mm512_set1_epi32(add));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(2)), 30))};
  }
  static Vec select(Vec m, Vec a, Vec b) {  // m ? b : a, bitwise
    __m512i mi = _mm512_castps_si512(m.v);
    return {_mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(mi, _mm512_castps_si512(b.v)),
                                                _mm512_andnot_si512(mi, _mm512_castps_si512(a.v))))};
  }
  static Vec xor_bits(Vec a, Vec m) {
    return {_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a.v), _mm512_castps_si512(m.v)))};
  }
};

template <>
struct Vec<double> {
  static constexpr int W = 8;
  __m512d v;
  static Vec zero() { return {_mm512_setzero_pd()}; }
  static Vec set1(double x) { return {_mm512_set1_pd(x)}; }
  static Vec load(const double* p) { return {_mm512_loadu_pd(p)}; }
  void store(double* p) const { _mm512_storeu_pd(p, v); }
  static Vec load_n(const double* p, int n) { return {_mm512_maskz_loadu_pd(__mmask8((1u << n) - 1), p)}; }
  void store_n(double* p, int n) const { _mm512_mask_storeu_pd(p, __mmask8((1u << n) - 1), v); }
  friend Vec operator+(Vec a, Vec b) { return {_mm512_add_pd(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {_mm512_sub_pd(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {_mm512_mul_pd(a.v, b.v)}; }
  friend Vec operator/(Vec a, Vec b) { return {_mm512_div_pd(a.v, b.v)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_pd(a.v, b.v, c.v)}; }
  static Vec max(Vec a, Vec b) { return {_mm512_max_pd(a.v, b.v)}; }
  static Vec min(Vec a, Vec b) { return {_mm512_min_pd(a.v, b.v)}; }
  static Vec abs(Vec a) { return {_mm512_abs_pd(a.v)}; }
  static Vec sqrt(Vec a) { return {_mm512_sqrt_pd(a.v)}; }
  static bool any_greater(Vec a, Vec b) { return _mm512_cmp_pd_mask(a.v, b.v, _CMP_GT_OQ) != 0; }
  double reduce_add() const { return _mm512_reduce_add_pd(v); }
  double reduce_max() const { return _mm512_reduce_max_pd(v); }
  static Vec pow2_from_magic(Vec kf) {
    __m512i b = _mm512_add_epi64(_mm512_castpd_si512(kf.v), _mm512_set1_epi64(1023));
    return {_mm512_castsi512_pd(_mm512_slli_epi64(b, 52))};
  }
  static Vec zero_below(Vec r, Vec x, Vec lo) {
    return {_mm512_maskz_mov_pd(_mm512_cmp_pd_mask(x.v, lo.v, _CMP_NLT_UQ), r.v)};
  }
  static Vec odd_mask(Vec kf) {
    __m512i b = _mm512_and_si512(_mm512_castpd_si512(kf.v), _mm512_set1_epi64(1));
    return {_mm512_castsi512_pd(_mm512_sub_epi64(_mm512_setzero_si512(), b))};
  }
  static Vec sign_of_bit1(Vec kf, int add) {
    __m512i b = _mm512_add_epi64(_mm512_castpd_si512(kf.v), _mm512_set1_epi64(add));
    return {_mm512_castsi512_pd(_mm512_slli_epi64(_mm512_and_si512(b, _mm512_set1_epi64(2)), 62))};
  }
  static Vec select(Vec m, Vec a, Vec b) {
    __m512i mi = _mm512_castpd_si512(m.v);
    return {_mm512_castsi512_pd(_mm512_or_si512(_mm512_and_si512(mi, _mm512_castpd_si512(b.v)),
                                                _mm512_andnot_si512(mi, _mm512_castpd_si512(a.v))))};
  }
  static Vec xor_bits(Vec a, Vec m) {
    return {_mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(a.v), _mm512_castpd_si512(m.v)))};
  }
};

#elif defined(__AVX2__) && defined(__FMA__)

template <>
struct Vec<float> {
  static constexpr int W = 8;
  __m256 v;
  static Vec zero() { return {_mm256_setzero_ps()}; }
  static Vec set1(float x) { return {_mm256_set1_ps(x)}; }
  static Vec load(const float* p) { return {_mm256_loadu_ps(p)}; }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
  static __m256i first(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
  static Vec load_n(const float* p, int n) { return {_mm256_maskload_ps(p, first(n))}; }
  void store_n(float* p, int n) const { _mm256_maskstore_ps(p, first(n), v); }
  friend Vec operator+(Vec a, Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {_mm256_sub_ps(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {_mm256_mul_ps(a.v, b.v)}; }
  friend Vec operator/(Vec a, Vec b) { return {_mm256_div_ps(a.v, b.v)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
  static Vec max(Vec a, Vec b) { return {_mm256_max_ps(a.v, b.v)}; }
  static Vec min(Vec a, Vec b) { return {_mm256_min_ps(a.v, b.v)}; }
  static Vec abs(Vec a) { return {_mm256_andnot_ps(_mm256_set1_ps(-0.0f), a.v)}; }
  static Vec sqrt(Vec a) { return {_mm256_sqrt_ps(a.v)}; }
  static bool any_greater(Vec a, Vec b) { return _mm256_movemask_ps(_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ)) != 0; }
  float reduce_add() const { return tree_sum8(v); }
  float reduce_max() const {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static Vec pow2_from_magic(Vec kf) {
    __m256i b = _mm256_add_epi32(_mm256_castps_si256(kf.v), _mm256_set1_epi32(127));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(b, 23))};
  }
  static Vec zero_below(Vec r, Vec x, Vec lo) {
    return {_mm256_and_ps(_mm256_cmp_ps(x.v, lo.v, _CMP_NLT_UQ), r.v)};
  }
  static Vec odd_mask(Vec kf) {
    __m256i b = _mm256_and_si256(_mm256_castps_si256(kf.v), _mm256_set1_epi32(1));
    return {_mm256_castsi256_ps(_mm256_sub_epi32(_mm256_setzero_si256(), b))};
  }
  static Vec sign_of_bit1(Vec kf, int add) {
    __m256i b = _mm256_add_epi32(_mm256_castps_si256(kf.v), _mm256_set1_epi32(add));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(2)), 30))};
  }
  static Vec select(Vec m, Vec a, Vec b) { return {_mm256_blendv_ps(a.v, b.v, m.v)}; }
  static Vec xor_bits(Vec a, Vec m) { return {_mm256_xor_ps(a.v, m.v)}; }
};

template <>
struct Vec<double> {
  static constexpr int W = 4;
  __m256d v;
  static Vec zero() { return {_mm256_setzero_pd()}; }
  static Vec set1(double x) { return {_mm256_set1_pd(x)}; }
  static Vec load(const double* p) { return {_mm256_loadu_pd(p)}; }
  void store(double* p) const { _mm256_storeu_pd(p, v); }
  static __m256i first(int n) { return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3)); }
  static Vec load_n(const double* p, int n) { return {_mm256_maskload_pd(p, first(n))}; }
  void store_n(double* p, int n) const { _mm256_maskstore_pd(p, first(n), v); }
  friend Vec operator+(Vec a, Vec b) { return {_mm256_add_pd(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {_mm256_sub_pd(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {_mm256_mul_pd(a.v, b.v)}; }
  friend Vec operator/(Vec a, Vec b) { return {_mm256_div_pd(a.v, b.v)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {_mm256_fmadd_pd(a.v, b.v, c.v)}; }
  static Vec max(Vec a, Vec b) { return {_mm256_max_pd(a.v, b.v)}; }
  static Vec min(Vec a, Vec b) { return {_mm256_min_pd(a.v, b.v)}; }
  static Vec abs(Vec a) { return {_mm256_andnot_pd(_mm256_set1_pd(-0.0), a.v)}; }
  static Vec sqrt(Vec a) { return {_mm256_sqrt_pd(a.v)}; }
  static bool any_greater(Vec a, Vec b) { return _mm256_movemask_pd(_mm256_cmp_pd(a.v, b.v, _CMP_GT_OQ)) != 0; }
  double reduce_add() const {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  }
  double reduce_max() const {
    __m128d s = _mm_max_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_max_sd(s, _mm_unpackhi_pd(s, s)));
  }
  static Vec pow2_from_magic(Vec kf) {
    __m256i b = _mm256_add_epi64(_mm256_castpd_si256(kf.v), _mm256_set1_epi64x(1023));
    return {_mm256_castsi256_pd(_mm256_slli_epi64(b, 52))};
  }
  static Vec zero_below(Vec r, Vec x, Vec lo) {
    return {_mm256_and_pd(_mm256_cmp_pd(x.v, lo.v, _CMP_NLT_UQ), r.v)};
  }
  static Vec odd_mask(Vec kf) {
    __m256i b = _mm256_and_si256(_mm256_castpd_si256(kf.v), _mm256_set1_epi64x(1));
    return {_mm256_castsi256_pd(_mm256_sub_epi64(_mm256_setzero_si256(), b))};
  }
  static Vec sign_of_bit1(Vec kf, int add) {
    __m256i b = _mm256_add_epi64(_mm256_castpd_si256(kf.v), _mm256_set1_epi64x(add));
    return {_mm256_castsi256_pd(_mm256_slli_epi64(_mm256_and_si256(b, _mm256_set1_epi64x(2)), 62))};
  }
  static Vec select(Vec m, Vec a, Vec b) { return {_mm256_blendv_pd(a.v, b.v, m.v)}; }
  static Vec xor_bits(Vec a, Vec m) { return {_mm256_xor_pd(a.v, m.v)}; }
};

#elif defined(__SSE2__)

template <>
struct Vec<float> {
  static constexpr int W = 4;
  __m128 v;
  static Vec zero() { return {_mm_setzero_ps()}; }
  static Vec set1(float x) { return {_mm_set1_ps(x)}; }
  static Vec load(const float* p) { return {_mm_loadu_ps(p)}; }
  void store(float* p) const { _mm_storeu_ps(p, v); }
  friend Vec operator+(Vec a, Vec b) { return {_mm_add_ps(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {_mm_sub_ps(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {_mm_mul_ps(a.v, b.v)}; }
  friend Vec operator/(Vec a, Vec b) { return {_mm_div_ps(a.v, b.v)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {_mm_add_ps(_mm_mul_ps(a.v, b.v), c.v)}; }
  static Vec max(Vec a, Vec b) { return {_mm_max_ps(a.v, b.v)}; }
  static Vec min(Vec a, Vec b) { return {_mm_min_ps(a.v, b.v)}; }
  static Vec abs(Vec a) { return {_mm_andnot_ps(_mm_set1_ps(-0.0f), a.v)}; }
  static Vec sqrt(Vec a) { return {_mm_sqrt_ps(a.v)}; }
  static bool any_greater(Vec a, Vec b) { return _mm_movemask_ps(_mm_cmpgt_ps(a.v, b.v)) != 0; }
  float reduce_add() const {
    __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
  }
  float reduce_max() const {
    __m128 s = _mm_max_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps(s, s, 1)));
  }
  static Vec pow2_from_magic(Vec kf) {
    __m128i b = _mm_add_epi32(_mm_castps_si128(kf.v), _mm_set1_epi32(127));
    return {_mm_castsi128_ps(_mm_slli_epi32(b, 23))};
  }
  static Vec zero_below(Vec r, Vec x, Vec lo) { return {_mm_and_ps(_mm_cmpnlt_ps(x.v, lo.v), r.v)}; }
  static Vec odd_mask(Vec kf) {
    __m128i b = _mm_and_si128(_mm_castps_si128(kf.v), _mm_set1_epi32(1));
    return {_mm_castsi128_ps(_mm_sub_epi32(_mm_setzero_si128(), b))};
  }
  static Vec sign_of_bit1(Vec kf, int add) {
    __m128i b = _mm_add_epi32(_mm_castps_si128(kf.v), _mm_set1_epi32(add));
    return {_mm_castsi128_ps(_mm_slli_epi32(_mm_and_si128(b, _mm_set1_epi32(2)), 30))};
  }
  static Vec select(Vec m, Vec a, Vec b) { return {_mm_or_ps(_mm_and_ps(m.v, b.v), _mm_andnot_ps(m.v, a.v))}; }
  static Vec xor_bits(Vec a, Vec m) { return {_mm_xor_ps(a.v, m.v)}; }
};

template <>
struct Vec<double> {
  static constexpr int W = 2;
  __m128d v;
  static Vec zero() { return {_mm_setzero_pd()}; }
  static Vec set1(double x) { return {_mm_set1_pd(x)}; }
  static Vec load(const double* p) { return {_mm_loadu_pd(p)}; }
  void store(double* p) const { _mm_storeu_pd(p, v); }
  friend Vec operator+(Vec a, Vec b) { return {_mm_add_pd(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {_mm_sub_pd(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {_mm_mul_pd(a.v, b.v)}; }
  friend Vec operator/(Vec a, Vec b) { return {_mm_div_pd(a.v, b.v)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {_mm_add_pd(_mm_mul_pd(a.v, b.v), c.v)}; }
  static Vec max(Vec a, Vec b) { return {_mm_max_pd(a.v, b.v)}; }
  static Vec min(Vec a, Vec b) { return {_mm_min_pd(a.v, b.v)}; }
  static Vec abs(Vec a) { return {_mm_andnot_pd(_mm_set1_pd(-0.0), a.v)}; }
  static Vec sqrt(Vec a) { return {_mm_sqrt_pd(a.v)}; }
  static bool any_greater(Vec a, Vec b) { return _mm_movemask_pd(_mm_cmpgt_pd(a.v, b.v)) != 0; }
  double reduce_add() const { return _mm_cvtsd_f64(_mm_add_sd(v, _mm_unpackhi_pd(v, v))); }
  double reduce_max() const { return _mm_cvtsd_f64(_mm_max_sd(v, _mm_unpackhi_pd(v, v))); }
  static Vec pow2_from_magic(Vec kf) {
    __m128i b = _mm_add_epi64(_mm_castpd_si128(kf.v), _mm_set1_epi64x(1023));
    return {_mm_castsi128_pd(_mm_slli_epi64(b, 52))};
  }
  static Vec zero_below(Vec r, Vec x, Vec lo) { return {_mm_and_pd(_mm_cmpnlt_pd(x.v, lo.v), r.v)}; }
  static Vec odd_mask(Vec kf) {
    __m128i b = _mm_and_si128(_mm_castpd_si128(kf.v), _mm_set1_epi64x(1));
    return {_mm_castsi128_pd(_mm_sub_epi64(_mm_setzero_si128(), b))};
  }
  static Vec sign_of_bit1(Vec kf, int add) {
    __m128i b = _mm_add_epi64(_mm_castpd_si128(kf.v), _mm_set1_epi64x(add));
    return {_mm_castsi128_pd(_mm_slli_epi64(_mm_and_si128(b, _mm_set1_epi64x(2)), 62))};
  }
  static Vec select(Vec m, Vec a, Vec b) { return {_mm_or_pd(_mm_and_pd(m.v, b.v), _mm_andnot_pd(m.v, a.v))}; }
  static Vec xor_bits(Vec a, Vec m) { return {_mm_xor_pd(a.v, m.v)}; }
};

#else  // scalar lanes: the same algorithm, one element at a time

template <class T>
struct ScalarVec {
  static constexpr int W = 1;
  T v;
  static ScalarVec zero() { return {T(0)}; }
  static ScalarVec set1(T x) { return {x}; }
  static ScalarVec load(const T* p) { return {*p}; }
  void store(T* p) const { *p = v; }
  friend ScalarVec operator+(ScalarVec a, ScalarVec b) { return {a.v + b.v}; }
  friend ScalarVec operator-(ScalarVec a, ScalarVec b) { return {a.v - b.v}; }
  friend ScalarVec operator*(ScalarVec a, ScalarVec b) { return {a.v * b.v}; }
  friend ScalarVec operator/(ScalarVec a, ScalarVec b) { return {a.v / b.v}; }
  static ScalarVec fma(ScalarVec a, ScalarVec b, ScalarVec c) { return {a.v * b.v + c.v}; }
  static ScalarVec max(ScalarVec a, ScalarVec b) { return {a.v > b.v ? a.v : b.v}; }
  static ScalarVec min(ScalarVec a, ScalarVec b) { return {a.v < b.v ? a.v : b.v}; }
  static ScalarVec abs(ScalarVec a) { return {from_bits(bits(a.v) & (~Bits(0) >> 1))}; }
  static ScalarVec sqrt(ScalarVec a) { return {std::sqrt(a.v)}; }
  static bool any_greater(ScalarVec a, ScalarVec b) { return a.v > b.v; }
  T reduce_add() const { return v; }
  T reduce_max() const { return v; }
  static ScalarVec pow2_from_magic(ScalarVec kf) {
    using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    constexpr int mant = sizeof(T) == 4 ? 23 : 52;
    constexpr Bits bias = sizeof(T) == 4 ? 127 : 1023;
    Bits b;
    std::memcpy(&b, &kf.v, sizeof b);
    b = (b + bias) << mant;
    T r;
    std::memcpy(&r, &b, sizeof r);
    return {r};
  }
  static ScalarVec zero_below(ScalarVec r, ScalarVec x, ScalarVec lo) {
    return {x.v < lo.v ? T(0) : r.v};
  }
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  static Bits bits(T x) {
    Bits b;
    std::memcpy(&b, &x, sizeof b);
    return b;
  }
  static T from_bits(Bits b) {
    T x;
    std::memcpy(&x, &b, sizeof x);
    return x;
  }
  static ScalarVec odd_mask(ScalarVec kf) { return {from_bits(Bits(0) - (bits(kf.v) & 1))}; }
  static ScalarVec sign_of_bit1(ScalarVec kf, int add) {
    return {from_bits(((bits(kf.v) + Bits(add)) & 2) << (8 * sizeof(T) - 2))};
  }
  static ScalarVec select(ScalarVec m, ScalarVec a, ScalarVec b) {
    return {from_bits((bits(m.v) & bits(b.v)) | (~bits(m.v) & bits(a.v)))};
  }
  static ScalarVec xor_bits(ScalarVec a, ScalarVec m) { return {from_bits(bits(a.v) ^ bits(m.v))}; }
};
template <>
struct Vec<float> : ScalarVec<float> {
  Vec(ScalarVec<float> s) : ScalarVec<float>(s) {}
  Vec() = default;
};
template <>
struct Vec<double> : ScalarVec<double> {
  Vec(ScalarVec<double> s) : ScalarVec<double>(s) {}
  Vec() = default;
};

#endif

// {1/0!, 1/1!, ..., 1/(N-1)!}, evaluated by the compiler.
template <class T, int N>
constexpr std::array<T, N> inverse_factorials() {
  std::array<T, N> c{};
  long double f = 1;
  for (int i = 0; i < N; ++i) {
    if (i > 0) f *= i;
    c[i] = T(1.0L / f);
  }
  return c;
}

// e^x for every lane: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, Taylor polynomial
// (degree 7 for float, 13 for double: error below one ulp), 2^n built in the exponent bits.
// NaN stays NaN, -inf and anything below ExpConst::lo gives exactly 0.
template <class T>
inline Vec<T> exp(Vec<T> x) {
  using V = Vec<T>;
  using C = ExpConst<T>;
  const V lo = V::set1(C::lo);
  V xc = V::max(lo, V::min(V::set1(C::hi), x));
  V kf = V::fma(xc, V::set1(C::log2e), V::set1(C::magic));
  V n = kf - V::set1(C::magic);
  V r = V::fma(n, V::set1(-C::ln2_hi), xc);
  r = V::fma(n, V::set1(-C::ln2_lo), r);
  // Horner on sum_{i<=degree} r^i / i! (coefficients from a compile-time table).
  constexpr auto c = inverse_factorials<T, C::degree + 1>();
  V p = V::set1(c[C::degree]);
  for (int i = C::degree - 1; i >= 0; --i) p = V::fma(p, r, V::set1(c[i]));
  return V::zero_below(p * V::pow2_from_magic(kf), x, lo);
}

// r where exp(z) is finite, else 0: past ExpConst::hi exp saturates, and the true result, a multiple of
// 1 / (1 + e^z) (GELU's and the logistic function's forms), is below the smallest normal number.
template <class T>
inline Vec<T> zero_where_saturated(Vec<T> r, Vec<T> z) {
  using V = Vec<T>;
  return V::zero_below(r, V::zero() - z, V::set1(-ExpConst<T>::hi));
}

template <class T>
struct TrigConst;
template <>
struct TrigConst<float> {
  static constexpr float two_over_pi = 0.636619772367581343f, magic = 12582912.0f;
  static constexpr float pio2_1 = 1.5703125f, pio2_2 = 4.837512969970703125e-4f,
                         pio2_3 = 7.54978995489188216e-8f;
  static constexpr int terms = 6;  // sin to r^11, cos to r^12 on |r| <= pi/4: error < 1 ulp
  static constexpr float max_arg = 1e5f;  // beyond it the three-part reduction loses digits
};
template <>
struct TrigConst<double> {
  static constexpr double two_over_pi = 0.63661977236758134308, magic = 6755399441055744.0;
  static constexpr double pio2_1 = 1.57079632673412561417, pio2_2 = 6.07710050630396597660e-11,
                          pio2_3 = 2.02226624879595063154e-21;
  static constexpr int terms = 10;
  static constexpr double max_arg = 1e9;
};

// sin and cos of every lane: x = n pi/2 + r (three-part Cody-Waite, |r| <= pi/4), Taylor polynomials,
// then the quadrant n mod 4 swaps and negates. The reduction is accurate for |x| up to max_arg (1e5
// in float, 1e9 in double); past it (and 2^22 pi/2 breaks the magic-number rounding outright: float32
// gave +-inf at 1e12) the lanes go to the C library's sin/cos, which reduce exactly. One compare per
// vector on the common path, skipped with kCheckRange = false by a caller that has bounded |x|.
// NaN gives NaN; so does inf (through the library).
template <bool kCheckRange = true, class T>
inline void sincos(Vec<T> x, Vec<T>& s, Vec<T>& c) {
  using V = Vec<T>;
  using C = TrigConst<T>;
  const V kf = V::fma(x, V::set1(C::two_over_pi), V::set1(C::magic));
  const V n = kf - V::set1(C::magic);
  V r = V::fma(n, V::set1(-C::pio2_1), x);
  r = V::fma(n, V::set1(-C::pio2_2), r);
  r = V::fma(n, V::set1(-C::pio2_3), r);
  const V r2 = r * r;
  // sin r = r sum_k (-1)^k r^2k / (2k+1)!,  cos r = sum_k (-1)^k r^2k / (2k)!  (compile-time
  // coefficients: a loop of divisions here is not always folded, and costs 5x in double)
  constexpr auto f = inverse_factorials<T, 2 * C::terms>();
  constexpr int K = C::terms - 1;
  V ps = V::set1((K % 2 ? T(-1) : T(1)) * f[2 * K + 1]), pc = V::set1((K % 2 ? T(-1) : T(1)) * f[2 * K]);
  for (int k = K - 1; k >= 0; --k) {
    const T sk = k % 2 ? T(-1) : T(1);
    ps = V::fma(ps, r2, V::set1(sk * f[2 * k + 1]));
    pc = V::fma(pc, r2, V::set1(sk * f[2 * k]));
  }
  ps = ps * r;
  const V odd = V::odd_mask(kf);
  s = V::xor_bits(V::select(odd, ps, pc), V::sign_of_bit1(kf, 0));
  c = V::xor_bits(V::select(odd, pc, ps), V::sign_of_bit1(kf, 1));
  if (kCheckRange && __builtin_expect(V::any_greater(V::abs(x), V::set1(C::max_arg)), 0)) {
    alignas(64) T xs[V::W], ss[V::W], cs[V::W];
    x.store(xs);
    s.store(ss);
    c.store(cs);
    for (int i = 0; i < V::W; ++i)
      if (std::fabs(xs[i]) > C::max_arg) {
        ss[i] = std::sin(xs[i]);
        cs[i] = std::cos(xs[i]);
      }
    s = V::load(ss);
    c = V::load(cs);
  }
}

// s = a * a rounded, and the rounding error e: a * a = s + e exactly. One fused multiply-add where
// Vec::fma is fused; elsewhere Dekker's product of Veltkamp halves (each partial product is exact).
template <class T>
inline Vec<T> square_error(Vec<T> a, Vec<T> s) {
  using V = Vec<T>;
#if defined(__FMA__)
  return V::fma(a, a, V::zero() - s);
#else
  constexpr T splitter = sizeof(T) == 4 ? T(4097) : T(134217729);  // 2^12 + 1, 2^27 + 1
  const V p = a * V::set1(splitter);
  const V hi = p - (p - a), lo = a - hi;
  return ((hi * hi - s) + (hi + hi) * lo) + lo * lo;
#endif
}

// Coefficients of H in normal_tail, lowest degree first, from tools/fit_normal_tail.py (a truncated
// Chebyshev series: relative error below 1.4e-8 in float, 4e-17 in double).
template <class T>
struct NormalTailConst;
template <>
struct NormalTailConst<float> {
  static constexpr float c = 3.0f;
  static constexpr std::array<float, 12> h = {
      2.43027898e-1f, 1.69777328e-1f, 7.66724471e-2f,  1.57543215e-2f,  -3.48610422e-3f, -2.32406762e-3f,
      3.35749180e-4f, 3.48258998e-4f, -7.14258179e-5f, -5.12887781e-5f, 1.18168794e-5f,  5.06782759e-6f};
};
template <>
struct NormalTailConst<double> {
  static constexpr double c = 3.0;
  static constexpr std::array<double, 26> h = {
      2.4302789671112434e-1,  1.6977732730582984e-1,  7.6672573324865868e-2,  1.5754341714322772e-2,
      -3.4876223409811036e-3, -2.3242070801310679e-3, 3.4253075014525249e-4,  3.4860954074712621e-4,
      -8.5525080330653334e-5, -5.1464821936353175e-5, 2.6270640279480370e-5,  4.4153566987804313e-6,
      -6.8952563708333204e-6, 1.1724750367055459e-6,  1.2100642432818414e-6,  -7.5168823827094812e-7,
      9.0054075405236262e-9,  1.9618897391402312e-7,  -9.9140948625444499e-8, -1.1347900913402393e-8,
      3.8272821315926829e-8,  -1.1496482989488597e-8, -7.5461872572184859e-9, 4.3538405734901106e-9,
      6.6283684053872521e-10, -5.6766556106288758e-10};
};

// The lower tail of the standard normal distribution for every lane u >= 0, in two factors:
//   Phi(-u) = g m,  phi(u) = g / sqrt(2 pi),  g = exp(-u^2 / 2),  m = Phi(-u) exp(u^2 / 2) = t H(y),
// t = c / (c + u), y = (c - u) / (c + u) in (-1, 1], H a polynomial (an erfc-type form: no 1 - erf
// cancellation, so Phi(-u) keeps its relative precision as it shrinks). Rounding u^2 would cost
// u^2 / 2 ulps of g (700 at u = 37), so u^2 = s + e is split exactly and g = exp(-s/2) (1 - e/2).
// exp gives no subnormals: g is 0 past u = 13.2 in float, 37.6 in double, where Phi(-u) is already below
// 3% of the smallest normal number. NaN gives NaN; u must be finite (beyond 40 nothing changes, so
// callers may clamp there).
template <class T>
inline void normal_tail(Vec<T> u, Vec<T>& g, Vec<T>& m) {
  using V = Vec<T>;
  using C = NormalTailConst<T>;
  const V s = u * u;
  const V e = square_error(u, s);
  const V g0 = exp(s * V::set1(T(-0.5)));
  g = V::fma(g0, e * V::set1(T(-0.5)), g0);
  const V c = V::set1(C::c);
  const V inv = V::set1(T(1)) / (c + u);
  const V y = (c - u) * inv;
  constexpr int n = int(C::h.size());
  V p = V::set1(C::h[n - 1]);
  for (int i = n - 2; i >= 0; --i) p = V::fma(p, y, V::set1(C::h[i]));
  m = (c * inv) * p;
}

template <class T>
inline T exp_scalar(T x) {
  using V = Vec<T>;
  alignas(64) T lanes[V::W] = {};
  lanes[0] = x;
  exp(V::load(lanes)).store(lanes);
  return lanes[0];
}

// a * b + c rounded as Vec<T>::fma rounds it: once on FMA ISAs, twice on baseline SSE2 (and as the
// scalar lanes do elsewhere). A scalar loop then gives the bits of the vector one whatever the compiler
// contracts: -O3 turns `o += p * x` into an FMA, -O1 (the sanitizer build) does not.
template <class T>
inline T fma_scalar(T a, T b, T c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// Vector body + partial tail: body(j, count) for count = W lanes, then once for the last D % W lanes,
// which load_partial / store_partial pass through a lane buffer (so the tail runs the same polynomial).
template <class T, class F>
inline void for_each_lane(std::int64_t D, F&& body) {
  using V = Vec<T>;
  constexpr int W = V::W;
  std::int64_t j = 0;
  for (; j + W <= D; j += W) body(j, W);
  if (j < D) body(j, int(D - j));
}

// Masked loads and stores where the ISA has them (AVX2, AVX-512), a lane buffer elsewhere.
template <class V, class = void>
struct HasMasked : std::false_type {};
template <class V>
struct HasMasked<V, std::void_t<decltype(V::load_n(nullptr, 0))>> : std::true_type {};

template <class T>
inline Vec<T> load_partial(const T* p, int count) {
  using V = Vec<T>;
  if (count == V::W) return V::load(p);
  if constexpr (HasMasked<V>::value) {
    return V::load_n(p, count);
  } else {
    alignas(64) T lanes[V::W] = {};
    for (int i = 0; i < count; ++i) lanes[i] = p[i];
    return V::load(lanes);
  }
}

template <class T>
inline void store_partial(Vec<T> x, T* p, int count) {
  using V = Vec<T>;
  if (count == V::W) return x.store(p);
  if constexpr (HasMasked<V>::value) {
    x.store_n(p, count);
  } else {
    alignas(64) T lanes[V::W];
    x.store(lanes);
    for (int i = 0; i < count; ++i) p[i] = lanes[i];
  }
}

// sum_i x[i] y[i] in two FMA chains; with Abs, sum_i |x[i]| |y[i]| (the scale linear attention's denominator
// guard compares with).
template <bool Abs = false, class T>
inline T dot(const T* x, const T* y, std::int64_t n) {
  using V = Vec<T>;
  constexpr int W = V::W;
  auto load = [](const T* p) {
    if constexpr (Abs) return V::abs(V::load(p));
    else return V::load(p);
  };
  V a0 = V::zero(), a1 = V::zero();
  std::int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    a0 = V::fma(load(x + i), load(y + i), a0);
    a1 = V::fma(load(x + i + W), load(y + i + W), a1);
  }
  for (; i + W <= n; i += W) a0 = V::fma(load(x + i), load(y + i), a0);
  T s = (a0 + a1).reduce_add();
  for (; i < n; ++i) s += Abs ? std::abs(x[i]) * std::abs(y[i]) : x[i] * y[i];
  return s;
}

// a.reduce_add(), ..., d.reduce_add() into out[0..3]; float's AVX2 and AVX-512 lanes share the shuffles.
template <class V, class T>
inline void reduce_add4(V a, V b, V c, V d, T* out) {
  out[0] = a.reduce_add(), out[1] = b.reduce_add(), out[2] = c.reduce_add(), out[3] = d.reduce_add();
}
#if defined(__AVX512F__)
inline void reduce_add4(Vec<float> a, Vec<float> b, Vec<float> c, Vec<float> d, float* out) {
  using V = Vec<float>;
  tree_sum8x4(V::half_sum(a.v), V::half_sum(b.v), V::half_sum(c.v), V::half_sum(d.v), out);
}
#elif defined(__AVX2__) && defined(__FMA__)
inline void reduce_add4(Vec<float> a, Vec<float> b, Vec<float> c, Vec<float> d, float* out) {
  tree_sum8x4(a.v, b.v, c.v, d.v, out);
}
#endif

// dot(x, y_r, n) for the four rows y_r = y + r n into out[0..3], n a multiple of the vector width: the same
// FMA chains and sums, so the same bits, with x read once for the four.
template <class T>
inline void dot4(const T* x, const T* y, std::int64_t n, T* out) {
  using V = Vec<T>;
  constexpr int W = V::W;
  V a0[4], a1[4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) a0[r] = V::zero(), a1[r] = V::zero();
  std::int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    const V x0 = V::load(x + i), x1 = V::load(x + i + W);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      a0[r] = V::fma(x0, V::load(y + r * n + i), a0[r]);
      a1[r] = V::fma(x1, V::load(y + r * n + i + W), a1[r]);
    }
  }
  if (i + W <= n) {
    const V x0 = V::load(x + i);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) a0[r] = V::fma(x0, V::load(y + r * n + i), a0[r]);
  }
  reduce_add4(a0[0] + a1[0], a0[1] + a1[1], a0[2] + a1[2], a0[3] + a1[3], out);
}

template <class T>
inline T max_scalar(T a, T b) {
  return a > b ? a : b;
}
template <class T>
inline T min_scalar(T a, T b) {
  return a < b ? a : b;
}

// GGML block decoding (kernels/block_quantized.cpp): W consecutive bytes as W float lanes.
// load_s8: signed bytes; load_u4: the low nibbles into lo and the high nibbles into hi.
#if defined(__AVX512F__)
inline Vec<float> load_s8(const std::int8_t* p) {
  return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
}
inline void load_u4(const std::uint8_t* p, Vec<float>& lo, Vec<float>& hi) {
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  lo = {_mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(15)))};
  hi = {_mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4))};
}
#elif defined(__AVX2__) && defined(__FMA__)
inline Vec<float> load_s8(const std::int8_t* p) {
  return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))))};
}
inline void load_u4(const std::uint8_t* p, Vec<float>& lo, Vec<float>& hi) {
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  lo = {_mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(15)))};
  hi = {_mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4))};
}
#elif defined(__SSE2__)
inline __m128i load_4_bytes(const void* p) {
  int v;
  std::memcpy(&v, p, sizeof v);
  return _mm_cvtsi32_si128(v);
}
inline Vec<float> load_s8(const std::int8_t* p) {  // SSE2 has no sign extension: byte to the top, shift back
  __m128i b = load_4_bytes(p);
  b = _mm_unpacklo_epi8(b, b);
  b = _mm_unpacklo_epi16(b, b);
  return {_mm_cvtepi32_ps(_mm_srai_epi32(b, 24))};
}
inline void load_u4(const std::uint8_t* p, Vec<float>& lo, Vec<float>& hi) {
  const __m128i z = _mm_setzero_si128();
  const __m128i b = _mm_unpacklo_epi16(_mm_unpacklo_epi8(load_4_bytes(p), z), z);
  lo = {_mm_cvtepi32_ps(_mm_and_si128(b, _mm_set1_epi32(15)))};
  hi = {_mm_cvtepi32_ps(_mm_srli_epi32(b, 4))};
}
#else
inline Vec<float> load_s8(const std::int8_t* p) { return ScalarVec<float>{float(*p)}; }
inline void load_u4(const std::uint8_t* p, Vec<float>& lo, Vec<float>& hi) {
  lo = ScalarVec<float>{float(*p & 15)};
  hi = ScalarVec<float>{float(*p >> 4)};
}
#endif

// load_u4's nibbles times d: d * q, the bits of d * float(q). AVX-512 looks the 16 products up (vpermps reads an
// index's low 4 bits): a product and two lookups where two conversions, a mask and two products were.
#if defined(__AVX512F__)
inline void load_u4_scaled(const std::uint8_t* p, Vec<float> d, Vec<float>& lo, Vec<float>& hi) {
  const __m512 table = _mm512_mul_ps(d.v, _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  lo = {_mm512_permutexvar_ps(b, table)};
  hi = {_mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table)};
}
#else
inline void load_u4_scaled(const std::uint8_t* p, Vec<float> d, Vec<float>& lo, Vec<float>& hi) {
  load_u4(p, lo, hi);
  lo = d * lo, hi = d * hi;
}
#endif

// An IEEE half (little-endian bytes at p) as float, exactly: F16C where the ISA has it (every AVX2 and
// AVX-512 CPU), the bit pattern rebuilt elsewhere.
inline float half_to_float(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, sizeof h);
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa 2^-24, exact in float
    const float v = float(mantissa) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  const std::uint32_t bits = sign | (exponent == 31 ? 0x7f800000u | (mantissa << 13)
                                                    : ((exponent + 112) << 23) | (mantissa << 13));
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// The two IEEE halves at p and p + 2 (a Q4_1 block's d and m) as floats, exactly, in one conversion.
inline void half_pair_to_float(const std::uint8_t* p, float& a, float& b) {
#if defined(__F16C__)
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(v));
  a = _mm_cvtss_f32(f);
  b = _mm_cvtss_f32(_mm_movehdup_ps(f));
#else
  a = half_to_float(p);
  b = half_to_float(p + 2);
#endif
}

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

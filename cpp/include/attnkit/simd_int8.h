// Integer helpers for the int8 kernels, in the ISA's namespace like simd.h (included after it).
//
// Dot: W int32 lanes (columns of the packed weights), each lane the exact sum of four u8 x s8
// products: acc + a0 w0 + a1 w1 + a2 w2 + a3 w3, with a four u8 of one row broadcast and w four s8
// of each column; pack_quad lays out a row's four u8 (kQuadBytes) as broadcast reads them. VNNI does
// it in one vpdpbusd. Without VNNI, the usual pmaddubsw sums two products into a saturating s16
// (2 x 255 x 127 = 64770 > 32767: a silently wrong answer), so DotExact splits even and odd bytes into
// s16 and uses pmaddwd (s16 x s16 pairs into s32), which never saturates. Every variant gives the same
// int32 bits; the kernel is written once against this interface. DotVnni exists where the compile has
// VNNI: AVX-512 VNNI (512-bit) at the avx512 level, AVX-VNNI (256-bit) at the avx2 level.
//
// kUnrolledRows (the packed block kernels' policies, kernels/block_int8.h): the tiles of at most this many rows
// unroll a block's quads; larger ones keep them a loop. Unrolled over several rows, GCC 12 hoists every
// pmaddubsw/pmaddwd of the block ahead of its adds and spills them: kept a loop, the non-VNNI products ran 1.3-1.9x
// faster at 16 rows (Zen 5, AVX2 and AVX-512), but 10-15% slower at one row. One-instruction VNNI is fastest
// unrolled at any row count (a loop cost it 4-20%).
#pragma once

#ifndef ATTNKIT_KERNEL_NS
#error "simd_int8.h is for kernel files compiled once per ISA (ATTNKIT_KERNEL_NS undefined)"
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "attnkit/simd.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

inline std::int32_t load_quad(const std::uint8_t* a) {
  std::int32_t q;
  std::memcpy(&q, a, sizeof q);
  return q;
}

// The four u8 of one k group as the s16 pairs (a0, a2) and (a1, a3), 8 bytes: the operands pmaddwd
// takes against the even and odd weight bytes, prepared once per row instead of once per column tile.
inline void split_quad(const std::uint8_t* q, std::uint8_t* dst) {
  const std::int16_t s[4] = {q[0], q[2], q[1], q[3]};
  std::memcpy(dst, s, sizeof s);
}

#if defined(__AVX512BW__)

struct DotExact {
  static constexpr int W = 16, MR = 8;  // 16 accumulators + 4 weight halves + 2 row halves + temporaries
  static constexpr int kQuadBytes = 8;
  using Acc = __m512i;
  struct A {
    __m512i even, odd;
  };
  using B = A;
  static Acc zero() { return _mm512_setzero_si512(); }
  static void pack_quad(const std::uint8_t* q, std::uint8_t* dst) { split_quad(q, dst); }
  static A broadcast(const std::uint8_t* a) {
    return {_mm512_set1_epi32(load_quad(a)), _mm512_set1_epi32(load_quad(a + 4))};
  }
  static B load(const std::int8_t* w) {
    const __m512i x = _mm512_loadu_si512(w);
    return {_mm512_srai_epi16(_mm512_slli_epi16(x, 8), 8), _mm512_srai_epi16(x, 8)};
  }
  static Acc mac(Acc acc, const A& a, const B& b) {
    return _mm512_add_epi32(acc, _mm512_add_epi32(_mm512_madd_epi16(a.even, b.even), _mm512_madd_epi16(a.odd, b.odd)));
  }
  static void store(Acc acc, std::int32_t* p) { _mm512_storeu_si512(p, acc); }
};

#if defined(__AVX512VNNI__)
struct DotVnni {
  static constexpr int W = 16, MR = 12;  // 24 accumulators, 2 weight vectors, 1 broadcast
  static constexpr int kQuadBytes = 4;
  static constexpr int kUnrolledRows = 64;  // every tile
  using Acc = __m512i;
  using A = __m512i;
  using B = __m512i;
  static Acc zero() { return _mm512_setzero_si512(); }
  static void pack_quad(const std::uint8_t* q, std::uint8_t* dst) { std::memcpy(dst, q, 4); }
  static A broadcast(const std::uint8_t* a) { return _mm512_set1_epi32(load_quad(a)); }
  static B load(const std::int8_t* w) { return _mm512_loadu_si512(w); }
  static Acc mac(Acc acc, A a, B b) { return _mm512_dpbusd_epi32(acc, a, b); }
  static void store(Acc acc, std::int32_t* p) { _mm512_storeu_si512(p, acc); }
};
#endif

#elif defined(__AVX2__)

struct DotExact {
  static constexpr int W = 8, MR = 4;  // 8 accumulators + 4 weight halves + 2 row halves + temporaries
  static constexpr int kQuadBytes = 8;
  using Acc = __m256i;
  struct A {
    __m256i even, odd;
  };
  using B = A;
  static Acc zero() { return _mm256_setzero_si256(); }
  static void pack_quad(const std::uint8_t* q, std::uint8_t* dst) { split_quad(q, dst); }
  static A broadcast(const std::uint8_t* a) {
    return {_mm256_set1_epi32(load_quad(a)), _mm256_set1_epi32(load_quad(a + 4))};
  }
  static B load(const std::int8_t* w) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    return {_mm256_srai_epi16(_mm256_slli_epi16(x, 8), 8), _mm256_srai_epi16(x, 8)};
  }
  static Acc mac(Acc acc, const A& a, const B& b) {
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(a.even, b.even), _mm256_madd_epi16(a.odd, b.odd)));
  }
  static void store(Acc acc, std::int32_t* p) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), acc); }
};

#if defined(__AVXVNNI__)
// AVX-VNNI (Intel cores since Alder Lake, AMD since Zen 5): the VEX-encoded 256-bit vpdpbusd, for the AVX2
// level's VNNI variant (kernels_vnni/, compiled with -mavxvnni).
struct DotVnni {
  static constexpr int W = 8, MR = 6;  // 12 accumulators, 2 weight vectors, 1 broadcast: 15 of 16 registers
  static constexpr int kQuadBytes = 4;
  static constexpr int kUnrolledRows = 64;  // every tile
  using Acc = __m256i;
  using A = __m256i;
  using B = __m256i;
  static Acc zero() { return _mm256_setzero_si256(); }
  static void pack_quad(const std::uint8_t* q, std::uint8_t* dst) { std::memcpy(dst, q, 4); }
  static A broadcast(const std::uint8_t* a) { return _mm256_set1_epi32(load_quad(a)); }
  static B load(const std::int8_t* w) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)); }
  static Acc mac(Acc acc, A a, B b) { return _mm256_dpbusd_avx_epi32(acc, a, b); }
  static void store(Acc acc, std::int32_t* p) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), acc); }
};
#endif

#else  // plain lanes: the same algorithm, four columns at a time

struct DotExact {
  static constexpr int W = 4, MR = 4;
  static constexpr int kQuadBytes = 4;
  struct Acc {
    std::int32_t v[W];
  };
  struct A {
    std::int32_t v[4];
  };
  using B = Acc;  // W lanes of four packed bytes each
  static Acc zero() { return {}; }
  static void pack_quad(const std::uint8_t* q, std::uint8_t* dst) { std::memcpy(dst, q, 4); }
  static A broadcast(const std::uint8_t* a) { return {{a[0], a[1], a[2], a[3]}}; }
  static B load(const std::int8_t* w) {
    B b;
    std::memcpy(b.v, w, sizeof b.v);
    return b;
  }
  static Acc mac(Acc acc, const A& a, const B& b) {
    for (int l = 0; l < W; ++l) {
      std::int8_t w[4];
      std::memcpy(w, &b.v[l], 4);
      acc.v[l] += a.v[0] * w[0] + a.v[1] * w[1] + a.v[2] * w[2] + a.v[3] * w[3];
    }
    return acc;
  }
  static void store(Acc acc, std::int32_t* p) { std::memcpy(p, acc.v, sizeof acc.v); }
};

#endif

// One GGML block (32 values) of weight codes against 32 int8 activation codes (kernels/block_quantized.cpp,
// int8 activations): 8 int32 lanes, lane l the exact sum of w[t] x[t] for t in [4l, 4l + 4). The codes x are
// in [-127, 127]; q4_1's w in [0, 15] (2 x 15 x 127 = 3810 per pmaddubsw pair), q8_0's in [-128, 127],
// multiplied as |w| times x with w's sign (2 x 128 x 127 = 32512 < 32767): pmaddubsw never saturates. The
// lanes (|lane| < 2^16, exact in float) are then accumulated as 8 float lanes, acc = fma(scale, lane, acc),
// as llama.cpp does. A block is 32 bytes, one 256-bit vector: AVX-512 builds (which include AVX2) run the same
// instructions, so both give the same bits; baseline computes the same lanes, rounding a * b + c twice.
#if defined(__AVX2__)
struct BlockDot {
  using X = __m256i;    // 32 activation codes
  using Wt = __m256i;   // 32 weight codes: q4_1's as u8, q8_0's as they are
  using Acc = __m256i;  // the 8 int32 lanes
  using Lanes = __m256;
  static X load_x(const std::int8_t* x) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)); }
  static Wt u4(const std::uint8_t* nibbles) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(15));
  }
  static Wt s8(const std::int8_t* w) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)); }
  static Acc dot_u4(Wt w, X x) { return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)); }
  static Acc dot_s8(Wt w, X x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
  }
  static Lanes zero() { return _mm256_setzero_ps(); }
  static Lanes add(Lanes a, float scale, Acc s) { return _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(s), a); }
  static void store(Lanes a, float* out) { _mm256_storeu_ps(out, a); }
};
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
// The same lanes in one vpdpbusd (u8 x s8, four products into each int32 lane, no s16 step): the sums are
// exact either way (|lane| < 2^16), so BlockDotVnni gives BlockDot's bits. EVEX form under AVX-512 VNNI,
// VEX form (AVX-VNNI) under the AVX2 level.
struct BlockDotVnni : BlockDot {
  static Acc dpbusd(Acc acc, Wt u, X s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
  }
  static Acc dot_u4(Wt w, X x) { return dpbusd(_mm256_setzero_si256(), w, x); }
  static Acc dot_s8(Wt w, X x) { return dpbusd(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(x, w)); }
};
#endif
#else
struct BlockDot {
  struct X {
    std::int8_t v[32];
  };
  using Wt = X;
  struct Acc {
    std::int32_t v[8];
  };
  struct Lanes {
    float v[8];
  };
  static X load_x(const std::int8_t* x) {
    X r;
    std::memcpy(r.v, x, sizeof r.v);
    return r;
  }
  static Wt u4(const std::uint8_t* nibbles) {
    Wt w;
    for (int t = 0; t < 16; ++t) w.v[t] = std::int8_t(nibbles[t] & 15), w.v[16 + t] = std::int8_t(nibbles[t] >> 4);
    return w;
  }
  static Wt s8(const std::int8_t* w) { return load_x(w); }
  static Acc dot_u4(const Wt& w, const X& x) { return dot_s8(w, x); }
  static Acc dot_s8(const Wt& w, const X& x) {
    Acc s;
    for (int l = 0; l < 8; ++l) {
      s.v[l] = 0;
      for (int t = 4 * l; t < 4 * l + 4; ++t) s.v[l] += w.v[t] * x.v[t];
    }
    return s;
  }
  static Lanes zero() { return {}; }
  static Lanes add(Lanes a, float scale, const Acc& s) {
    for (int l = 0; l < 8; ++l) a.v[l] = fma_scalar(scale, float(s.v[l]), a.v[l]);
    return a;
  }
  static void store(const Lanes& a, float* out) { std::memcpy(out, a.v, sizeof a.v); }
};
#endif

// The 8 lanes' total, in the one order every ISA uses: ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
inline float lanes_total(const float* l) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); }

// Stores the W lanes of q (integers held as float, within T's range: [0, 255] for uint8_t, [-128, 127] for
// int8_t) as bytes.
template <class T>
inline void store_bytes(Vec<float> q, T* p) {
  static_assert(sizeof(T) == 1, "bytes: std::uint8_t or std::int8_t");
#if defined(__AVX512F__)
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q.v)));
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256i i = _mm256_cvtps_epi32(q.v);
  const __m128i s16 = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p),
                   std::is_signed_v<T> ? _mm_packs_epi16(s16, s16) : _mm_packus_epi16(s16, s16));
#elif defined(__SSE2__)
  const __m128i i = _mm_cvtps_epi32(q.v);
  const __m128i s16 = _mm_packs_epi32(i, i);
  const __m128i bytes = std::is_signed_v<T> ? _mm_packs_epi16(s16, s16) : _mm_packus_epi16(s16, s16);
  const std::int32_t b = _mm_cvtsi128_si32(bytes);
  std::memcpy(p, &b, sizeof b);
#else
  *p = static_cast<T>(q.v);
#endif
}

// DotSign: packed q8_0's product without VNNI (kernels/block_int8.h). A lane is a column's four s8 weights w, the
// broadcast quad four s8 activation codes x in [-127, 127] (not + 128 as DotVnni reads them): pmaddubsw(|w|,
// sign(x, w)) sums two products into an s16 that never saturates (|w| <= 128: at most 2 x 128 x 127 = 32512), and
// pmaddwd widens it at once: 5 instructions a row and quad where DotExact's even and odd halves take 7 (the
// 576 x 49152 output table of SmolLM2 at 16 rows: 1.4x). |w| and w's signs are made once per tile, for its rows.
#if defined(__AVX512BW__)
struct DotSign {
  static constexpr int W = 16;
  static constexpr int kQuadBytes = 4;
  static constexpr int kUnrolledRows = 3;
  using Acc = __m512i;
  using A = __m512i;
  struct B {
    __m512i magnitude;
    __mmask64 negative;
  };
  static Acc zero() { return _mm512_setzero_si512(); }
  static A broadcast(const std::uint8_t* a) { return _mm512_set1_epi32(load_quad(a)); }
  static B load(const std::int8_t* w) {
    const __m512i v = _mm512_loadu_si512(w);
    return {_mm512_abs_epi8(v), _mm512_movepi8_mask(v)};
  }
  static Acc mac(Acc acc, A a, const B& b) {  // AVX-512 has no vpsignb: x negated in w's negative bytes
    const __m512i signed_x = _mm512_mask_sub_epi8(a, b.negative, _mm512_setzero_si512(), a);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(b.magnitude, signed_x), _mm512_set1_epi16(1)));
  }
};
#elif defined(__AVX2__)
struct DotSign {
  static constexpr int W = 8;
  static constexpr int kQuadBytes = 4;
  static constexpr int kUnrolledRows = 3;
  using Acc = __m256i;
  using A = __m256i;
  struct B {
    __m256i magnitude, w;
  };
  static Acc zero() { return _mm256_setzero_si256(); }
  static A broadcast(const std::uint8_t* a) { return _mm256_set1_epi32(load_quad(a)); }
  static B load(const std::int8_t* w) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    return {_mm256_abs_epi8(v), v};
  }
  static Acc mac(Acc acc, A a, const B& b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(b.magnitude, _mm256_sign_epi8(a, b.w)),
                                                   _mm256_set1_epi16(1)));
  }
};
#endif

// NibbleDot: W lanes (W columns of q4_1 weights packed in groups, kernels/block_int8.h), a block's sums of the
// products of one lane's u8 codes (at most 15) with broadcast quads of s8 activation codes: dot adds four
// products a lane, sums gives the exact int32 lanes. Here dot adds pmaddubsw's s16 pairs (at most 2 x 15 x 127
// = 3810, never saturated) as s16, at most 8 times a block (30480 < 32767), and sums widens them with pmaddwd;
// NibbleDotVnni adds in int32 with vpdpbusd. The same bits. W follows the ISA's float vector (Vec<float>).
#if defined(__AVX512BW__)
struct NibbleDot {
  static constexpr int W = 16, MR = 8;  // 8 int + 8 float accumulators, 2 weight vectors, scales: 22 of 32
  static constexpr int kUnrolledRows = 1;
  using I = __m512i;
  static I zero() { return _mm512_setzero_si512(); }
  static I load(const std::uint8_t* p) { return _mm512_loadu_si512(p); }
  static I low(I v) { return _mm512_and_si512(v, _mm512_set1_epi8(15)); }
  static I high(I v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15)); }
  static I broadcast(const std::int8_t* q) { return _mm512_set1_epi32(load_quad(reinterpret_cast<const std::uint8_t*>(q))); }
  static I dot(I acc, I u, I s) { return _mm512_add_epi16(acc, _mm512_maddubs_epi16(u, s)); }
  static I sums(I acc) { return _mm512_madd_epi16(acc, _mm512_set1_epi16(1)); }
  static __m512 to_float(I s) { return _mm512_cvtepi32_ps(s); }
  static __m512 halves(const std::uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
};
#if defined(__AVX512VNNI__)
struct NibbleDotVnni : NibbleDot {
  static constexpr int kUnrolledRows = 64;  // every tile
  static I dot(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static I sums(I acc) { return acc; }
};
#endif
#elif defined(__AVX2__)
struct NibbleDot {
  static constexpr int W = 8, MR = 4;  // 4 int + 4 float accumulators, 2 weight vectors, scales, temporaries
  static constexpr int kUnrolledRows = 1;
  using I = __m256i;
  static I zero() { return _mm256_setzero_si256(); }
  static I load(const std::uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I low(I v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
  static I high(I v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15)); }
  static I broadcast(const std::int8_t* q) { return _mm256_set1_epi32(load_quad(reinterpret_cast<const std::uint8_t*>(q))); }
  static I dot(I acc, I u, I s) { return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s)); }
  static I sums(I acc) { return _mm256_madd_epi16(acc, _mm256_set1_epi16(1)); }
  static __m256 to_float(I s) { return _mm256_cvtepi32_ps(s); }
  static __m256 halves(const std::uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};
#if defined(__AVXVNNI__)
struct NibbleDotVnni : NibbleDot {
  static constexpr int kUnrolledRows = 64;  // every tile
  static I dot(I acc, I u, I s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
  static I sums(I acc) { return acc; }
};
#endif
#endif

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

// Chooses the kernel table at import: the best ISA that was compiled in, that CPUID reports and that
// the OS has enabled (XGETBV: the YMM/ZMM register state is saved on context switch). ATTNKIT_ISA
// may force a lower one; tests switch at run time with set_isa.
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnkit/isa.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif

namespace attnkit {

namespace {

#if defined(__x86_64__) || defined(_M_X64)
bool bit(unsigned reg, int b) { return (reg >> b) & 1u; }

unsigned long long xgetbv0() {
  unsigned eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

struct CpuLevels {
  bool v3 = false, v4 = false;
  bool avx_vnni = false, avx512_vnni = false;  // AVX-VNNI on top of v3, AVX512-VNNI on top of v4
};

// x86-64-v3 (AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE) and x86-64-v4 (AVX-512 F/BW/CD/DQ/VL): the
// levels the avx2 and avx512 variants are compiled for.
CpuLevels detect() {
  CpuLevels c;
  unsigned a, b, cx, d;
  if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
  const bool osxsave = bit(cx, 27), avx = bit(cx, 28), fma = bit(cx, 12), f16c = bit(cx, 29),
             movbe = bit(cx, 22);
  if (!osxsave || !avx) return c;
  const unsigned long long xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6, zmm_state = (xcr0 & 0xE6) == 0xE6;
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  if (!__get_cpuid_count(7, 0, &a7, &b7, &c7, &d7)) return c;
  unsigned a8 = 0, b8 = 0, c8 = 0, d8 = 0;
  __get_cpuid(0x80000001u, &a8, &b8, &c8, &d8);
  const bool avx2 = bit(b7, 5), bmi1 = bit(b7, 3), bmi2 = bit(b7, 8), lzcnt = bit(c8, 5);
  c.v3 = ymm_state && avx2 && fma && f16c && movbe && bmi1 && bmi2 && lzcnt;
  const bool f = bit(b7, 16), dq = bit(b7, 17), cd = bit(b7, 28), bw = bit(b7, 30), vl = bit(b7, 31);
  c.v4 = c.v3 && zmm_state && f && dq && cd && bw && vl;
  c.avx512_vnni = c.v4 && bit(c7, 11);
  unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
  if (a7 >= 1 && __get_cpuid_count(7, 1, &a71, &b71, &c71, &d71)) c.avx_vnni = c.v3 && bit(a71, 4);
  return c;
}
#endif

struct Entry {
  const char* name;
  const KernelTable& (*table)();
  bool supported;
};

std::vector<Entry> compiled() {
  std::vector<Entry> e;
#if defined(ATTNKIT_HAVE_BASELINE)
  e.push_back({"baseline", &kernels_baseline, true});
#endif
#if defined(__x86_64__) || defined(_M_X64)
  const CpuLevels cpu = detect();
#if defined(ATTNKIT_HAVE_AVX2)
  e.push_back({"avx2", &kernels_avx2, cpu.v3});
#endif
#if defined(ATTNKIT_HAVE_AVX512)
  e.push_back({"avx512", &kernels_avx512, cpu.v4});
#endif
#endif
  return e;
}

// The VNNI variants this build has and this CPU runs, by base ISA.
struct VnniSupport {
  bool avx2 = false, avx512 = false;
};

VnniSupport detect_vnni() {
  VnniSupport v;
#if defined(__x86_64__) || defined(_M_X64)
  const CpuLevels cpu = detect();
#if defined(ATTNKIT_HAVE_AVX2VNNI)
  v.avx2 = cpu.avx_vnni;
#endif
#if defined(ATTNKIT_HAVE_AVX512VNNI)
  v.avx512 = cpu.avx512_vnni;
#endif
#endif
  return v;
}

const VnniSupport& vnni_support() {
  static const VnniSupport support = detect_vnni();
  return support;
}

std::atomic<bool>& vnni_enabled() {
  static std::atomic<bool> enabled{[] {
    const char* env = std::getenv("ATTNKIT_INT8_VNNI");
    return !(env && std::string(env) == "0");
  }()};
  return enabled;
}

std::atomic<const KernelTable*>& active() {
  static std::atomic<const KernelTable*> table{nullptr};
  return table;
}

const Entry* find(const std::string& name) {
  static const std::vector<Entry> entries = compiled();
  for (const Entry& e : entries)
    if (e.supported && name == e.name) return &e;
  return nullptr;
}

const KernelTable* choose_at_import() {
  const std::vector<std::string> names = available_isas();
  const char* env = std::getenv("ATTNKIT_ISA");
  if (env && *env) {
    // An unsupported request falls back to the best available one; show_config reports the choice.
    if (const Entry* e = find(env)) return &e->table();
  }
  return &find(names.back())->table();
}

}  // namespace

std::vector<std::string> available_isas() {
  std::vector<std::string> out;
  for (const Entry& e : compiled())
    if (e.supported) out.emplace_back(e.name);
  return out;
}

const KernelTable& active_kernels() {
  const KernelTable* t = active().load(std::memory_order_acquire);
  if (!t) {
    t = choose_at_import();
    active().store(t, std::memory_order_release);
  }
  return *t;
}

std::string active_isa() { return active_kernels().isa; }

void set_isa(const std::string& name) {
  const Entry* e = find(name);
  if (!e) throw std::invalid_argument("ISA '" + name + "' is not available on this CPU/build");
  active().store(&e->table(), std::memory_order_release);
}

std::vector<std::string> int8_vnni_isas() {
  std::vector<std::string> out;
  if (vnni_support().avx2) out.emplace_back("avx2");
  if (vnni_support().avx512) out.emplace_back("avx512");
  return out;
}

bool int8_vnni_available() { return vnni_support().avx2 || vnni_support().avx512; }

void set_int8_vnni(bool enabled) {
  if (enabled && !int8_vnni_available())
    throw std::invalid_argument("no int8 VNNI kernel is available on this CPU/build");
  vnni_enabled().store(enabled, std::memory_order_release);
}

namespace {

// The VNNI variant the int8 kernels run now: the active ISA's, where this CPU has it and it is enabled.
enum class Vnni { none, avx2, avx512 };

Vnni vnni_active() {
  if (!vnni_enabled().load(std::memory_order_acquire)) return Vnni::none;
  [[maybe_unused]] const KernelTable* table = &active_kernels();
#if defined(ATTNKIT_HAVE_AVX512VNNI)
  if (table == &kernels_avx512() && vnni_support().avx512) return Vnni::avx512;
#endif
#if defined(ATTNKIT_HAVE_AVX2VNNI)
  if (table == &kernels_avx2() && vnni_support().avx2) return Vnni::avx2;
#endif
  return Vnni::none;
}

}  // namespace

std::string active_int8_variant() {
  switch (vnni_active()) {
    case Vnni::avx512: return "avx512vnni";
    case Vnni::avx2: return "avx2vnni";
    default: return active_isa();
  }
}

Int8LinearKernel active_int8_linear() {
  switch (vnni_active()) {
#if defined(ATTNKIT_HAVE_AVX512VNNI)
    case Vnni::avx512: return &int8_linear_avx512vnni;
#endif
#if defined(ATTNKIT_HAVE_AVX2VNNI)
    case Vnni::avx2: return &int8_linear_avx2vnni;
#endif
    default: return active_kernels().int8_linear;
  }
}

BlockQuantizedKernel active_block_quantized_matmul() {
  switch (vnni_active()) {
#if defined(ATTNKIT_HAVE_AVX512VNNI)
    case Vnni::avx512: return &block_quantized_matmul_avx512vnni;
#endif
#if defined(ATTNKIT_HAVE_AVX2VNNI)
    case Vnni::avx2: return &block_quantized_matmul_avx2vnni;
#endif
    default: return active_kernels().block_quantized_matmul;
  }
}

}  // namespace attnkit

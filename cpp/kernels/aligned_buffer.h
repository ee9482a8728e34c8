// 64-byte aligned scratch buffers for the kernel files (internal linkage inside the ISA's namespace):
// one definition where attention_tiles.h and linear_tiles.h each had their own.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A 64-byte aligned buffer of n elements (throws bad_alloc on failure: call outside parallel loops).
template <class T>
std::unique_ptr<T, FreeDeleter> aligned_buffer(std::int64_t n) {
  const std::size_t bytes = (std::size_t(n > 0 ? n : 1) * sizeof(T) + 63) / 64 * 64;
  T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
  return std::unique_ptr<T, FreeDeleter>(p);
}

}  // namespace
}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

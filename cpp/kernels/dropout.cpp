// Inverted dropout (see attnkit/dropout.h): blocks of the flat array in parallel; within a block a plain
// loop over lanes that the compiler vectorises at the variant's width (32-bit integer multiplies,
// shifts and xors, one compare and one select per element).
#include <algorithm>

#include "attnkit/isa.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {

namespace {
constexpr std::int64_t kBlock = 1 << 12;  // elements per parallel work item
}  // namespace

template <class T>
void dropout(const DropoutArgs<T>& a) {
  const std::int64_t blocks = (a.n + kBlock - 1) / kBlock;
  const int threads = elementwise_threads(a.n);
  const RoundKeys keys = round_keys(a.key);
  // Locals, not a's members: a conditional read of a.scale through the reference stops vectorisation.
  const T scale = a.scale;
  const std::uint32_t threshold = a.threshold;
  static_loop(threads, blocks, [&](std::int64_t b, int) {
    const std::int64_t first = b * kBlock, count = std::min(kBlock, a.n - first);
    // A block never straddles a multiple of 2^32 (kBlock divides it): the index's high half is constant.
    const std::uint32_t lo = std::uint32_t(first), hi = std::uint32_t(std::uint64_t(first) >> 32);
    const T* x = a.x + first;  // may be out itself: each element is read before it is written
    T* out = a.out + first;
    for (std::int64_t j = 0; j < count; ++j)
      out[j] = x[j] * (keep_bits(keys, lo + std::uint32_t(j), hi) >= threshold ? scale : T(0));
  });
}

template void dropout<float>(const DropoutArgs<float>&);
template void dropout<double>(const DropoutArgs<double>&);

}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

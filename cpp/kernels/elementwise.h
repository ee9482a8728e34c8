// Elementwise kernels' loop: blocks of values in parallel, each block's lanes W at a time and a partial tail.
#pragma once

#include <algorithm>
#include <cstdint>

#include "attnkit/isa.h"
#include "attnkit/simd.h"
#include "attnkit/thread_pool.h"
#include "kernels.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {
namespace {

constexpr std::int64_t kBlock = 1 << 12;  // elements per parallel work item

// lanes(i, width) over n elements (width W, or fewer for the last of a block), blocks of kBlock in parallel,
// handed out 4 at a time as threads come: the worker woken late (60-80 us on a 2-core VM, from
// sleep) takes fewer. A block's lanes are the same whoever runs it.
template <class T, class F>
void elementwise(std::int64_t n, F&& lanes) {
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const int threads = elementwise_threads(n);
  claim_loop(threads, blocks, 4, [&](std::int64_t b, int) {
    const std::int64_t first = b * kBlock, count = std::min(kBlock, n - first);
    for_each_lane<T>(count, [&](std::int64_t j, int width) { lanes(first + j, width); });
  });
}

}  // namespace
}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

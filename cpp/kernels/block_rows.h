// How the block-quantised products (block_quantized.cpp, block_int8.h) walk their stored rows: the
// prefetch distance, the size below which one thread reads the blocks, and the split of rows over threads.
#pragma once

#include <omp.h>

#include <cstdint>

#include "attnkit/isa.h"
#include "attnkit/simd.h"

namespace attnkit {
namespace ATTNKIT_KERNEL_NS {
namespace {

// Blocks read below this many bytes run on one thread. A fork and join with a passively waiting OpenMP
// thread costs 11-12 us on the 2-core Zen 3 VM when a core is free, 12-24 us (median; 130 us at the 90th
// percentile) when other processes keep both busy; one thread reads blocks from DRAM at ~2.6 ns per q4_1
// block (7.8 GB/s), so two threads win from ~200 KB (576 x 576 q4_1, 202 KiB: about even) and clearly
// from 1536 x 576 (540 KiB, ~70 us on one thread).
constexpr std::int64_t kMinParallelBytes = std::int64_t(256) << 10;

inline void prefetch_bytes(const std::uint8_t* p) { __builtin_prefetch(p, 0, 3); }

// Software prefetch of each row's blocks this many bytes ahead: a group reads several interleaved row
// streams, which the hardware prefetcher follows poorly when the blocks come from DRAM.
// 4 KB measured best of 1-16 KB (SmolLM2's 180 q4_1 matrices in turn, 1 thread: 8.45 ms against 9.7 ms
// for the previous one-row kernel; without the prefetch, 4 rows at a time were slower than one).
constexpr int kPrefetchBytes = 4096;

// body(j0, j1) over contiguous ranges of the n stored rows, one per thread, cut at multiples of 16 rows (a 4 KB
// page of q8_0 blocks at n_in = 576): one fork and join per call.
template <class F>
void over_row_ranges(std::int64_t n, int threads, F&& body) {
  if (threads == 1) return body(std::int64_t(0), n);
#pragma omp parallel num_threads(threads)
  {
    const std::int64_t t = omp_get_thread_num(), count = omp_get_num_threads(), units = (n + 15) / 16;
    body(min_scalar(n, units * t / count * 16), min_scalar(n, units * (t + 1) / count * 16));
  }
}

}  // namespace
}  // namespace ATTNKIT_KERNEL_NS
}  // namespace attnkit

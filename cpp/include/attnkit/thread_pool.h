// attnkit's own worker threads, on which every kernel but the decoding plan's and the block-quantized products' runs
// its share of a call. OpenMP's threads wait passively (attnkit/__init__.py): a thread sleeps the moment a region
// ends, and on a virtual machine waking it costs 30-50 us (the idle vCPU halted), 10% of a step of nanoGPT's recipe
// (~66 calls). These workers spin up to 300 us for the next call while the machine has a core free for each, and
// sleep at once when other processes want the cores: spinning there would take the core the work needs
// (benchmarks/results/wait_policy.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

namespace attnkit {

using TeamTask = void (*)(void* context, int thread, int threads);

// Runs task(context, t, threads) for every t in [0, threads): t = 0 on the calling thread, the others on the
// pool's workers, and returns when all have. Where the pool is taken (another thread's call is running on it, or
// this is a call from inside a team or an OpenMP region), the caller runs every t itself, in order: a task must
// not wait for another t of its own call.
void run_team(int threads, TeamTask task, void* context);

// Whether a worker is spinning now: handing it a share then costs ~1 us where waking it costs 30-50, so a kernel may
// split smaller work (the thresholds in kernels/kernels.h and matmul.cpp). The answer never changes a result's bits.
bool team_awake();

// The pool's counters since the process started, for tests and benchmarks.
struct TeamStats {
  std::int64_t calls = 0;     // calls that ran on the pool's workers
  std::int64_t inline_calls = 0;  // calls whose threads the caller ran itself (the pool taken)
  std::int64_t sleeps = 0;    // times a worker fell asleep waiting for work
  std::int64_t busy_checks = 0;  // readings of the machine's runnable threads
  std::int64_t busy = 0;      // ... that found another process wanting the cores (the workers then sleep at once)
};
TeamStats team_stats();

// f(t, threads) for t in [0, threads), as run_team.
template <class F>
void team(int threads, F&& f) {
  using Body = std::remove_reference_t<F>;
  if (threads <= 1) {
    f(0, 1);
    return;
  }
  run_team(threads, [](void* body, int t, int n) { (*static_cast<Body*>(body))(t, n); }, &f);
}

// body(i, t) for i in [0, count), handed out `chunk` at a time to the team's threads as they come (a thread that
// starts late takes fewer); t is the thread running it (for its scratch). The result must not depend on t.
template <class F>
void claim_loop(int threads, std::int64_t count, std::int64_t chunk, F&& body) {
  std::atomic<std::int64_t> next{0};
  team(threads, [&](int t, int) {
    for (std::int64_t i0; (i0 = next.fetch_add(chunk, std::memory_order_relaxed)) < count;)
      for (std::int64_t i = i0, end = i0 + chunk < count ? i0 + chunk : count; i < end; ++i) body(i, t);
  });
}

// body(i, t) for i in [0, count), thread t taking the t-th of `threads` contiguous ranges (OpenMP's static split).
template <class F>
void static_loop(int threads, std::int64_t count, F&& body) {
  team(threads, [&](int t, int n) {
    const std::int64_t per = (count + n - 1) / n;
    for (std::int64_t i = per * t, end = per * (t + 1) < count ? per * (t + 1) : count; i < end; ++i) body(i, t);
  });
}

}  // namespace attnkit

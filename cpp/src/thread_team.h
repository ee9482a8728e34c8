// The threads of one OpenMP parallel region kept awake through a sequence of dependent kernel calls (a decoding
// step: ~9 calls per layer, 270 for a 30-layer model). attnkit's OpenMP threads wait passively (attnkit/__init__.py),
// so a fork and join per call costs 11-24 us of futex wake-ups; a step of SmolLM2-135M on 2 threads spent a third
// of its time there (73 tokens/s, 102 with spinning threads). Inside one region, the calls meet at this
// barrier instead: ~0.1-0.3 us between two cores.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>

#include "spin_wait.h"

namespace attnkit {

// A reusable barrier that spins (with pause) for 50 us, longer than the members of a decoding step's phase
// differ on a free machine, then sleeps: a member without a core of its own (another busy process on the
// machine) then costs the others a sleep and a wake-up, not a spin that keeps the busy process off the core.
class SpinBarrier {
 public:
  explicit SpinBarrier(int count) : count_(count) {}

  void wait() {
    const unsigned generation = generation_.load();
    if (arrived_.fetch_add(1) + 1 == count_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1);
      if (sleepers_.load() > 0) {  // seq_cst with the sleeper's increment: one of the two sees the other
        std::lock_guard<std::mutex> lock(mutex_);
        wake_.notify_all();
      }
      return;
    }
    if (spin_until([&] { return generation_.load(std::memory_order_acquire) != generation; },
                   std::chrono::microseconds(50)))
      return;
    std::unique_lock<std::mutex> lock(mutex_);
    sleeps_.fetch_add(1, std::memory_order_relaxed);
    sleepers_.fetch_add(1);
    while (generation_.load() == generation) wake_.wait(lock);
    sleepers_.fetch_sub(1);
  }

  // How many times the members met, and how many times one fell asleep waiting (a busy machine's sign).
  unsigned meetings() const { return generation_.load(std::memory_order_relaxed); }
  int sleeps() const { return sleeps_.load(std::memory_order_relaxed); }

 private:
  const int count_;
  std::atomic<int> arrived_{0}, sleepers_{0}, sleeps_{0};
  std::atomic<unsigned> generation_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
};

// This thread's place in the team: its share of a loop, and the barrier between dependent calls.
struct ThreadTeam {
  int id = 0, size = 1;
  SpinBarrier* barrier = nullptr;

  bool lead() const { return id == 0; }
  void sync() const {
    if (size > 1) barrier->wait();
  }
  // [begin, end) of n items, cut at multiples of `unit` so every thread's share starts where a kernel's own
  // split would (the same bits whatever the team's size).
  std::pair<std::int64_t, std::int64_t> share(std::int64_t n, std::int64_t unit) const {
    const std::int64_t units = (n + unit - 1) / unit;
    const std::int64_t begin = units * id / size * unit, end = units * (id + 1) / size * unit;
    return {begin < n ? begin : n, end < n ? end : n};
  }
};

}  // namespace attnkit

// A bounded spin before a thread sleeps: attnkit's worker threads (thread_pool.cpp) and the decoding plan's barrier
// (thread_team.h) poll with pause for a few tens or hundreds of microseconds, then wait on a condition variable.
#pragma once

#include <chrono>

namespace attnkit {

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls done() with pause until it holds (true) or `budget` has passed (false); the clock is read every 64 polls.
template <class Done>
bool spin_until(Done done, std::chrono::microseconds budget) {
  const auto until = std::chrono::steady_clock::now() + budget;
  for (unsigned spins = 1; !done(); ++spins) {
    cpu_pause();
    if (spins % 64 == 0 && std::chrono::steady_clock::now() > until) return false;
  }
  return true;
}

}  // namespace attnkit

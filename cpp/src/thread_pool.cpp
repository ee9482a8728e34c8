// attnkit's worker threads (attnkit/thread_pool.h): one caller's team at a time, each worker waiting on its own
// slot for the next call. A worker spins for kSpin, then sleeps on a condition variable; it spins only while the
// machine's runnable threads, read from /proc/loadavg every kCheckEvery, leave a core for each member of the team
// (ATTNKIT_WAIT_POLICY=passive: never; active: always).
#include "attnkit/thread_pool.h"

#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "spin_wait.h"

namespace attnkit {

namespace {

using Clock = std::chrono::steady_clock;
// A training step's calls come 10-300 us apart (the Python and one-thread kernels between them): at 100 us the
// recipe's workers fell asleep 20 times a step, at 300 us 5 times. Longer gaps pay a wake-up, as OpenMP's would.
constexpr auto kSpin = std::chrono::microseconds(300);
constexpr auto kCheckEvery = std::chrono::milliseconds(10);

thread_local bool t_in_team = false;  // a pool worker, or a caller while its team runs

struct Job {
  TeamTask task;
  void* context;
  int threads;
  std::atomic<int> remaining;  // workers still running their t
};

struct alignas(64) Slot {
  std::atomic<Job*> job{nullptr};
};

// The number of threads wanting a CPU on the machine now (the 4th field of /proc/loadavg: "running/total"),
// or -1 where it cannot be read.
int runnable_threads(int fd) {
  char text[128];
  const ssize_t n = fd >= 0 ? pread(fd, text, sizeof(text) - 1, 0) : -1;
  if (n <= 0) return -1;
  text[n] = '\0';
  const char* p = text;
  for (int field = 0; field < 3 && *p; ++p)
    if (*p == ' ') ++field;
  return *p ? std::atoi(p) : -1;
}

enum class WaitPolicy { kAuto, kPassive, kActive };

// ATTNKIT_WAIT_POLICY (checked by attnkit/_config.py at import): "passive" never spins, "active" always does.
WaitPolicy wait_policy() {
  const char* text = std::getenv("ATTNKIT_WAIT_POLICY");
  if (!text) return WaitPolicy::kAuto;
  std::string value(text);
  for (char& c : value) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (value == "passive") return WaitPolicy::kPassive;
  if (value == "active") return WaitPolicy::kActive;
  return WaitPolicy::kAuto;
}

class Pool {
 public:
  Pool()
      : policy_(wait_policy()),
        loadavg_(open("/proc/loadavg", O_RDONLY | O_CLOEXEC)),
        cpus_(int(sysconf(_SC_NPROCESSORS_ONLN))) {
    spin_.store(policy_ == WaitPolicy::kActive);
  }

  void run(int threads, TeamTask task, void* context) {
    std::unique_lock<std::mutex> owner(owner_, std::try_to_lock);
    if (!owner.owns_lock()) return run_inline(threads, task, context);
    calls_.fetch_add(1, std::memory_order_relaxed);
    while (int(slots_.size()) < threads - 1) start_worker();
    check_machine(threads);
    Job job{task, context, threads, {threads - 1}};
    for (int t = 1; t < threads; ++t) slots_[t - 1]->job.store(&job);
    if (sleepers_.load() > 0) {  // seq_cst with a sleeper's increment: one of the two sees the other
      std::lock_guard<std::mutex> lock(mutex_);
      wake_.notify_all();
    }
    t_in_team = true;
    task(context, 0, threads);
    t_in_team = false;
    if (spin_.load(std::memory_order_relaxed))
      spin_until([&] { return job.remaining.load(std::memory_order_acquire) == 0; }, kSpin);
    if (job.remaining.load() != 0) {
      std::unique_lock<std::mutex> lock(mutex_);
      caller_sleeping_.store(true);
      while (job.remaining.load() != 0) done_.wait(lock);
      caller_sleeping_.store(false);
    }
  }

  void run_inline(int threads, TeamTask task, void* context) {
    inline_calls_.fetch_add(1, std::memory_order_relaxed);
    const bool outer = t_in_team;
    t_in_team = true;
    for (int t = 0; t < threads; ++t) task(context, t, threads);
    t_in_team = outer;
  }

  bool awake() const { return spinning_.load(std::memory_order_relaxed) > 0; }

  TeamStats stats() const {
    TeamStats s;
    s.calls = calls_.load();
    s.inline_calls = inline_calls_.load();
    s.sleeps = sleeps_.load();
    s.busy_checks = busy_checks_.load();
    s.busy = busy_.load();
    return s;
  }

 private:
  void start_worker() {
    slots_.push_back(std::make_unique<Slot>());
    std::thread(&Pool::work, this, int(slots_.size()), slots_.back().get()).detach();
  }

  void work(int t, Slot* slot) {
    t_in_team = true;
    for (;;) {
      Job* job = wait_for_job(*slot);
      job->task(job->context, t, job->threads);
      slot->job.store(nullptr, std::memory_order_relaxed);  // ordered before the caller's next store by:
      if (job->remaining.fetch_sub(1) == 1 && caller_sleeping_.load()) {  // (job is not touched after this)
        std::lock_guard<std::mutex> lock(mutex_);
        done_.notify_all();
      }
    }
  }

  Job* wait_for_job(Slot& slot) {
    Job* job = nullptr;
    if (spin_.load(std::memory_order_relaxed)) {
      spinning_.fetch_add(1, std::memory_order_relaxed);
      const bool got = spin_until([&] { return (job = slot.job.load(std::memory_order_acquire)) != nullptr; }, kSpin);
      spinning_.fetch_sub(1, std::memory_order_relaxed);
      if (got) return job;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    sleeps_.fetch_add(1, std::memory_order_relaxed);
    sleepers_.fetch_add(1);
    while (!(job = slot.job.load())) wake_.wait(lock);
    sleepers_.fetch_sub(1);
    return job;
  }

  // Spin only where the team has a core a thread: the runnable threads other than this caller and the workers
  // spinning now, plus the team, fit in the machine's CPUs. Unreadable: never spin (OpenMP's passive wait).
  void check_machine(int threads) {
    if (policy_ != WaitPolicy::kAuto) return;
    const auto now = Clock::now();
    if (now < next_check_) return;
    next_check_ = now + kCheckEvery;
    const int runnable = runnable_threads(loadavg_);
    const int others = runnable - 1 - spinning_.load(std::memory_order_relaxed);
    const bool free = runnable > 0 && others + threads <= cpus_;
    busy_checks_.fetch_add(1, std::memory_order_relaxed);
    if (!free) busy_.fetch_add(1, std::memory_order_relaxed);
    spin_.store(free, std::memory_order_relaxed);
  }

  std::mutex owner_;  // held by the call whose team runs
  std::vector<std::unique_ptr<Slot>> slots_;  // worker t waits on slots_[t - 1]; grown by the owner only
  std::mutex mutex_;  // for sleeping: workers on wake_, the caller on done_
  std::condition_variable wake_, done_;
  std::atomic<int> sleepers_{0}, spinning_{0};
  std::atomic<bool> caller_sleeping_{false}, spin_{false};
  const WaitPolicy policy_;
  const int loadavg_, cpus_;
  Clock::time_point next_check_{};
  std::atomic<std::int64_t> calls_{0}, inline_calls_{0}, sleeps_{0}, busy_checks_{0}, busy_{0};
};

std::atomic<Pool*> g_pool{nullptr};
std::once_flag g_at_fork;

// A forked child has none of the parent's workers: it starts a pool of its own (the parent's is left behind,
// its mutexes possibly held by threads that do not exist here).
void forget_pool_in_child() { g_pool.store(nullptr); }

Pool& pool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p) return *p;
  static std::mutex creating;
  std::lock_guard<std::mutex> lock(creating);
  std::call_once(g_at_fork, [] { pthread_atfork(nullptr, nullptr, forget_pool_in_child); });
  if (!(p = g_pool.load())) g_pool.store(p = new Pool());  // never deleted: its detached workers use it until exit
  return *p;
}

}  // namespace

void run_team(int threads, TeamTask task, void* context) {
  if (threads <= 1) return task(context, 0, 1);
  if (t_in_team || omp_in_parallel()) return pool().run_inline(threads, task, context);
  pool().run(threads, task, context);
}

bool team_awake() {
  const Pool* p = g_pool.load(std::memory_order_acquire);
  return p != nullptr && p->awake();
}

TeamStats team_stats() { return pool().stats(); }

}  // namespace attnkit

// accel_sdk/thread_pool.hpp: a small fixed pool of worker threads.
//
// parallel_for(n, fn) calls fn(i) once for every i in [0, n) and returns when
// all calls have finished. The calling thread takes indices too, so a call
// always completes even when every worker is busy (with another caller's job,
// or a nested parallel_for), and several threads may call it at once: each
// call is its own job, and idle workers help whichever jobs are queued. The
// caller waits only for the indices a worker took: a worker that wakes after the
// caller has taken the rest finds nothing to do and the call has not waited for
// it (where an OpenMP team's barrier waits for every member to arrive, a sleeping
// one included). The first exception thrown by fn is rethrown in the caller
// once the job has drained (the other indices still run).
//
// A worker that has finished a job looks for the next one for kLook (200 us)
// before it sleeps on the condition variable: a model's layers come one after
// another, so during a run the workers stay awake and keep their caches, and
// waking a sleeping virtual CPU costs tens of microseconds each time. The look is
// bounded and nobody waits on a looking worker (the caller waits only for the
// indices a worker took), so an idle pool sleeps and a loaded machine loses at
// most kLook of CPU time after each run.
#ifndef ACCEL_SDK_THREAD_POOL_HPP
#define ACCEL_SDK_THREAD_POOL_HPP

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <accel_sdk/threads.hpp>

#include <chrono>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace accel_sdk {

class ThreadPool {
 public:
  // A pool running work on `threads` threads in total, the caller included
  // (so threads - 1 workers; 0 or 1 means every call runs inline).
  explicit ThreadPool(std::size_t threads) {
    for (std::size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }

  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that run a parallel_for, the caller included.
  std::size_t size() const { return workers_.size() + 1; }

  // ... on at most max_threads threads, the caller included (0: every thread of the pool).
  template <class Fn>
  void parallel_for(std::size_t n, Fn&& fn, std::size_t max_threads = 0) {
    if (n == 0) return;
    if (n == 1 || workers_.empty() || max_threads == 1) {
      for (std::size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    auto job = std::make_shared<Job>(n, std::function<void(std::size_t)>(std::ref(fn)));
    std::size_t helpers = std::min(workers_.size(), n - 1);
    if (max_threads > 1) helpers = std::min(helpers, max_threads - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (std::size_t i = 0; i < helpers; ++i) queue_.push_back(job);
      queued_.fetch_add(helpers, std::memory_order_release);
    }
    if (helpers == 1) {
      wake_.notify_one();
    } else {
      wake_.notify_all();
    }
    job->drain();
    std::unique_lock<std::mutex> lock(job->mutex);
    job->finished.wait(lock, [&] { return job->done == job->n; });
    if (job->error) std::rethrow_exception(job->error);
  }

  // The process-wide pool: one thread per available core (a handle's thread count
  // decides how many indices it hands a parallel_for). Created on first use and
  // deliberately never destroyed, so no worker is joined while the interpreter
  // shuts down.
  static ThreadPool& global() {
    static ThreadPool* pool = new ThreadPool(static_cast<std::size_t>(resolve_threads(0)));
    return *pool;
  }

 private:
  struct Job {
    Job(std::size_t count, std::function<void(std::size_t)> f) : n(count), fn(std::move(f)) {}

    // Take indices until none are left.
    void drain() {
      std::size_t ran = 0;
      for (std::size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
        try {
          fn(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex);
          if (!error) error = std::current_exception();
        }
        ++ran;
      }
      if (ran != 0) {
        std::lock_guard<std::mutex> lock(mutex);
        done += ran;
        if (done == n) finished.notify_all();
      }
    }

    const std::size_t n;
    std::function<void(std::size_t)> fn;
    std::atomic<std::size_t> next{0};
    std::mutex mutex;
    std::condition_variable finished;
    std::size_t done = 0;
    std::exception_ptr error;
  };

  static constexpr std::chrono::microseconds kLook{200};

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
  }

  // Until a job is queued or kLook has passed.
  void look_for_work() const {
    const auto until = std::chrono::steady_clock::now() + kLook;
    while (queued_.load(std::memory_order_acquire) == 0) {
      for (int i = 0; i < 32; ++i) pause();
      if (std::chrono::steady_clock::now() >= until) return;
    }
  }

  void work() {
    bool looked = true;  // a new worker sleeps until the first job
    for (;;) {
      if (!looked) look_for_work();
      looked = true;
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        queued_.fetch_sub(1, std::memory_order_relaxed);
      }
      job->drain();
      looked = false;
    }
  }

  std::vector<std::thread> workers_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<std::size_t> queued_{0};  // queue_.size(), read without the lock by a looking worker
  bool stop_ = false;
};

// parallel_for on the process-wide pool (on at most max_threads threads: 0, all of them).
template <class Fn>
void parallel_for(std::size_t n, Fn&& fn, std::size_t max_threads = 0) {
  ThreadPool::global().parallel_for(n, std::forward<Fn>(fn), max_threads);
}

// fn(begin, end) over [0, n) cut into `shares` contiguous ranges (each starting at a multiple of
// `align`), on the process-wide pool: one range a thread, the caller taking its own.
template <class Fn>
void parallel_ranges(std::size_t n, std::size_t shares, Fn&& fn, std::size_t align = 64) {
  shares = std::max<std::size_t>(1, std::min(shares, (n + align - 1) / align));
  if (shares == 1) {
    fn(std::size_t{0}, n);
    return;
  }
  auto edge = [&](std::size_t k) { return k == shares ? n : n * k / shares / align * align; };
  parallel_for(shares, [&](std::size_t k) { fn(edge(k), edge(k + 1)); }, shares);
}

}  // namespace accel_sdk

#endif  // ACCEL_SDK_THREAD_POOL_HPP

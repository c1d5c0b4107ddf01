// accel_sdk/threads.hpp: the thread count of a loaded blob.
//
// accel-core chooses the count once, when an artifact is loaded (accel.load(path,
// threads=N), `accel run --threads N`, else ACCEL_NUM_THREADS, else every core), and
// passes it to the runtime's create (accel_runtime_options); nothing in a runtime reads
// the environment for it. A runtime keeps the count and computes with it:
//
//   resolve_threads(n)    n > 0 (at most kMaxThreads), or every core this process may
//                         run on for n <= 0;
//   threads_for(work, n)  n threads for `work` operations (multiply-accumulates, window
//                         taps, elements), one below kSmallWork: forking a team costs more
//                         than it saves there, and far more on a loaded machine.
//
// A oneDNN runtime applies the count with onednn::ThreadScope (accel_sdk/onednn.hpp),
// around creating its primitives and around every run.
#ifndef ACCEL_SDK_THREADS_HPP
#define ACCEL_SDK_THREADS_HPP

#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace accel_sdk {

// The most threads a handle computes with (as accel.runtime.MAX_THREADS).
constexpr int kMaxThreads = 1024;

// Below this many operations a kernel runs on one thread (see threads_for). Waking a sleeping
// partner thread costs 15-30 us on a virtual machine whose other core is idle; MobileNetV2's
// layers of 2-8M multiply-accumulates (40-100 us on one thread) gain a little from a second
// thread past that, smaller ones lose (measured on a 2-core AVX-512 machine: 2^21 against 2^23,
// MobileNetV2 fp32 at 2 threads 3.88 against 3.99 ms on acl, 3.94 against 4.20 ms on bnns).
constexpr double kSmallWork = 1 << 21;

// Below this many multiply-accumulates a layer run as bands (accel_sdk::onednn::
// IntConvRequantize, and FloatConv / FloatDense with spec.bands) stays on one thread: its bands
// go to accel_sdk's pool, whose caller does not wait for a sleeping partner, so the bar is lower
// than kSmallWork (MobileNetV2 fp32 at 2 threads on acl, same process: 5.32 ms from 2^20,
// 5.42 from 2^21, 5.70 from 2^19).
constexpr double kSmallBandedLayer = 1 << 20;

// Below this many elements a memory-bound pass (elementwise arithmetic, a copy) runs on one
// thread: a 75k-float add takes 10 us on one, 15-30 us on two sleeping OpenMP threads (the
// partner's wake-up is most of it).
constexpr double kSmallElementwise = 1 << 20;

// Below this many elements a pass over 8-bit elements (quant::AddTable) runs on
// one thread; from here a range on each thread of accel_sdk's pool pays (MobileNetV2 QDQ's add of
// 75k elements: 27 us on one thread; at 2^13 the smaller adds lost more to the pool than they gained).
constexpr double kSmallLookup = 1 << 15;

// The cores this process may run on (its CPU affinity where the system tells), at least 1.
inline int available_cores() {
#if defined(__linux__) && defined(CPU_COUNT)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

// n when n > 0, else every available core; at most kMaxThreads.
inline int resolve_threads(int n) {
  const int want = n > 0 ? n : available_cores();
  return want < kMaxThreads ? want : kMaxThreads;
}

// Threads for a kernel of `work` operations in a handle computing with `threads`.
inline int threads_for(double work, int threads, double small = kSmallWork) { return work < small ? 1 : threads; }

}  // namespace accel_sdk

#endif  // ACCEL_SDK_THREADS_HPP

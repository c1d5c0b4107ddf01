// accel_sdk/onednn.hpp: what every oneDNN-based runtime shares.
//
// Needs oneDNN 3.2 (the GNU OpenMP build of the onednn-cpu-gomp wheel): link the
// extension with accel_link_onednn(<target>) in CMake.
//
//   onednn::engine()           the process's CPU engine (created once, thread-safe);
//   onednn::Stream             the stream of a call: the calling thread's own;
//   onednn::resolve_threads(n) n > 0, or every available core for n <= 0 (accel_sdk/threads.hpp);
//   onednn::ThreadScope        sets GNU OpenMP's thread count for the calling thread and
//                              restores it when it goes out of scope;
//   onednn::Call               what one run of a handle needs on its thread: a ThreadScope
//                              and a Stream (accel_sdk/graph_runtime.hpp makes one per run);
//   onednn::parallel(n, fn)    fn(i) for i in [0, n) on n threads: an OpenMP team (oneDNN's
//                              own threads) when compiled with OpenMP, as accel_link_onednn
//                              does with GCC, else accel_sdk::parallel_for;
//   onednn::thread_memory(...) a dnnl::memory over a buffer for one call, kept by the thread;
//   onednn::execute(prim, ...) a primitive on (argument, memory) pairs, without a map;
//   onednn::data_type(code)    accel ABI dtype code -> dnnl::memory::data_type;
//   onednn::int8_exact()       true when oneDNN's u8s8/s8s8 -> s32 kernels are exact here;
//   onednn::Error, guard(...)  dnnl::error -> an sdk error naming the step and status;
//   onednn::ConvShape          a 2-D convolution's sizes (NHWC data, groups, window), validated
//                              as accel_sdk/geometry.hpp validates blob windows, and
//                              weight_index() for the weight layouts OIHW, OHWI and HWIO.
//
// Threads. The OpenMP thread count is a per-thread setting (an ICV of the calling
// thread), and oneDNN reads it twice: when a primitive is created (it partitions work
// for that count, and the count is part of its cache key) and when it runs. So set it
// with a ThreadScope around both creating the primitives and every run, in the thread
// that does the work: a runtime holding `threads_` writes
//
//   void run(...) const { onednn::ThreadScope threads(threads_); ... execute ... }
//
// Several threads may run the same primitives at once (each gets its own OpenMP team);
// give each call its thread's Stream, its thread's dnnl::memory objects around the
// caller's buffers (thread_memory()) and its thread's scratchpad (scratchpad_mode::user
// and thread_scratchpad(): the library-managed one is shared between threads). Don't set
// OMP_WAIT_POLICY=PASSIVE: it makes small layers 1.5-4.5x slower.
//
// int8 exactness. On CPUs without VNNI (AVX2, AVX512_CORE) oneDNN's int8 convolution
// and matmul add pairs of u8*s8 products in 16 bits with saturation, which is wrong
// for large operands (a 3x3 conv mismatched on nearly every output); with VNNI
// (AVX2_VNNI, AVX512_CORE_VNNI and newer) the products go straight into int32 and the
// result is exact. int8_exact() reports which case this process is in, after
// ONEDNN_MAX_CPU_ISA; accel_sdk/int_ops.hpp takes an exact path when it is false.
#ifndef ACCEL_SDK_ONEDNN_HPP
#define ACCEL_SDK_ONEDNN_HPP

#include <accel/runtime_abi.h>
#include <accel_sdk/geometry.hpp>
#include <accel_sdk/thread_pool.hpp>
#include <accel_sdk/threads.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <mutex>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// GNU OpenMP's entry points (libgomp, which libdnnl.so.3 loads anyway; accel_link_onednn
// links it): from the compiler's omp.h when it has one (no -fopenmp needed), else declared here.
#if defined(__has_include)
#if __has_include(<omp.h>)
#include <omp.h>
#define ACCEL_SDK_HAVE_OMP_H 1
#endif
#endif
#ifndef ACCEL_SDK_HAVE_OMP_H
extern "C" {
void omp_set_num_threads(int);
int omp_get_max_threads(void);
int omp_get_num_procs(void);
}
#endif

namespace accel_sdk {
namespace onednn {

// A oneDNN call failed: "oneDNN <context>: <oneDNN's message> (<status>)".
class Error : public std::runtime_error {
 public:
  Error(const std::string& what, dnnl_status_t status) : std::runtime_error(what), status_(status) {}
  dnnl_status_t status() const noexcept { return status_; }

 private:
  dnnl_status_t status_;
};

inline const char* status_name(dnnl_status_t s) {
  switch (s) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out of memory";
    case dnnl_invalid_arguments: return "invalid arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_last_impl_reached: return "no implementation";
    case dnnl_runtime_error: return "runtime error";
    case dnnl_not_required: return "not required";
    default: return "unknown status";
  }
}

// Rethrows e as Error (std::bad_alloc for out of memory, which the ABI glue reports as such).
[[noreturn]] inline void rethrow(const dnnl::error& e, const std::string& context) {
  if (e.status == dnnl_out_of_memory) throw std::bad_alloc();
  throw Error("oneDNN " + context + ": " + e.what() + " (" + status_name(e.status) + ")", e.status);
}

// fn() with dnnl::error translated: guard("conv2d 3x3 create", [&] { ... }). The context (a
// string literal or a std::string) becomes a std::string only on error: run paths call this
// for every kernel.
template <class Context, class F>
auto guard(const Context& context, F&& fn) -> decltype(fn()) {
  try {
    return std::forward<F>(fn)();
  } catch (const dnnl::error& e) {
    rethrow(e, std::string(context));
  }
}

// The CPU engine, shared by every primitive of the process (engines are thread-safe).
inline const dnnl::engine& engine() {
  static const dnnl::engine e = guard("engine", [] { return dnnl::engine(dnnl::engine::kind::cpu, 0); });
  return e;
}

// The stream of a call: the calling thread's own (made on its first call, then shared by
// every call on that thread, which never overlap; never shared between threads).
class Stream {
 public:
  Stream() : s_(thread_stream()) {}
  dnnl::stream& get() { return s_; }
  operator dnnl::stream&() { return s_; }
  void wait() {
    guard("stream wait", [&] { s_.wait(); });
  }

 private:
  // Left alive at thread exit (oneDNN may be unloaded first); one small object a thread.
  static const dnnl::stream& thread_stream() {
    thread_local const dnnl::stream* s = new dnnl::stream(guard("stream", [] { return dnnl::stream(engine()); }));
    return *s;
  }
  dnnl::stream s_;
};

// What thread_memory() keeps apart: the memories one primitive call is given must be distinct
// objects, so each argument position has its slot.
enum MemorySlot : int { kSrcMemory, kSrc1Memory, kDstMemory, kScratchMemory, kZeroPointMemory, kMemorySlots };

// A dnnl::memory of `md` over `data` for one primitive call on this thread, valid until the
// thread's next thread_memory(slot, <same md>, ...). Making a dnnl::memory takes several heap
// allocations (0.2-0.3 us); here the calling thread keeps the last 16 of each slot, by
// descriptor, and points one at `data`. With the thread's stream and execute() below, the
// digits model's ethosn partition (three 8x8 convolutions and a pool) went from 9.4 to 5.3 us
// a run: at this size oneDNN's own work is the smaller part of a call. Not for a memory that must outlive another call's with the same slot and descriptor.
inline dnnl::memory thread_memory(MemorySlot slot, const dnnl::memory::desc& md, const void* data) {
  struct Kept {
    dnnl::memory::desc md;
    dnnl::memory mem;
  };
  constexpr std::size_t kKept = 16;
  // left alive at thread exit, as thread_stream()'s
  thread_local std::vector<Kept>* kept = new std::vector<Kept>[kMemorySlots];
  std::vector<Kept>& mine = kept[slot];
  void* handle = const_cast<void*>(data);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    if (mine[i].md == md) {
      guard("memory", [&] { mine[i].mem.set_data_handle(handle); });
      return mine[i].mem;
    }
  }
  if (mine.size() == kKept) mine.erase(mine.begin());
  mine.push_back({md, guard("memory", [&] { return dnnl::memory(md, engine(), handle); })});
  return mine.back().mem;
}

// prim on `args` (an argument code and memory each): oneDNN's C call, which takes them as an
// array, where the C++ execute() wants an unordered_map built for every call.
inline void execute(const dnnl::primitive& prim, dnnl::stream& stream,
                    std::initializer_list<std::pair<int, const dnnl::memory*>> args) {
  dnnl_exec_arg_t c_args[8];
  int n = 0;
  for (const auto& a : args) {
    if (a.second == nullptr) continue;
    if (n == 8) throw Error("oneDNN execute: more than 8 arguments", dnnl_invalid_arguments);
    c_args[n++] = {a.first, a.second->get()};
  }
  const dnnl_status_t status = dnnl_primitive_execute(prim.get(), stream.get(), n, c_args);
  if (status != dnnl_success) throw dnnl::error(status, "could not execute a primitive");
}

// Attributes with scratchpad_mode::user: the primitive takes its scratchpad from the caller (a
// run's arena, or thread_scratchpad()). oneDNN's own (library mode) is shared by the threads that
// run one primitive at once (gemm convolutions crashed in im2col).
inline dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The calling thread's scratchpad for one oneDNN call, at least `bytes` long, 64-byte
// aligned, valid until this thread's next call. Primitives created with
// scratchpad_mode::user take it as DNNL_ARG_SCRATCHPAD: oneDNN's library-managed
// scratchpad is shared between threads, so primitives running on several threads at
// once (bands, concurrent run() calls) must each bring their own.
inline void* thread_scratchpad(std::size_t bytes) {
  thread_local std::vector<unsigned char> buf;
  if (buf.size() < bytes + 64) buf.resize(bytes + 64);
  const std::uintptr_t p = reinterpret_cast<std::uintptr_t>(buf.data());
  return buf.data() + ((64 - p % 64) % 64);
}

using accel_sdk::resolve_threads;

// The calling thread's OpenMP thread count set to resolve_threads(n) for the scope.
class ThreadScope {
 public:
  explicit ThreadScope(int n) : saved_(omp_get_max_threads()) {
    const int want = resolve_threads(n);
    if (want != saved_) omp_set_num_threads(want);
  }
  ~ThreadScope() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

// What one run of a handle (or its create) needs on the calling thread: OpenMP's thread count
// set to the handle's, and a stream; accel_sdk::GraphRuntime makes one per run and calls
// finish() after the last kernel.
class Call {
 public:
  explicit Call(int threads) : threads_(threads) {}
  // "oneDNN <version>", of the library loaded (what `accel backends` shows)
  static std::string library() {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  }
  dnnl::stream& stream() { return stream_.get(); }
  void finish() { stream_.wait(); }

 private:
  ThreadScope threads_;
  Stream stream_;
};

// fn(i) for every i in [0, n), each on its own thread, the caller's included. With OpenMP
// (accel_link_onednn compiles with -fopenmp under GCC) the threads are an OpenMP team, the
// same threads oneDNN runs on, so layers computed here and layers computed by oneDNN do not
// compete with each other's spinning workers; oneDNN primitives called inside run on one
// thread (create them under ThreadScope(1)). The first exception thrown by fn is rethrown
// once every call has finished.
template <class Fn>
void parallel(std::size_t n, Fn&& fn) {
  if (n == 0) return;
  if (n == 1) {
    fn(std::size_t{0});
    return;
  }
#ifdef _OPENMP
  std::exception_ptr error;
  std::mutex mutex;
#pragma omp parallel for num_threads(static_cast<int>(n)) schedule(static, 1)
  for (long long i = 0; i < static_cast<long long>(n); ++i) {
    try {
      fn(static_cast<std::size_t>(i));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
#else
  parallel_for(n, std::forward<Fn>(fn));
#endif
}

// dnnl data type of an accel ABI dtype code; Error for a type oneDNN has no memory type for.
inline dnnl::memory::data_type data_type(std::int32_t accel_dtype) {
  using dt = dnnl::memory::data_type;
  switch (accel_dtype) {
    case ACCEL_FLOAT32: return dt::f32;
    case ACCEL_FLOAT16: return dt::f16;
    case ACCEL_INT8: return dt::s8;
    case ACCEL_UINT8: return dt::u8;
    case ACCEL_INT32: return dt::s32;
    default:
      throw Error("oneDNN has no data type for accel dtype code " + std::to_string(accel_dtype) +
                      " (supported: float32, float16, int8, uint8, int32)",
                  dnnl_invalid_arguments);
  }
}

// oneDNN's effective ISA (after ONEDNN_MAX_CPU_ISA), e.g. "avx2", "avx512_core_vnni".
inline dnnl::cpu_isa cpu_isa() { return dnnl::get_effective_cpu_isa(); }

inline const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::isa_default: return "default";
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2_vnni_2: return "avx2_vnni_2";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_fp16: return "avx512_core_fp16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_amx_fp16: return "avx512_core_amx_fp16";
    default: return "unknown";
  }
}

// True when the effective ISA has VNNI (AVX2_VNNI, AVX512_CORE_VNNI or newer): oneDNN's
// int8 kernels then accumulate every u8*s8 product in int32, exactly. The ISA bits of
// dnnl_cpu_isa_t are cumulative: 0x8 is AVX2_VNNI's, 0x40 AVX512_CORE_VNNI's.
inline bool int8_exact() {
  const auto bits = static_cast<unsigned>(cpu_isa());
  return (bits & 0x8u) != 0 || (bits & 0x40u) != 0;
}

// Where a convolution's weights come from: O = output channels, I = input channels per group.
enum class WeightLayout { oihw, ohwi, hwio };

// A 2-D convolution: batch x in_h x in_w x in_channels data, out_channels outputs, groups
// (in_channels / groups inputs per output; groups == in_channels == out_channels is
// depthwise) and the window (kernel, stride, dilation, padding top/left/bottom/right).
struct ConvShape {
  std::int64_t batch = 1, in_h = 0, in_w = 0, in_channels = 0, out_channels = 0, groups = 1;
  geometry::Window2d window;

  // Checks every size (onednn::Error, or geometry::GeometryError for a window that does not fit).
  void validate() const {
    auto positive = [](std::int64_t v, const char* what) {
      if (v < 1 || v >= geometry::kMaxExtent) {
        throw Error(std::string("convolution: ") + what + "=" + std::to_string(v) + ", must be in [1, 2^31)",
                    dnnl_invalid_arguments);
      }
    };
    positive(batch, "batch");
    positive(in_h, "height");
    positive(in_w, "width");
    positive(in_channels, "input channels");
    positive(out_channels, "output channels");
    positive(groups, "groups");
    if (in_channels % groups != 0 || out_channels % groups != 0) {
      throw Error("convolution: groups=" + std::to_string(groups) + " must divide the input channels (" +
                      std::to_string(in_channels) + ") and the output channels (" + std::to_string(out_channels) + ")",
                  dnnl_invalid_arguments);
    }
    (void)geometry::conv2d(in_h, in_w, window);
  }
  std::int64_t out_h() const { return geometry::conv2d(in_h, in_w, window).oh; }
  std::int64_t out_w() const { return geometry::conv2d(in_h, in_w, window).ow; }
  std::int64_t in_per_group() const { return in_channels / groups; }
  std::int64_t out_per_group() const { return out_channels / groups; }
  bool depthwise() const { return groups > 1 && groups == in_channels && groups == out_channels; }
  // elements of the weights: out_channels x in_per_group x kh x kw
  std::size_t weight_count() const {
    return static_cast<std::size_t>(out_channels * in_per_group() * window.kh * window.kw);
  }
  // Output rows [r0, r1) of one image as a convolution of their own (a band): the input rows
  // they read (from in_first, in_rows of them) and the padding left at the band's top and
  // bottom. Bands of a layer run as separate oneDNN calls, on separate threads.
  struct Band {
    std::int64_t in_first = 0, in_rows = 0, out_rows = 0, pad_t = 0, pad_b = 0;
    // Whether one primitive computes both bands (they differ at most in where they start).
    bool same_geometry(const Band& o) const {
      return in_rows == o.in_rows && out_rows == o.out_rows && pad_t == o.pad_t && pad_b == o.pad_b;
    }
  };
  Band band(std::int64_t r0, std::int64_t r1) const {
    const std::int64_t extent = (window.kh - 1) * window.dh + 1;
    const std::int64_t want_first = r0 * window.sh - window.pt;
    const std::int64_t want_last = (r1 - 1) * window.sh - window.pt + extent - 1;
    Band b;
    b.in_first = std::max<std::int64_t>(0, want_first);
    const std::int64_t last = std::min(in_h - 1, want_last);
    b.in_rows = last - b.in_first + 1;
    b.out_rows = r1 - r0;
    b.pad_t = b.in_first - want_first;
    b.pad_b = want_last - last;
    return b;
  }
  // multiply-accumulates of the convolution
  double macs() const {
    return static_cast<double>(batch * out_h() * out_w() * out_channels) *
           static_cast<double>(in_per_group() * window.kh * window.kw);
  }
};

// Index of weight (output channel o, input channel i of its group, kernel row y, column x).
inline std::size_t weight_index(WeightLayout layout, const ConvShape& s, std::int64_t o, std::int64_t i,
                                std::int64_t y, std::int64_t x) {
  const std::int64_t I = s.in_per_group(), KH = s.window.kh, KW = s.window.kw;
  switch (layout) {
    case WeightLayout::oihw: return static_cast<std::size_t>(((o * I + i) * KH + y) * KW + x);
    case WeightLayout::ohwi: return static_cast<std::size_t>(((o * KH + y) * KW + x) * I + i);
    default: return static_cast<std::size_t>(((y * KW + x) * I + i) * s.out_channels + o);
  }
}

}  // namespace onednn
}  // namespace accel_sdk

#endif  // ACCEL_SDK_ONEDNN_HPP

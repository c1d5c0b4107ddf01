// accel_sdk/graph_runtime.hpp: the runtime of a graph-blob backend, less its kernels.
//
// A backend whose serializer writes accel-sdk's graph blob (accel_sdk.graph_blob) writes
// one kernel class per kernel name and a factory; GraphRuntime does the rest:
//
//   - create: parses and validates the blob (GraphBlob::parse), asks the backend for one
//     kernel per node (each checks its node against the shapes of its tensors and packs
//     its weights once), keeps the constants kernels read at run time, and plans one
//     arena for every intermediate and every kernel's scratch by liveness (ArenaPlan);
//   - run: checks the caller's tensors against the blob's, borrows an arena (ArenaPool:
//     concurrent runs of one handle never share one), binds inputs, outputs, constants
//     and intermediates by tensor id, and runs the kernels in order;
//   - threads: the count accel chose at load time (RuntimeOptions), applied around
//     create and every run by the backend's Call.
//
//   class MyConv final : public accel_sdk::Kernel<accel_sdk::onednn::Call> {
//    public:
//     explicit MyConv(const accel_sdk::NodeContext& c) {
//       c.arity(2, 3, 1);                       // inputs, outputs; BlobError names the node
//       ...                                     // check, then pack the weights once
//       ins = {c.n.inputs[0]};                  // the tensors run() reads and writes
//       outs = {c.n.outputs[0]};
//       scratch_bytes = ...;                    // run()'s own scratch, if any
//     }
//     void run(Exec& e) const override { op_.execute(e.call.stream(), e.in<float>(0), e.out<float>(0)); }
//   };
//
//   class MyRuntime final : public accel_sdk::GraphRuntime<MyRuntime, accel_sdk::onednn::Call> {
//    public:
//     static accel_sdk::GraphBlobSpec blob_spec() { return {"mynpu", 1, 1}; }
//     std::unique_ptr<Kernel> make_kernel(const accel_sdk::NodeContext& c) const {
//       if (c.n.kernel == "conv2d") return std::make_unique<MyConv>(c);
//       c.fail("unknown kernel");
//     }
//   };
//   ACCEL_SDK_RUNTIME_MODULE(_runtime, "mynpu", MyRuntime)
//
// A backend whose blob wraps the graph blob in a header of its own defines
// `static GraphBlob parse(BlobReader&)` instead of blob_spec().
//
// make_kernel is called once per node, in the blob's order, and may keep what it learns
// across nodes (a backend that lets a tensor stay in the memory format its producer chose
// remembers each tensor's format). A kernel that writes an intermediate in a format that
// takes more than the tensor's bytes (a blocked format's padding) says how many in
// out_bytes; graph outputs are the caller's buffers and take the tensor's bytes exactly.
//
// Call is what one run (and create) needs on its thread: constructed from the thread
// count before the first kernel, finish() after the last. onednn::Call sets OpenMP's
// thread count and owns a oneDNN stream; NoCall (the default) does nothing.
//
// ACCEL_PROFILE=1 in the environment when a blob is loaded prints each kernel's time of
// every run on stderr.
#ifndef ACCEL_SDK_GRAPH_RUNTIME_HPP
#define ACCEL_SDK_GRAPH_RUNTIME_HPP

#include <accel_sdk/arena.hpp>
#include <accel_sdk/blob_reader.hpp>
#include <accel_sdk/graph_blob.hpp>
#include <accel_sdk/runtime.hpp>
#include <accel_sdk/tensor.hpp>
#include <accel_sdk/threads.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace accel_sdk {

// The per-run state of a backend that needs none.
struct NoCall {
  explicit NoCall(int /*threads*/) {}
  void finish() {}
};

namespace detail {
template <class Call, class = void>
struct CallNamesLibrary : std::false_type {};
template <class Call>
struct CallNamesLibrary<Call, std::void_t<decltype(Call::library())>> : std::true_type {};
}  // namespace detail

// What a kernel sees while it runs: every tensor's address by id, its scratch, the run's Call.
template <class Call>
struct KernelExec {
  void* const* ptr;
  std::uint8_t* scratch;  // the kernel's scratch_bytes, 64-byte aligned
  Call& call;
  const std::vector<std::uint32_t>& ins;
  const std::vector<std::uint32_t>& outs;
  // One flag a tensor for this run, all 0 at its start (GraphRuntime's runs; null elsewhere):
  // a kernel may set its output's to 1 when the values it wrote are finite and within bounds
  // its readers know from the blob (a clip's, say), so that they can skip checks of their own.
  std::uint8_t* bounded = nullptr;

  // The kernel's i-th input / output (its ins / outs), as T.
  template <class T = void>
  const T* in(std::size_t i) const { return static_cast<const T*>(ptr[ins[i]]); }
  template <class T = void>
  T* out(std::size_t i) const { return static_cast<T*>(ptr[outs[i]]); }
};

template <class Call>
class Kernel {
 public:
  using Exec = KernelExec<Call>;
  virtual ~Kernel() = default;
  virtual void run(Exec& e) const = 0;

  std::vector<std::uint32_t> ins, outs;  // tensors run() reads and writes (constants it reads are kept)
  std::size_t scratch_bytes = 0;         // scratch run() gets to itself
  std::vector<std::size_t> out_bytes;    // bytes run() writes to each of outs, if more than the tensor's (or empty)
};

// One node being turned into a kernel: the blob, the node, the handle's thread count,
// and checks that fail with BlobError naming the node.
struct NodeContext {
  const GraphBlob& g;
  const GraphNode& n;
  int threads;  // the handle's (resolved)

  const GraphTensor& in(std::size_t i) const {
    if (i >= n.inputs.size()) fail("has no input " + std::to_string(i));
    return g.tensor(n.inputs[i]);
  }
  const GraphTensor& out(std::size_t i) const {
    if (i >= n.outputs.size()) fail("has no output " + std::to_string(i));
    return g.tensor(n.outputs[i]);
  }
  [[noreturn]] void fail(const std::string& what) const { n.fail(what); }

  // Between lo and hi inputs, exactly `outs` outputs.
  void arity(std::size_t lo, std::size_t hi, std::size_t outs) const {
    if (n.inputs.size() < lo || n.inputs.size() > hi || n.outputs.size() != outs) {
      fail("takes " + std::to_string(lo) + (hi != lo ? ".." + std::to_string(hi) : "") + " inputs and " +
           std::to_string(outs) + " outputs, got " + std::to_string(n.inputs.size()) + " and " +
           std::to_string(n.outputs.size()));
    }
  }
  void dtype(const GraphTensor& t, std::int32_t want, const char* what) const {
    if (t.spec.dtype != want) fail(std::string(what) + " must be " + dtype_name(want) + ", got " + t.spec.describe());
  }
  void rank(const GraphTensor& t, int r, const char* what) const {
    if (t.spec.shape.rank() != r) fail(std::string(what) + " must have rank " + std::to_string(r) + ", got " + t.spec.describe());
  }
  void activation(const GraphTensor& t, const char* what) const {
    if (t.constant()) fail(std::string(what) + " must not be a constant");
  }
  void constant(const GraphTensor& t, const char* what) const {
    if (!t.constant()) fail(std::string(what) + " must be a constant");
  }
  // Attribute `key`: exactly `count` ints, each in [lo, hi].
  std::vector<std::int64_t> ints(const char* key, std::size_t count, std::int64_t lo, std::int64_t hi) const {
    const auto& v = n.attrs.ints(key, count);
    for (std::int64_t x : v) {
      if (x < lo || x > hi) {
        n.attrs.fail(key, "has " + std::to_string(x) + " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
    }
    return v;
  }
  // Attribute `key`: one int in [lo, hi].
  std::int64_t integer(const char* key, std::int64_t lo, std::int64_t hi) const {
    const std::int64_t v = n.attrs.integer(key);
    if (v < lo || v > hi) {
      n.attrs.fail(key, "is " + std::to_string(v) + ", outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return v;
  }
  // Threads for a kernel of `work` operations: one below `small`, else the handle's.
  int threads_for(double work, double small = kSmallWork) const { return accel_sdk::threads_for(work, threads, small); }
  bool graph_input(std::uint32_t id) const { return contains(g.inputs(), id); }
  bool graph_output(std::uint32_t id) const { return contains(g.outputs(), id); }

 private:
  static bool contains(const std::vector<std::uint32_t>& ids, std::uint32_t id) {
    for (std::uint32_t x : ids) {
      if (x == id) return true;
    }
    return false;
  }
};

template <class Derived, class Call = NoCall>
class GraphRuntime {
 public:
  using Kernel = accel_sdk::Kernel<Call>;
  using Exec = KernelExec<Call>;

  static std::unique_ptr<Derived> create(BlobReader& blob, const RuntimeOptions& options) {
    auto rt = std::make_unique<Derived>();
    rt->load(blob, options);
    return rt;
  }

  // The blob's graph blob; a backend with a header of its own hides this with its own parse.
  static GraphBlob parse(BlobReader& blob) { return GraphBlob::parse(blob, Derived::blob_spec()); }

  void run(const std::vector<TensorView>& inputs, std::vector<TensorView>& outputs) const {
    check_tensors("input", inputs, in_specs_);
    check_tensors("output", outputs, out_specs_);
    Call call(threads_);
    ArenaPool::Lease arena = pool_->take();
    std::vector<void*> ptr(base_ptr_);
    for (std::size_t i = 0; i < inputs.size(); ++i) ptr[in_ids_[i]] = inputs[i].data();
    for (std::size_t i = 0; i < outputs.size(); ++i) ptr[out_ids_[i]] = outputs[i].data();
    for (const auto& [id, off] : arena_at_) ptr[id] = arena.data() + off;
    std::vector<std::uint8_t> bounded(base_ptr_.size(), 0);
    for (std::size_t k = 0; k < kernels_.size(); ++k) {
      const Kernel& kern = *kernels_[k];
      Exec e{ptr.data(), arena.data() + scratch_at_[k], call, kern.ins, kern.outs, bounded.data()};
      const auto t0 = profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      try {
        kern.run(e);
      } catch (const ArgumentError&) {
        throw;
      } catch (const std::bad_alloc&) {
        throw;
      } catch (const std::exception& ex) {
        throw std::runtime_error(names_[k] + ": " + ex.what());
      }
      if (profile_) {
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "%s profile %8.1f us  %s\n", kind_.c_str(), us, names_[k].c_str());
      }
    }
    call.finish();
  }

  int threads() const { return threads_; }
  // The library the kernels compute with, as the backend's Call names it (onednn::Call: "oneDNN 3.2.0").
  static std::string kernel_library() {
    if constexpr (detail::CallNamesLibrary<Call>::value) {
      return Call::library();
    } else {
      return "";
    }
  }
  const std::vector<TensorSpec>& input_specs() const { return in_specs_; }
  const std::vector<TensorSpec>& output_specs() const { return out_specs_; }
  std::size_t arena_bytes() const { return pool_->bytes(); }

 private:
  void load(BlobReader& blob, const RuntimeOptions& options) {
    threads_ = options.threads;
    const char* prof = std::getenv("ACCEL_PROFILE");
    profile_ = prof != nullptr && *prof != '\0' && std::strcmp(prof, "0") != 0;
    const GraphBlob g = Derived::parse(blob);
    kind_ = g.kind();
    if (g.nodes().empty()) throw BlobError("a " + kind_ + " blob has at least one node");
    in_ids_ = g.inputs();
    out_ids_ = g.outputs();
    in_specs_ = g.input_specs();
    out_specs_ = g.output_specs();
    Call setup(threads_);  // kernels are created for the thread count they run with
    Derived& self = static_cast<Derived&>(*this);
    for (const GraphNode& n : g.nodes()) {
      std::unique_ptr<Kernel> k = self.make_kernel(NodeContext{g, n, threads_});
      if (!k) n.fail("the runtime made no kernel for it");
      check_ids(g, n, *k);
      kernels_.push_back(std::move(k));
      names_.push_back("node '" + n.name + "' (" + n.kernel + ")");
    }
    setup.finish();
    plan(g);
  }

  // The ids a kernel lists are the node's own, or tensors the blob defines before it; it
  // writes no more than a graph output's bytes.
  void check_ids(const GraphBlob& g, const GraphNode& n, const Kernel& k) const {
    for (const auto* ids : {&k.ins, &k.outs}) {
      for (std::uint32_t id : *ids) {
        if (id >= g.tensors().size()) n.fail("its kernel names tensor " + std::to_string(id) + ", which does not exist");
      }
    }
    if (!k.out_bytes.empty() && k.out_bytes.size() != k.outs.size()) n.fail("its kernel gives out_bytes for some outputs only");
    for (std::size_t i = 0; i < k.out_bytes.size(); ++i) {
      const GraphTensor& t = g.tensor(k.outs[i]);
      if (k.out_bytes[i] > t.nbytes && std::find(out_ids_.begin(), out_ids_.end(), k.outs[i]) != out_ids_.end()) {
        n.fail("its kernel writes " + std::to_string(k.out_bytes[i]) + " bytes to graph output '" + t.name + "' of " +
               std::to_string(t.nbytes));
      }
    }
  }

  // Constants run() reads get owned copies (the blob is gone after create); graph inputs and
  // outputs are the caller's; every other tensor lives in the arena from the kernel writing it
  // to its last reader, and each kernel's scratch while it runs.
  void plan(const GraphBlob& g) {
    const std::size_t nt = g.tensors().size();
    base_ptr_.assign(nt, nullptr);
    std::vector<bool> external(nt, false);
    for (std::uint32_t id : in_ids_) external[id] = true;
    for (std::uint32_t id : out_ids_) external[id] = true;
    constexpr std::size_t kNone = static_cast<std::size_t>(-1);
    std::vector<std::size_t> first(nt, kNone), last(nt, kNone), bytes(nt, 0);
    for (std::uint32_t id = 0; id < nt; ++id) bytes[id] = g.tensor(id).nbytes;
    for (std::size_t k = 0; k < kernels_.size(); ++k) {
      for (std::uint32_t id : kernels_[k]->ins) {
        const GraphTensor& t = g.tensor(id);
        if (t.constant() && base_ptr_[id] == nullptr) {
          consts_.emplace_back(t.nbytes);
          if (t.nbytes) std::memcpy(consts_.back().data(), t.data, t.nbytes);
          base_ptr_[id] = consts_.back().data();
        }
        last[id] = k;
      }
      const Kernel& kern = *kernels_[k];
      for (std::size_t i = 0; i < kern.outs.size(); ++i) {
        const std::uint32_t id = kern.outs[i];
        if (first[id] == kNone) first[id] = k;
        if (i < kern.out_bytes.size()) bytes[id] = std::max(bytes[id], kern.out_bytes[i]);
      }
    }
    ArenaPlan arena;
    std::vector<std::pair<std::uint32_t, std::size_t>> tensors;  // id, plan index
    for (std::uint32_t id = 0; id < nt; ++id) {
      if (first[id] == kNone || external[id] || g.tensor(id).constant()) continue;
      const std::size_t end = last[id] == kNone || last[id] < first[id] ? first[id] : last[id];
      tensors.emplace_back(id, arena.add(bytes[id], first[id], end));
    }
    std::vector<std::size_t> scratch(kernels_.size());
    for (std::size_t k = 0; k < kernels_.size(); ++k) scratch[k] = arena.add(kernels_[k]->scratch_bytes, k, k);
    arena.finish();
    for (const auto& [id, i] : tensors) arena_at_.emplace_back(id, arena.offset(i));
    scratch_at_.resize(kernels_.size());
    for (std::size_t k = 0; k < kernels_.size(); ++k) scratch_at_[k] = arena.offset(scratch[k]);
    pool_ = std::make_unique<ArenaPool>(arena.bytes());
  }

  int threads_ = 1;
  bool profile_ = false;
  std::string kind_;
  std::vector<std::uint32_t> in_ids_, out_ids_;
  std::vector<TensorSpec> in_specs_, out_specs_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
  std::vector<std::string> names_;
  std::vector<AlignedBuffer> consts_;
  std::vector<void*> base_ptr_;
  std::vector<std::pair<std::uint32_t, std::size_t>> arena_at_;
  std::vector<std::size_t> scratch_at_;
  std::unique_ptr<ArenaPool> pool_;
};

}  // namespace accel_sdk

#endif  // ACCEL_SDK_GRAPH_RUNTIME_HPP

// The bnns runtime: BNNS's operator contract (float32, planar NCHW at the partition
// boundary, constant weights) computed on this host through oneDNN.
//
// create() reads the blob (README.md: a 64-byte header, then an accel graph blob of
// kind "bnns"), checks every kernel's inputs, attributes and shapes, and builds the
// oneDNN primitives once: convolutions and dense layers choose their own memory
// formats (format_tag::any; their weights are reordered into them here, once), and
// tensors stay in the format their producer chose for as long as their consumers
// accept it, so a chain of convolutions reorders only at the partition's entry and
// exit. run() is const: per call it binds the caller's buffers and a per-thread
// arena to the planned steps, so one loaded blob runs on several threads at once.
#include <accel_sdk/blob_reader.hpp>
#include <accel_sdk/float_ops.hpp>
#include <accel_sdk/geometry.hpp>
#include <accel_sdk/graph_blob.hpp>
#include <accel_sdk/onednn.hpp>
#include <accel_sdk/runtime.hpp>
#include <accel_sdk/tensor.hpp>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

namespace onednn = accel_sdk::onednn;
using accel_sdk::BlobError;
using accel_sdk::BlobReader;
using accel_sdk::GraphBlob;
using accel_sdk::GraphNode;
using accel_sdk::GraphTensor;
using accel_sdk::Shape;
using accel_sdk::TensorSpec;
using accel_sdk::TensorView;
using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderSize = 64;  // serializer.py: HEADER_SIZE
constexpr std::uint32_t kMaxThreads = 1024;
constexpr std::size_t kAlign = 64;
// Below this many multiply-accumulates (or window taps) a step runs on one thread; below
// kSmallCopy elements, a reorder.
constexpr double kSmallWork = 1 << 20;
constexpr double kSmallCopy = 1 << 16;

memory::dims dims_of(const Shape& s) {
  memory::dims d;
  for (std::int32_t i = 0; i < s.rank(); ++i) d.push_back(s[i]);
  return d;
}

std::int64_t product(const Shape& s, std::int32_t begin, std::int32_t end) {
  std::int64_t n = 1;
  for (std::int32_t i = begin; i < end; ++i) n *= s[i];
  return n;
}

// The row-major format of a rank (1 to 6).
tag plain_tag(std::size_t rank) {
  switch (rank) {
    case 1: return tag::a;
    case 2: return tag::ab;
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    case 6: return tag::abcdef;
    default: throw BlobError("rank " + std::to_string(rank) + " is not supported (1 to 6)");
  }
}

memory::desc plain_md(const memory::dims& d) { return memory::desc(d, dt::f32, plain_tag(d.size())); }

std::string shape_str(const memory::dims& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

// Where a buffer's bytes are during one run.
struct Slot {
  enum Where : std::uint8_t { INPUT, OUTPUT, ARENA, CONSTANT } where = ARENA;
  std::size_t index = 0;  // input / output / constant index, or the arena byte offset
};

// One tensor held in one memory format.
struct Buffer {
  std::uint32_t tensor = 0;
  memory::desc md;
  Slot slot;
};

struct Arg {
  int arg = 0;          // DNNL_ARG_*
  std::size_t buffer = 0;
  memory::desc md;      // how the step reads the buffer (a reshape of its format, for dense and norms)
};

struct Step {
  dnnl::primitive prim;
  std::vector<Arg> args;
  // host work between primitives instead (prim and args unused): the run's buffer pointers
  std::function<void(const std::vector<void*>&, dnnl::stream&)> host;
  std::vector<std::size_t> uses;  // the buffers host work reads or writes (for the arena's plan)
  int threads = 0;                 // its primitives' thread count, when not the runtime's (0)
};

// (x - mean) / sqrt(var + eps) * gamma + beta over one row, as the reference computes it (float32
// data, mean and variance of the centred values), with float64 sums.
void normalize_row(const float* x, float* y, std::size_t n, float gamma, float beta, float eps) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::size_t i = 0; i < n; ++i) sum += x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  double sq = 0;
#pragma omp simd reduction(+ : sq)
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i] - mean);
    sq += d * d;
  }
  const float var = static_cast<float>(sq / static_cast<double>(n));
  const float scale = gamma / std::sqrt(var + eps);
  for (std::size_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * scale + beta;
}

// Owned float32 data, 64-byte aligned (oneDNN's preference; numpy's buffers need not be).
struct Aligned {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data;
  std::size_t count = 0;

  explicit Aligned(std::size_t n) : count(n) {
    const std::size_t bytes = std::max<std::size_t>(kAlign, (n * sizeof(float) + kAlign - 1) / kAlign * kAlign);
    data.reset(static_cast<float*>(std::aligned_alloc(kAlign, bytes)));
    if (!data) throw std::bad_alloc();
  }
};

// The per-thread scratch memory of run(): grown to the largest arena any runtime asked
// of this thread, kept between calls (a run never nests inside another).
struct Arena {
  std::unique_ptr<std::uint8_t, Aligned::Free> data;
  std::size_t size = 0;

  std::uint8_t* get(std::size_t bytes) {
    if (bytes > size) {
      data.reset();
      const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
      data.reset(static_cast<std::uint8_t*>(std::aligned_alloc(kAlign, rounded)));
      if (!data) {
        size = 0;
        throw std::bad_alloc();
      }
      size = rounded;
    }
    return data.get();
  }
};

class BnnsRuntime {
 public:
  static std::unique_ptr<BnnsRuntime> create(BlobReader& blob, const accel_sdk::RuntimeOptions& options) {
    auto rt = std::unique_ptr<BnnsRuntime>(new BnnsRuntime());
    blob.expect_magic("BNNS");
    blob.expect_version(kVersion, kVersion);
    // blobs written before the count was chosen at load time carry one here: read, checked, ignored
    blob.read_in_range<std::uint32_t>(0, kMaxThreads, "num_threads");
    rt->threads_ = options.threads;
    const std::uint64_t size = blob.read<std::uint64_t>("graph_size");
    blob.align(kHeaderSize, "header padding");
    if (size > blob.remaining()) blob.fail("graph blob: needs " + std::to_string(size) + " bytes, " + std::to_string(blob.remaining()) + " left");
    const std::uint8_t* body = blob.read_bytes(static_cast<std::size_t>(size), "graph blob");
    blob.expect_end();
    BlobReader graph(body, static_cast<std::size_t>(size));
    GraphBlob g = GraphBlob::parse(graph, {"bnns", 1, 1});
    onednn::ThreadScope scope(rt->threads_);
    rt->build(g);
    return rt;
  }

  int threads() const { return threads_; }

  void run(const std::vector<TensorView>& inputs, std::vector<TensorView>& outputs) const {
    accel_sdk::check_tensors("input", inputs, in_specs_);
    accel_sdk::check_tensors("output", outputs, out_specs_);
    onednn::ThreadScope scope(threads_);
    thread_local Arena arena;
    std::uint8_t* base = arena.get(arena_bytes_);
    std::vector<void*> where(buffers_.size());
    for (std::size_t b = 0; b < buffers_.size(); ++b) {
      const Slot& s = buffers_[b].slot;
      switch (s.where) {
        case Slot::INPUT: where[b] = inputs[s.index].data(); break;
        case Slot::OUTPUT: where[b] = outputs[s.index].data(); break;
        case Slot::ARENA: where[b] = base + s.index; break;
        case Slot::CONSTANT: where[b] = const_ptrs_[s.index]; break;
      }
    }
    onednn::guard("run", [&] {
      dnnl::stream stream(onednn::engine());
      std::unordered_map<int, memory> args;
      for (const Step& step : steps_) {
        std::optional<onednn::ThreadScope> narrow;  // as the step's primitives were created
        if (step.threads != 0 && step.threads != threads_) narrow.emplace(step.threads);
        if (step.host) {
          stream.wait();
          step.host(where, stream);
          continue;
        }
        args.clear();
        for (const Arg& a : step.args) args.emplace(a.arg, memory(a.md, onednn::engine(), where[a.buffer]));
        step.prim.execute(stream, args);
      }
      stream.wait();
    });
  }

 private:
  BnnsRuntime() = default;


  // -- planning ---------------------------------------------------------------------------
  void build(const GraphBlob& g) {
    g_ = &g;
    held_.assign(g.tensors().size(), kNone);
    scratch_ = add_buffer(0, memory::desc(), {Slot::ARENA, 0});  // placed after everything else
    // the tensors kernels read and write (a composite's parts keep the rest, which bnns does not read)
    std::vector<std::uint32_t> used(g.inputs().begin(), g.inputs().end());
    used.insert(used.end(), g.outputs().begin(), g.outputs().end());
    for (const GraphNode& n : g.nodes()) {
      used.insert(used.end(), n.inputs.begin(), n.inputs.end());
      used.insert(used.end(), n.outputs.begin(), n.outputs.end());
    }
    for (std::uint32_t id : used) {
      const GraphTensor& t = g.tensor(id);
      if (t.spec.dtype != ACCEL_FLOAT32) {
        throw BlobError("tensor '" + t.name + "' is " + accel_sdk::dtype_name(t.spec.dtype) + ": bnns computes float32 only");
      }
      if (t.spec.shape.rank() < 1 || t.spec.shape.rank() > 6) {
        throw BlobError("tensor '" + t.name + "' has rank " + std::to_string(t.spec.shape.rank()) + ": bnns takes ranks 1 to 6");
      }
      for (std::int32_t i = 0; i < t.spec.shape.rank(); ++i) {
        if (t.spec.shape[i] < 1) throw BlobError("tensor '" + t.name + "' is empty (shape " + t.spec.shape.str() + ")");
      }
    }
    for (std::size_t k = 0; k < g.inputs().size(); ++k) {
      const std::uint32_t t = g.inputs()[k];
      if (held_[t] == kNone) held_[t] = add_buffer(t, plain_md(dims(t)), {Slot::INPUT, k});
    }
    in_specs_ = g.input_specs();
    out_specs_ = g.output_specs();
    output_of_.assign(g.tensors().size(), kNone);
    for (std::size_t k = 0; k < g.outputs().size(); ++k) {
      const std::uint32_t t = g.outputs()[k];
      if (output_of_[t] == kNone) output_of_[t] = k;
    }
    for (const GraphNode& n : g.nodes()) {
      if (n.outputs.size() != 1) n.fail("has " + std::to_string(n.outputs.size()) + " outputs, expected 1");
      if (n.kernel == "conv2d") {
        conv2d(n);
      } else if (n.kernel == "dense") {
        dense(n);
      } else if (n.kernel == "batch_matmul") {
        batch_matmul(n);
      } else if (n.kernel == "pool2d") {
        pool2d(n);
      } else if (n.kernel == "instance_norm") {
        instance_norm(n);
      } else {
        n.fail("unknown kernel (bnns runs conv2d, dense, batch_matmul, pool2d, instance_norm)");
      }
    }
    // every graph output ends in the caller's buffer, in plain layout
    for (std::size_t k = 0; k < g.outputs().size(); ++k) {
      const std::uint32_t t = g.outputs()[k];
      const Buffer& src = buffers_[held_[t]];
      if (src.slot.where == Slot::OUTPUT && src.slot.index == k) continue;
      const std::size_t dst = add_buffer(t, plain_md(dims(t)), {Slot::OUTPUT, k});
      add_reorder(held_[t], dst);
    }
    plan_arena();
    g_ = nullptr;
  }

  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  memory::dims dims(std::uint32_t t) const { return dims_of(g_->tensor(t).spec.shape); }

  std::size_t add_buffer(std::uint32_t t, const memory::desc& md, Slot slot) {
    buffers_.push_back({t, md, slot});
    return buffers_.size() - 1;
  }

  // A buffer in the arena; its offset is planned when every step is known (plan_arena).
  std::size_t arena_buffer(std::uint32_t t, const memory::desc& md) { return add_buffer(t, md, {Slot::ARENA, 0}); }

  // Offsets for the arena's buffers: each lives from the first step using it to the last, and
  // buffers whose lives do not overlap share memory (first fit, in step order). The shared
  // scratchpad goes after them all.
  void plan_arena() {
    const std::size_t n = buffers_.size();
    std::vector<std::size_t> first(n, kNone), last(n, 0);
    for (std::size_t s = 0; s < steps_.size(); ++s) {
      auto touch = [&](std::size_t b) {
        if (first[b] == kNone) first[b] = s;
        last[b] = s;
      };
      for (const Arg& a : steps_[s].args) touch(a.buffer);
      for (std::size_t b : steps_[s].uses) touch(b);
    }
    struct Live {
      std::size_t offset, size, until;
    };
    std::vector<Live> live;  // sorted by offset
    std::size_t total = 0;
    for (std::size_t s = 0; s < steps_.size(); ++s) {
      live.erase(std::remove_if(live.begin(), live.end(), [&](const Live& l) { return l.until < s; }), live.end());
      for (std::size_t b = 0; b < n; ++b) {
        if (b == scratch_ || buffers_[b].slot.where != Slot::ARENA || first[b] != s) continue;
        const std::size_t size = (buffers_[b].md.get_size() + kAlign - 1) / kAlign * kAlign;
        std::size_t at = 0;
        auto it = live.begin();
        for (; it != live.end(); ++it) {
          if (it->offset >= at + size) break;  // the gap before this one fits
          at = std::max(at, it->offset + it->size);
        }
        live.insert(it, {at, size, last[b]});
        buffers_[b].slot.index = at;
        total = std::max(total, at + size);
      }
    }
    buffers_[scratch_].slot.index = total;
    arena_bytes_ = total + (scratch_bytes_ + kAlign - 1) / kAlign * kAlign;
  }

  // Where a kernel writes tensor t in format md: the caller's output buffer when t is a
  // graph output and md is its plain layout, else the arena.
  std::size_t output_buffer(std::uint32_t t, const memory::desc& md) {
    std::size_t b;
    if (output_of_[t] != kNone && md == plain_md(dims(t))) {
      b = add_buffer(t, md, {Slot::OUTPUT, output_of_[t]});
    } else {
      b = arena_buffer(t, md);
    }
    held_[t] = b;
    return b;
  }

  void add_reorder(std::size_t from, std::size_t to) {
    const memory::desc& src = buffers_[from].md;
    const memory::desc& dst = buffers_[to].md;
    const int nthr = threads_for(dst.get_size() / sizeof(float), kSmallCopy);
    onednn::ThreadScope narrow(nthr);
    auto pd = onednn::guard("reorder create", [&] {
      return dnnl::reorder::primitive_desc(onednn::engine(), src, onednn::engine(), dst, user_scratchpad());
    });
    add_step<dnnl::reorder>(pd, {{DNNL_ARG_FROM, from, src}, {DNNL_ARG_TO, to, dst}}, nthr);
  }

  // Tensor t (an activation or a constant) in format md: as held, or reordered once into it.
  std::size_t get(std::uint32_t t, const memory::desc& md) {
    if (held_[t] == kNone) {
      const GraphTensor& gt = g_->tensor(t);
      if (!gt.constant()) throw BlobError("tensor '" + gt.name + "' is read before it is written");
      held_[t] = add_buffer(t, plain_md(dims(t)), {Slot::CONSTANT, copy_constant(gt)});
    }
    if (buffers_[held_[t]].md == md) return held_[t];
    for (const auto& [tensor, b] : variants_) {
      if (tensor == t && buffers_[b].md == md) return b;
    }
    const std::size_t b = arena_buffer(t, md);
    add_reorder(held_[t], b);
    variants_.emplace_back(t, b);
    return b;
  }

  std::size_t copy_constant(const GraphTensor& t) {
    Aligned a(t.spec.shape.elements());
    std::memcpy(a.data.get(), t.data, t.nbytes);
    return keep(std::move(a));
  }

  // Owns a, returns its constant slot.
  std::size_t keep(Aligned a) {
    const_ptrs_.push_back(a.data.get());
    constants_.push_back(std::move(a));
    return const_ptrs_.size() - 1;
  }

  const GraphTensor& constant_input(const GraphNode& n, std::size_t i, const char* what) const {
    const GraphTensor& t = g_->tensor(n.inputs[i]);
    if (!t.constant()) n.fail(std::string(what) + " '" + t.name + "' must be a constant");
    return t;
  }

  static void expect_shape(const GraphNode& n, const GraphTensor& t, const memory::dims& want, const char* what) {
    if (dims_of(t.spec.shape) != want) {
      n.fail(std::string(what) + " '" + t.name + "' has shape " + t.spec.shape.str() + ", expected " + shape_str(want));
    }
  }

  static void expect_inputs(const GraphNode& n, std::size_t lo, std::size_t hi) {
    if (n.inputs.size() < lo || n.inputs.size() > hi) {
      n.fail("has " + std::to_string(n.inputs.size()) + " inputs, expected " + std::to_string(lo) +
             (hi != lo ? " to " + std::to_string(hi) : std::string()));
    }
  }

  static std::int64_t checked_int(const GraphNode& n, std::int64_t v, std::int64_t lo, std::int64_t hi, const char* what) {
    if (v < lo || v > hi) n.fail(std::string(what) + " " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return v;
  }

  // Every primitive takes its scratchpad from the run's arena: oneDNN's own (library mode) is
  // shared by the threads that run one primitive at once (gemm convolutions crashed in im2col).
  static dnnl::primitive_attr user_scratchpad() {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
  }

  // A step of primitive pd, its arguments and the shared scratchpad.
  template <class P, class PD>
  void add_step(const PD& pd, std::vector<Arg> args, int threads = -1) {
    const memory::desc sp = pd.scratchpad_desc();
    scratch_bytes_ = std::max(scratch_bytes_, sp.get_size());
    args.push_back({DNNL_ARG_SCRATCHPAD, scratch_, sp});
    steps_.push_back({P(pd), std::move(args), {}, {}, threads < 0 ? step_threads_ : threads});
  }

  // Threads for a step of `work` operations: one below `small` (forking the team costs more
  // than it saves there, and far more on a loaded machine), else the runtime's. Primitives are
  // created and run with the same count.
  int threads_for(double work, double small = kSmallWork) const { return work < small ? 1 : threads_; }

  // The kernel being planned runs its primitives with threads_for(work) threads.
  int narrow_to(double work) {
    step_threads_ = threads_for(work);
    return step_threads_;
  }

  // The node's activation, fused into its layer (accel_sdk keeps NaN through it, as the reference).
  static std::vector<onednn::PostOp> activation(const GraphNode& n) {
    const std::string& act = n.attrs.string("activation");
    if (act == "none") return {};
    if (act == "relu") return {onednn::PostOp::relu()};
    if (act == "sigmoid") return {onednn::PostOp::sigmoid()};
    if (act == "gelu_tanh") return {onednn::PostOp::gelu_tanh()};
    if (act == "gelu_erf") return {onednn::PostOp::gelu_erf()};
    n.fail("activation '" + act + "' is not one of none, relu, sigmoid, gelu_tanh, gelu_erf");
  }

  // make() (an accel_sdk layer) as a shared constant; oneDNN's refusal names the node.
  template <class Op, class Make>
  static std::shared_ptr<const Op> create(const GraphNode& n, const Make& make) {
    try {
      return std::make_shared<const Op>(make());
    } catch (const onednn::Error& e) {
      n.fail(e.what());
    }
  }

  // A host step running f(stream, src, dst) on the float32 buffers src -> dst, with the threads
  // of the kernel being planned.
  template <class F>
  void add_host_step(F f, std::size_t src, std::size_t dst) {
    Step step;
    step.host = [f, src, dst](const std::vector<void*>& where, dnnl::stream& stream) {
      f(stream, static_cast<const float*>(where[src]), static_cast<float*>(where[dst]));
    };
    step.uses = {src, dst};
    step.threads = step_threads_;
    steps_.push_back(std::move(step));
  }

  // A host step running `op` (accel_sdk's FloatConv or FloatDense) on buffers src -> dst.
  template <class Op>
  void add_layer(std::shared_ptr<const Op> op, std::size_t src, std::size_t dst) {
    add_host_step([op](dnnl::stream& s, const float* x, float* y) { op->execute(s, x, y); }, src, dst);
  }

  // -- kernels ----------------------------------------------------------------------------
  void conv2d(const GraphNode& n) {
    expect_inputs(n, 2, 3);
    const GraphTensor& x = g_->tensor(n.inputs[0]);
    const GraphTensor& w = constant_input(n, 1, "weight");
    const GraphTensor& y = g_->tensor(n.outputs[0]);
    if (x.spec.shape.rank() != 4 || w.spec.shape.rank() != 4) n.fail("data and weight must be 4-D (NCHW, OIHW)");
    const auto& st = n.attrs.ints("strides", 2);
    const auto& dil = n.attrs.ints("dilation", 2);
    const auto& pad = n.attrs.ints("padding", 4);
    const std::int64_t groups = checked_int(n, n.attrs.integer("groups"), 1, x.spec.shape[1], "groups");
    const std::int64_t N = x.spec.shape[0], C = x.spec.shape[1], H = x.spec.shape[2], W = x.spec.shape[3];
    const std::int64_t O = w.spec.shape[0], KH = w.spec.shape[2], KW = w.spec.shape[3];
    if (C % groups != 0 || O % groups != 0 || w.spec.shape[1] != C / groups) {
      n.fail("weight " + w.spec.shape.str() + " does not fit " + std::to_string(C) + " input channels in " +
             std::to_string(groups) + " groups");
    }
    accel_sdk::geometry::Window2d win{KH, KW, st[0], st[1], dil[0], dil[1], pad[0], pad[1], pad[2], pad[3]};
    accel_sdk::geometry::Conv2dGeometry geo;
    try {
      geo = accel_sdk::geometry::conv2d(H, W, win);
    } catch (const std::exception& e) {
      n.fail(e.what());
    }
    expect_shape(n, y, {N, O, geo.oh, geo.ow}, "output");
    const bool has_bias = n.inputs.size() == 3;
    if (has_bias) expect_shape(n, constant_input(n, 2, "bias"), {O}, "bias");

    onednn::FloatConvSpec spec;
    spec.shape.batch = N;
    spec.shape.in_h = H;
    spec.shape.in_w = W;
    spec.shape.in_channels = C;
    spec.shape.out_channels = O;
    spec.shape.groups = groups;
    spec.shape.window = win;
    spec.weights = reinterpret_cast<const float*>(w.data);
    spec.weight_layout = onednn::WeightLayout::oihw;
    spec.bias = has_bias ? reinterpret_cast<const float*>(g_->tensor(n.inputs[2]).data) : nullptr;
    spec.post_ops = activation(n);
    const int threads = narrow_to(double(N) * O * geo.oh * geo.ow * (C / groups) * KH * KW);
    // its own formats (format_tag::any), weights packed into them once
    const auto conv = create<onednn::FloatConv>(n, [&] { return onednn::FloatConv(spec, threads); });
    const std::size_t src = get(n.inputs[0], conv->src_desc());
    add_layer(conv, src, output_buffer(n.outputs[0], conv->dst_desc()));
  }

  void dense(const GraphNode& n) {
    expect_inputs(n, 2, 3);
    const GraphTensor& x = g_->tensor(n.inputs[0]);
    const GraphTensor& w = constant_input(n, 1, "weight");
    const GraphTensor& y = g_->tensor(n.outputs[0]);
    if (w.spec.shape.rank() != 2) n.fail("weight '" + w.name + "' must be 2-D [N, K], got " + w.spec.shape.str());
    const std::int32_t r = x.spec.shape.rank();
    const std::int64_t K = x.spec.shape[r - 1], N = w.spec.shape[0];
    const std::int64_t M = product(x.spec.shape, 0, r - 1);
    if (w.spec.shape[1] != K) n.fail("weight " + w.spec.shape.str() + " does not take " + std::to_string(K) + " features");
    memory::dims want = dims_of(x.spec.shape);
    want.back() = N;
    expect_shape(n, y, want, "output");
    const bool has_bias = n.inputs.size() == 3;
    if (has_bias) expect_shape(n, constant_input(n, 2, "bias"), {N}, "bias");

    onednn::FloatDenseSpec spec;
    spec.m = M;
    spec.k = K;
    spec.n = N;
    spec.weights = reinterpret_cast<const float*>(w.data);
    spec.bias = has_bias ? reinterpret_cast<const float*>(g_->tensor(n.inputs[2]).data) : nullptr;
    spec.post_ops = activation(n);
    const int threads = narrow_to(double(M) * N * K);
    const auto dense = create<onednn::FloatDense>(n, [&] { return onednn::FloatDense(spec, threads); });
    const std::size_t src = get(n.inputs[0], plain_md(dims(n.inputs[0])));  // read as [M, K]
    add_layer(dense, src, output_buffer(n.outputs[0], plain_md(dims(n.outputs[0]))));
  }

  void batch_matmul(const GraphNode& n) {
    expect_inputs(n, 2, 2);
    const GraphTensor& a = g_->tensor(n.inputs[0]);
    const GraphTensor& b = g_->tensor(n.inputs[1]);
    const GraphTensor& y = g_->tensor(n.outputs[0]);
    if (a.spec.shape.rank() != 3 || b.spec.shape.rank() != 3) n.fail("inputs must be 3-D");
    const bool ta = n.attrs.boolean("transpose_a"), tb = n.attrs.boolean("transpose_b");
    const std::int64_t Ba = a.spec.shape[0], Bb = b.spec.shape[0];
    const std::int64_t M = ta ? a.spec.shape[2] : a.spec.shape[1], K = ta ? a.spec.shape[1] : a.spec.shape[2];
    const std::int64_t N = tb ? b.spec.shape[1] : b.spec.shape[2], Kb = tb ? b.spec.shape[2] : b.spec.shape[1];
    if (K != Kb) n.fail("inner dimensions differ: " + a.spec.shape.str() + " and " + b.spec.shape.str());
    if (Ba != Bb && Ba != 1 && Bb != 1) n.fail("batch sizes " + std::to_string(Ba) + " and " + std::to_string(Bb) + " do not broadcast");
    const std::int64_t B = std::max(Ba, Bb);
    expect_shape(n, y, {B, M, N}, "output");
    onednn::ThreadScope narrow(narrow_to(double(B) * M * N * K));
    // transposes as strides over the stored row-major tensors
    const memory::desc a_md({Ba, M, K}, dt::f32, ta ? memory::dims{K * M, 1, M} : memory::dims{M * K, K, 1});
    const memory::desc b_md({Bb, K, N}, dt::f32, tb ? memory::dims{N * K, 1, K} : memory::dims{K * N, N, 1});
    const memory::desc dst_md({B, M, N}, dt::f32, tag::abc);
    auto pd = onednn::guard("batch_matmul '" + n.name + "' create", [&] {
      return dnnl::matmul::primitive_desc(onednn::engine(), a_md, b_md, dst_md, user_scratchpad());
    });
    std::vector<Arg> args;
    args.push_back({DNNL_ARG_SRC, get(n.inputs[0], plain_md(dims(n.inputs[0]))), a_md});
    args.push_back({DNNL_ARG_WEIGHTS, get(n.inputs[1], plain_md(dims(n.inputs[1]))), b_md});
    args.push_back({DNNL_ARG_DST, output_buffer(n.outputs[0], dst_md), dst_md});
    add_step<dnnl::matmul>(pd, std::move(args));
  }

  void pool2d(const GraphNode& n) {
    expect_inputs(n, 1, 1);
    const GraphTensor& x = g_->tensor(n.inputs[0]);
    const GraphTensor& y = g_->tensor(n.outputs[0]);
    if (x.spec.shape.rank() != 4) n.fail("data must be 4-D (NCHW)");
    const std::string& kind = n.attrs.string("kind");
    if (kind != "max" && kind != "avg") n.fail("kind '" + kind + "' is not max or avg");
    const auto& k = n.attrs.ints("kernel", 2);
    const auto& st = n.attrs.ints("strides", 2);
    const auto& dil = n.attrs.ints("dilation", 2);
    const auto& pad = n.attrs.ints("padding", 4);
    const bool include = n.attrs.boolean("count_include_pad");
    const std::int64_t N = x.spec.shape[0], C = x.spec.shape[1], H = x.spec.shape[2], W = x.spec.shape[3];
    accel_sdk::geometry::Window2d win{k[0], k[1], st[0], st[1], dil[0], dil[1], pad[0], pad[1], pad[2], pad[3]};
    accel_sdk::geometry::Conv2dGeometry geo;
    try {
      geo = accel_sdk::geometry::conv2d(H, W, win);  // the padding holds the ceil-mode overhang: floor sizes
    } catch (const std::exception& e) {
      n.fail(e.what());
    }
    if (pad[0] >= (k[0] - 1) * dil[0] + 1 || pad[1] >= (k[1] - 1) * dil[1] + 1) n.fail("padding must be smaller than the window");
    expect_shape(n, y, {N, C, geo.oh, geo.ow}, "output");
    onednn::ThreadScope narrow(narrow_to(double(N) * C * geo.oh * geo.ow * k[0] * k[1]));
    const auto alg = kind == "max" ? dnnl::algorithm::pooling_max
                     : include    ? dnnl::algorithm::pooling_avg_include_padding
                                  : dnnl::algorithm::pooling_avg_exclude_padding;
    const memory::desc dst_any({N, C, geo.oh, geo.ow}, dt::f32, tag::any);
    auto make = [&](const memory::desc& src) {
      return dnnl::pooling_forward::primitive_desc(onednn::engine(), dnnl::prop_kind::forward_inference, alg, src,
                                                   dst_any, {st[0], st[1]}, {k[0], k[1]}, {dil[0] - 1, dil[1] - 1},
                                                   {pad[0], pad[1]}, {pad[2], pad[3]}, user_scratchpad());
    };
    // in the format its producer left it in, if oneDNN pools that format; else planar
    dnnl::pooling_forward::primitive_desc pd;
    try {
      pd = make(buffers_[held_[n.inputs[0]]].md);
    } catch (const dnnl::error&) {
      pd = onednn::guard("pool2d '" + n.name + "' create", [&] { return make(plain_md(dims(n.inputs[0]))); });
    }
    const std::size_t src = get(n.inputs[0], pd.src_desc());
    const std::size_t dst = output_buffer(n.outputs[0], pd.dst_desc());
    add_step<dnnl::pooling_forward>(pd, {{DNNL_ARG_SRC, src, pd.src_desc()}, {DNNL_ARG_DST, dst, pd.dst_desc()}});
    if (kind == "max") {
      // oneDNN's max pooling skips NaN; accel_sdk's MaxPoolNan returns it for the windows holding one
      const onednn::MaxPoolNan fix(pd);
      add_host_step([fix](dnnl::stream& s, const float* x, float* y) { fix.apply(s, x, y); }, src, dst);
    }
  }

  // Statistics per (instance, channel) row, accumulated in float64 (oneDNN's batch normalization,
  // which computes the same with float32 sums, drifts from the reference by 1e-4 on rows whose mean
  // is 100 times their spread); vectorized loops.
  void instance_norm(const GraphNode& n) {
    expect_inputs(n, 3, 3);
    const GraphTensor& x = g_->tensor(n.inputs[0]);
    const GraphTensor& gamma = constant_input(n, 1, "gamma");
    const GraphTensor& beta = constant_input(n, 2, "beta");
    const GraphTensor& y = g_->tensor(n.outputs[0]);
    const std::int32_t r = x.spec.shape.rank();
    if (r != 3 && r != 4) n.fail("data must be of rank 3 or 4");
    const std::int64_t N = x.spec.shape[0], C = x.spec.shape[1], L = product(x.spec.shape, 2, r);
    expect_shape(n, gamma, {C}, "gamma");
    expect_shape(n, beta, {C}, "beta");
    expect_shape(n, y, dims_of(x.spec.shape), "output");
    const double eps = n.attrs.number("epsilon");
    if (!(eps >= 0) || !std::isfinite(eps)) n.fail("epsilon must be a finite non-negative number");
    const memory::desc md = plain_md(dims(n.inputs[0]));
    const std::size_t src = get(n.inputs[0], md);
    const std::size_t dst = output_buffer(n.outputs[0], md);
    const std::size_t g = copy_constant(gamma), b = copy_constant(beta);
    const float* gamma_p = static_cast<const float*>(const_ptrs_[g]);
    const float* beta_p = static_cast<const float*>(const_ptrs_[b]);
    const float epsilon = static_cast<float>(eps);
    Step step;
    step.host = [=](const std::vector<void*>& where, dnnl::stream&) {
      const float* xp = static_cast<const float*>(where[src]);
      float* yp = static_cast<float*>(where[dst]);
      for (std::size_t row = 0; row < static_cast<std::size_t>(N * C); ++row) {
        const std::size_t c = row % static_cast<std::size_t>(C), off = row * static_cast<std::size_t>(L);
        normalize_row(xp + off, yp + off, static_cast<std::size_t>(L), gamma_p[c], beta_p[c], epsilon);
      }
    };
    step.uses = {src, dst};
    steps_.push_back(std::move(step));
  }

  const GraphBlob* g_ = nullptr;  // during create only
  int threads_ = 1;
  std::vector<TensorSpec> in_specs_, out_specs_;
  std::vector<std::size_t> held_;       // tensor -> the buffer holding it as produced
  std::vector<std::size_t> output_of_;  // tensor -> the first graph output index it is, or kNone
  std::vector<std::pair<std::uint32_t, std::size_t>> variants_;  // (tensor, buffer) reordered copies
  std::vector<Buffer> buffers_;
  std::vector<Step> steps_;
  std::vector<Aligned> constants_;
  std::vector<void*> const_ptrs_;  // constant slot -> its data
  std::size_t arena_bytes_ = 0;
  int step_threads_ = 0;           // threads of the kernel being planned (narrow_to)
  std::size_t scratch_ = 0;        // the buffer of every primitive's scratchpad
  std::size_t scratch_bytes_ = 0;  // the largest scratchpad
};

}  // namespace

ACCEL_SDK_RUNTIME_MODULE(_runtime, "bnns", BnnsRuntime)

// The bnns runtime: BNNS's operator contract (float32, planar NCHW at the partition
// boundary, constant weights) computed on this host through oneDNN.
//
// accel_sdk::GraphRuntime does what every graph-blob backend does: it validates the graph
// blob, plans one arena for the intermediates by liveness, lends each concurrent run an
// arena of its own, binds the caller's buffers and applies the thread count chosen at load
// time. What is bnns's is here: the 64-byte header around the graph blob (README.md), one
// kernel per node, and the formats tensors are held in. Convolutions choose their own
// memory formats (format_tag::any; weights reordered into them once, at create; on a handle
// of several threads NHWC, for bands of output rows on accel_sdk's pool) and pools
// take the format they are given where oneDNN pools it, so a tensor stays in the format its
// producer chose while its consumers accept it and a chain of layers reorders only at the
// partition's entry and exit: a kernel reorders an input held in another format into its
// scratch, and writes a graph output plain into the caller's buffer.
#include <accel_sdk/arena.hpp>
#include <accel_sdk/blob_reader.hpp>
#include <accel_sdk/float_ops.hpp>
#include <accel_sdk/geometry.hpp>
#include <accel_sdk/graph_blob.hpp>
#include <accel_sdk/graph_runtime.hpp>
#include <accel_sdk/onednn.hpp>
#include <accel_sdk/pool.hpp>
#include <accel_sdk/runtime.hpp>
#include <accel_sdk/tensor.hpp>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

namespace onednn = accel_sdk::onednn;
using accel_sdk::BlobError;
using accel_sdk::BlobReader;
using accel_sdk::GraphBlob;
using accel_sdk::GraphTensor;
using accel_sdk::Shape;
using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using Kernel = accel_sdk::Kernel<onednn::Call>;
using Exec = Kernel::Exec;
using Ctx = accel_sdk::NodeContext;

constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderSize = 64;  // serializer.py: HEADER_SIZE
constexpr std::uint32_t kKindVersion = 1;
// Reorders of fewer elements run on one thread (kernels: below accel_sdk::kSmallWork operations).
constexpr double kSmallCopy = 1 << 16;

memory::dims dims_of(const Shape& s) { return memory::dims(s.dims(), s.dims() + s.rank()); }

// The row-major format of a tensor (rank 1 to 6: Formats checks).
memory::desc plain_md(const GraphTensor& t) {
  static const tag tags[] = {tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde, tag::abcdef};
  return memory::desc(dims_of(t.spec.shape), dt::f32, tags[t.spec.shape.rank() - 1]);
}

std::int64_t product(const Shape& s, std::int32_t begin, std::int32_t end) {
  std::int64_t n = 1;
  for (std::int32_t i = begin; i < end; ++i) n *= s[i];
  return n;
}

std::string shape_str(const memory::dims& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

void expect_shape(const Ctx& c, const GraphTensor& t, const memory::dims& want, const char* what) {
  if (dims_of(t.spec.shape) != want) {
    c.fail(std::string(what) + " '" + t.name + "' has shape " + t.spec.shape.str() + ", expected " + shape_str(want));
  }
}

// A window's output size (geometry's checks; the padding holds a ceil-mode overhang).
accel_sdk::geometry::Conv2dGeometry window(const Ctx& c, std::int64_t h, std::int64_t w, const accel_sdk::geometry::Window2d& win) {
  try {
    return accel_sdk::geometry::conv2d(h, w, win);
  } catch (const std::exception& e) {
    c.fail(e.what());
  }
}

// Every primitive takes its scratchpad from the run's arena.
using onednn::user_scratchpad;

// The format each tensor is held in while the kernels are made, in node order: graph inputs
// and constants plain, an intermediate in the format its producer wrote it, a graph output
// plain (it is the caller's buffer).
class Formats {
 public:
  bool started() const { return started_; }

  // Checks every tensor a kernel reads or writes: float32 of rank 1 to 6, none empty (a
  // composite's parts keep the rest, which bnns does not read).
  void start(const GraphBlob& g) {
    started_ = true;
    held_.resize(g.tensors().size());
    std::vector<std::uint32_t> used(g.inputs().begin(), g.inputs().end());
    used.insert(used.end(), g.outputs().begin(), g.outputs().end());
    for (const auto& n : g.nodes()) {
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
      if (t.spec.shape.elements() == 0) throw BlobError("tensor '" + t.name + "' is empty (shape " + t.spec.shape.str() + ")");
      held_[id] = plain_md(t);
    }
  }

  const memory::desc& held(std::uint32_t id) const { return held_.at(id); }

  // The node's output computed in `made`: the format it is held in from now on.
  const memory::desc& produce(const Ctx& c, const memory::desc& made) {
    const std::uint32_t id = c.n.outputs[0];
    if (!c.graph_output(id)) held_[id] = made;
    return held_[id];
  }

 private:
  bool started_ = false;
  std::vector<memory::desc> held_;
};

// A reorder of one tensor between two formats, made once for the threads it runs with; its
// scratchpad is the caller's.
class Reorder {
 public:
  Reorder() = default;
  Reorder(const memory::desc& from, const memory::desc& to, int threads) : from_(from), to_(to), threads_(threads) {
    onednn::ThreadScope scope(threads_);
    const auto pd = onednn::guard("reorder create", [&] {
      return dnnl::reorder::primitive_desc(onednn::engine(), from, onednn::engine(), to, user_scratchpad());
    });
    prim_ = dnnl::reorder(pd);
    scratch_ = pd.scratchpad_desc();
    on_ = true;
  }

  explicit operator bool() const { return on_; }
  std::size_t scratch_bytes() const { return scratch_.get_size(); }

  void execute(dnnl::stream& stream, const void* from, void* to, std::uint8_t* scratch) const {
    onednn::ThreadScope scope(threads_);
    const memory a = onednn::thread_memory(onednn::kSrcMemory, from_, from);
    const memory b = onednn::thread_memory(onednn::kDstMemory, to_, to);
    const memory pad = scratch_.get_size() ? onednn::thread_memory(onednn::kScratchMemory, scratch_, scratch) : memory();
    onednn::execute(prim_, stream,
                    {{DNNL_ARG_FROM, &a}, {DNNL_ARG_TO, &b}, {DNNL_ARG_SCRATCHPAD, scratch_.get_size() ? &pad : nullptr}});
  }

 private:
  memory::desc from_, to_, scratch_;
  dnnl::reorder prim_;
  int threads_ = 1;
  bool on_ = false;
};

// What every bnns kernel shares: it reads each input in the format it computes in (reordered
// into its scratch where the tensor is held in another), writes its output in its own format
// (through its scratch and a reorder when that output is a graph output held plain), and
// runs on the threads its primitives were made for (threads_for its work).
class BnnsKernel : public Kernel {
 public:
  void run(Exec& e) const final {
    onednn::ThreadScope scope(threads_);
    dnnl::stream& stream = e.call.stream();
    std::array<const void*, kMaxInputs> src{};
    for (std::size_t i = 0; i < ins.size(); ++i) {
      src[i] = e.in(i);
      if (in_[i].reorder) {
        in_[i].reorder.execute(stream, src[i], e.scratch + in_[i].at, e.scratch + reorder_scratch_at_);
        src[i] = e.scratch + in_[i].at;
      }
    }
    void* dst = out_.reorder ? e.scratch + out_.at : e.out(0);
    compute(e, src.data(), dst, e.scratch + own_at_);
    if (out_.reorder) out_.reorder.execute(stream, dst, e.out(0), e.scratch + reorder_scratch_at_);
  }

 protected:
  static constexpr std::size_t kMaxInputs = 3;

  // The kernel proper: its inputs (ins) and output in the formats it asked for, its own scratch.
  virtual void compute(Exec& e, const void* const* src, void* dst, std::uint8_t* scratch) const = 0;

  // Node input i, read in format `want`.
  void input(const Ctx& c, const Formats& f, std::size_t i, const memory::desc& want) {
    if (ins.size() == kMaxInputs) c.fail("reads more than " + std::to_string(kMaxInputs) + " inputs");
    const std::uint32_t id = c.n.inputs.at(i);
    ins.push_back(id);
    in_.emplace_back();
    const memory::desc& held = f.held(id);
    if (held != want) {
      in_.back().reorder = Reorder(held, want, c.threads_for(want.get_size() / sizeof(float), kSmallCopy));
      in_.back().bytes = want.get_size();
    }
  }

  // The node's output, computed in format `made`.
  void output(const Ctx& c, Formats& f, const memory::desc& made) {
    outs = {c.n.outputs[0]};
    const memory::desc& held = f.produce(c, made);
    if (held != made) {
      out_.reorder = Reorder(made, held, c.threads_for(held.get_size() / sizeof(float), kSmallCopy));
      out_.bytes = made.get_size();
    }
    out_bytes = {held.get_size()};
  }

  // After input() and output(): the scratch, the reordered tensors first, then `own` bytes.
  void finish(std::size_t own) {
    std::size_t at = 0, reorder_scratch = 0;
    auto place = [&](Port& p) {
      if (!p.reorder) return;
      p.at = at;
      at += accel_sdk::align_up(p.bytes);
      reorder_scratch = std::max(reorder_scratch, p.reorder.scratch_bytes());
    };
    for (Port& p : in_) place(p);
    place(out_);
    reorder_scratch_at_ = at;
    own_at_ = at + accel_sdk::align_up(reorder_scratch);
    scratch_bytes = own_at_ + own;
  }

  int threads_ = 1;

 private:
  struct Port {
    Reorder reorder;  // none: the kernel reads or writes the tensor where it is held
    std::size_t at = 0, bytes = 0;  // in the scratch: the tensor in the kernel's format
  };
  std::vector<Port> in_;
  Port out_;
  std::size_t reorder_scratch_at_ = 0, own_at_ = 0;
};

// The node's activation, fused into its layer (accel_sdk keeps NaN through it, as the reference).
std::vector<onednn::PostOp> activation(const Ctx& c) {
  const std::string& act = c.n.attrs.string("activation");
  if (act == "none") return {};
  if (act == "relu") return {onednn::PostOp::relu()};
  if (act == "sigmoid") return {onednn::PostOp::sigmoid()};
  if (act == "clamp") {  // a clip: BNNS's clamp activation
    const double lo = c.n.attrs.number("act_min"), hi = c.n.attrs.number("act_max");
    if (!(lo <= hi)) c.fail("clamp bounds [" + std::to_string(lo) + ", " + std::to_string(hi) + "] are not ordered");
    return {onednn::PostOp::clip(static_cast<float>(lo), static_cast<float>(hi))};
  }
  if (act == "gelu_tanh") return {onednn::PostOp::gelu_tanh()};
  if (act == "gelu_erf") return {onednn::PostOp::gelu_erf()};
  c.fail("activation '" + act + "' is not one of none, relu, sigmoid, clamp, gelu_tanh, gelu_erf");
}

// The constant float32 bias [n] (input 2), or none.
const float* bias(const Ctx& c, std::int64_t n) {
  if (c.n.inputs.size() != 3) return nullptr;
  const GraphTensor& b = c.in(2);
  c.constant(b, "bias");
  expect_shape(c, b, {n}, "bias");
  return reinterpret_cast<const float*>(b.data);
}

// An accel_sdk layer (FloatConv, FloatDense) made by make(); oneDNN's refusal names the node.
template <class Op, class Make>
std::unique_ptr<const Op> layer(const Ctx& c, const Make& make) {
  try {
    return std::make_unique<const Op>(make());
  } catch (const onednn::Error& e) {
    c.fail(e.what());
  }
}

// conv2d (+ bias, activation): accel_sdk's FloatConv in the formats it chose.
class Conv2d final : public BnnsKernel {
 public:
  Conv2d(const Ctx& c, Formats& f) {
    c.arity(2, 3, 1);
    const GraphTensor& x = c.in(0);
    const GraphTensor& w = c.in(1);
    const GraphTensor& y = c.out(0);
    c.constant(w, "weight");
    if (x.spec.shape.rank() != 4 || w.spec.shape.rank() != 4) c.fail("data and weight must be 4-D (NCHW, OIHW)");
    const auto& st = c.n.attrs.ints("strides", 2);
    const auto& dil = c.n.attrs.ints("dilation", 2);
    const auto& pad = c.n.attrs.ints("padding", 4);
    const std::int64_t N = x.spec.shape[0], C = x.spec.shape[1], H = x.spec.shape[2], W = x.spec.shape[3];
    const std::int64_t groups = c.integer("groups", 1, C);
    const std::int64_t O = w.spec.shape[0], KH = w.spec.shape[2], KW = w.spec.shape[3];
    if (C % groups != 0 || O % groups != 0 || w.spec.shape[1] != C / groups) {
      c.fail("weight " + w.spec.shape.str() + " does not fit " + std::to_string(C) + " input channels in " +
             std::to_string(groups) + " groups");
    }
    const accel_sdk::geometry::Window2d win{KH, KW, st[0], st[1], dil[0], dil[1], pad[0], pad[1], pad[2], pad[3]};
    const auto geo = window(c, H, W, win);
    expect_shape(c, y, {N, O, geo.oh, geo.ow}, "output");
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
    spec.bias = bias(c, O);
    spec.post_ops = activation(c);
    spec.layout = onednn::Layout::nchw;
    const double macs = double(N) * O * geo.oh * geo.ow * (C / groups) * KH * KW;
    threads_ = c.threads_for(macs, accel_sdk::kSmallBandedLayer);
    if (c.threads > 1) {
      // on several threads: NHWC, so that a layer sharing the work runs as bands of output rows
      // on accel_sdk's pool (whose workers stay awake from layer to layer, where an OpenMP team's
      // sleeping member is woken at every layer), and the layers around it keep that format
      spec.bands = true;
      const memory::desc src_md({N, C, H, W}, dt::f32, tag::nhwc);
      const memory::desc dst_md({N, O, geo.oh, geo.ow}, dt::f32, tag::nhwc);
      conv_ = layer<onednn::FloatConv>(c, [&] { return onednn::FloatConv(spec, threads_, &src_md, &dst_md); });
    } else {
      // its own formats (format_tag::any), weights packed into them once
      conv_ = layer<onednn::FloatConv>(c, [&] { return onednn::FloatConv(spec, threads_); });
    }
    input(c, f, 0, conv_->src_desc());
    output(c, f, conv_->dst_desc());
    finish(0);
    bound_ = output_bound(c.n);
    // a convolution of this partition with a clamp or sigmoid writes the input: when its own NaN
    // check found nothing this run, the input is finite and within that bound, and this layer's
    // check (a read of the whole input) is needed only when the bound is past its limit
    if (const accel_sdk::GraphNode* n = c.g.producer(c.n.inputs[0]); n != nullptr && n->kernel == "conv2d") {
      const double b = output_bound(*n);
      skip_when_bounded_ = b >= 0.0 && b <= static_cast<double>(conv_->nan_limit());
    }
  }

 private:
  // The largest magnitude a conv2d node's activation leaves (a clamp's or sigmoid's), -1 for none.
  static double output_bound(const accel_sdk::GraphNode& n) {
    if (!n.attrs.has("activation")) return -1.0;
    const std::string& act = n.attrs.string("activation");
    if (act == "sigmoid") return 1.0;
    if (act == "clamp") return std::max(std::fabs(n.attrs.number("act_min")), std::fabs(n.attrs.number("act_max")));
    return -1.0;
  }

  void compute(Exec& e, const void* const* src, void* dst, std::uint8_t*) const override {
    const bool check = !(skip_when_bounded_ && e.bounded != nullptr && e.bounded[ins[0]] != 0);
    const bool repaired = conv_->execute(e.call.stream(), static_cast<const float*>(src[0]), static_cast<float*>(dst), check);
    if (e.bounded != nullptr) e.bounded[outs[0]] = bound_ >= 0.0 && !repaired ? 1 : 0;
  }
  std::unique_ptr<const onednn::FloatConv> conv_;
  double bound_ = -1.0;
  bool skip_when_bounded_ = false;
};

// dense (+ bias, GELU): accel_sdk's FloatDense over x viewed as [M, K].
class Dense final : public BnnsKernel {
 public:
  Dense(const Ctx& c, Formats& f) {
    c.arity(2, 3, 1);
    const GraphTensor& x = c.in(0);
    const GraphTensor& w = c.in(1);
    const GraphTensor& y = c.out(0);
    c.constant(w, "weight");
    if (w.spec.shape.rank() != 2) c.fail("weight '" + w.name + "' must be 2-D [N, K], got " + w.spec.shape.str());
    const std::int32_t r = x.spec.shape.rank();
    const std::int64_t K = x.spec.shape[r - 1], N = w.spec.shape[0], M = product(x.spec.shape, 0, r - 1);
    if (w.spec.shape[1] != K) c.fail("weight " + w.spec.shape.str() + " does not take " + std::to_string(K) + " features");
    memory::dims want = dims_of(x.spec.shape);
    want.back() = N;
    expect_shape(c, y, want, "output");
    onednn::FloatDenseSpec spec;
    spec.m = M;
    spec.k = K;
    spec.n = N;
    spec.weights = reinterpret_cast<const float*>(w.data);
    spec.bias = bias(c, N);
    spec.post_ops = activation(c);
    spec.bands = true;  // on several threads: blocks on accel_sdk's pool
    threads_ = c.threads_for(double(M) * N * K, accel_sdk::kSmallBandedLayer);
    dense_ = layer<onednn::FloatDense>(c, [&] { return onednn::FloatDense(spec, threads_); });
    input(c, f, 0, plain_md(x));
    output(c, f, plain_md(y));
    finish(0);
  }

 private:
  void compute(Exec& e, const void* const* src, void* dst, std::uint8_t*) const override {
    dense_->execute(e.call.stream(), static_cast<const float*>(src[0]), static_cast<float*>(dst));
  }
  std::unique_ptr<const onednn::FloatDense> dense_;
};

// batch_matmul: oneDNN's matmul, the transposes as strides over the stored row-major tensors.
class BatchMatmul final : public BnnsKernel {
 public:
  BatchMatmul(const Ctx& c, Formats& f) {
    c.arity(2, 2, 1);
    const GraphTensor& a = c.in(0);
    const GraphTensor& b = c.in(1);
    const GraphTensor& y = c.out(0);
    if (a.spec.shape.rank() != 3 || b.spec.shape.rank() != 3) c.fail("inputs must be 3-D");
    const bool ta = c.n.attrs.boolean("transpose_a"), tb = c.n.attrs.boolean("transpose_b");
    const Shape &as = a.spec.shape, &bs = b.spec.shape;
    const std::int64_t Ba = as[0], Bb = bs[0];
    const std::int64_t M = ta ? as[2] : as[1], K = ta ? as[1] : as[2];
    const std::int64_t N = tb ? bs[1] : bs[2], Kb = tb ? bs[2] : bs[1];
    if (K != Kb) c.fail("inner dimensions differ: " + as.str() + " and " + bs.str());
    if (Ba != Bb && Ba != 1 && Bb != 1) c.fail("batch sizes " + std::to_string(Ba) + " and " + std::to_string(Bb) + " do not broadcast");
    const std::int64_t B = std::max(Ba, Bb);
    expect_shape(c, y, {B, M, N}, "output");
    threads_ = c.threads_for(double(B) * M * N * K);
    a_ = memory::desc({Ba, M, K}, dt::f32, ta ? memory::dims{K * M, 1, M} : memory::dims{M * K, K, 1});
    b_ = memory::desc({Bb, K, N}, dt::f32, tb ? memory::dims{N * K, 1, K} : memory::dims{K * N, N, 1});
    y_ = memory::desc({B, M, N}, dt::f32, tag::abc);
    onednn::ThreadScope scope(threads_);
    const auto pd = onednn::guard("batch_matmul '" + c.n.name + "' create", [&] {
      return dnnl::matmul::primitive_desc(onednn::engine(), a_, b_, y_, user_scratchpad());
    });
    prim_ = dnnl::matmul(pd);
    scratch_ = pd.scratchpad_desc();
    input(c, f, 0, plain_md(a));
    input(c, f, 1, plain_md(b));
    output(c, f, plain_md(y));
    finish(scratch_.get_size());
  }

 private:
  void compute(Exec& e, const void* const* src, void* dst, std::uint8_t* scratch) const override {
    const auto& eng = onednn::engine();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(a_, eng, const_cast<void*>(src[0]))},
                                         {DNNL_ARG_WEIGHTS, memory(b_, eng, const_cast<void*>(src[1]))},
                                         {DNNL_ARG_DST, memory(y_, eng, dst)}};
    if (scratch_.get_size()) args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratch_, eng, scratch));
    prim_.execute(e.call.stream(), args);
  }
  memory::desc a_, b_, y_, scratch_;
  dnnl::matmul prim_;
};

// pool2d (max, avg; the global pools are windows of the whole image): accel_sdk's
// onednn::Pool on the format its producer left the input in where oneDNN pools that format,
// else on the planar one.
class Pool2d final : public BnnsKernel {
 public:
  Pool2d(const Ctx& c, Formats& f) {
    c.arity(1, 1, 1);
    const GraphTensor& x = c.in(0);
    const GraphTensor& y = c.out(0);
    if (x.spec.shape.rank() != 4) c.fail("data must be 4-D (NCHW)");
    const std::string& kind = c.n.attrs.string("kind");
    if (kind != "max" && kind != "avg") c.fail("kind '" + kind + "' is not max or avg");
    const auto& k = c.n.attrs.ints("kernel", 2);
    const auto& st = c.n.attrs.ints("strides", 2);
    const auto& dil = c.n.attrs.ints("dilation", 2);
    const auto& pad = c.n.attrs.ints("padding", 4);
    const bool include = c.n.attrs.boolean("count_include_pad");
    const std::int64_t N = x.spec.shape[0], C = x.spec.shape[1], H = x.spec.shape[2], W = x.spec.shape[3];
    const auto geo = window(c, H, W, {k[0], k[1], st[0], st[1], dil[0], dil[1], pad[0], pad[1], pad[2], pad[3]});
    if (pad[0] >= (k[0] - 1) * dil[0] + 1 || pad[1] >= (k[1] - 1) * dil[1] + 1) c.fail("padding must be smaller than the window");
    expect_shape(c, y, {N, C, geo.oh, geo.ow}, "output");
    onednn::PoolSpec spec;
    spec.kind = kind == "max" ? onednn::PoolSpec::Kind::max
                : include     ? onednn::PoolSpec::Kind::avg_include_pad
                              : onednn::PoolSpec::Kind::avg;
    spec.strides = {st[0], st[1]};
    spec.kernel = {k[0], k[1]};
    spec.dilation = {dil[0], dil[1]};
    spec.pad_begin = {pad[0], pad[1]};
    spec.pad_end = {pad[2], pad[3]};
    threads_ = c.threads_for(double(N) * C * geo.oh * geo.ow * k[0] * k[1]);
    const memory::desc dst_any({N, C, geo.oh, geo.ow}, dt::f32, tag::any);
    onednn::ThreadScope scope(threads_);
    try {
      pool_ = onednn::Pool(spec, f.held(c.n.inputs[0]), dst_any);
    } catch (const onednn::Error&) {
      try {
        pool_ = onednn::Pool(spec, plain_md(x), dst_any);
      } catch (const onednn::Error& e) {
        c.fail(e.what());
      }
    }
    input(c, f, 0, pool_.src_desc());
    output(c, f, pool_.dst_desc());
    finish(pool_.scratch_bytes());
  }

 private:
  void compute(Exec& e, const void* const* src, void* dst, std::uint8_t* scratch) const override {
    pool_.execute(e.call.stream(), src[0], dst, scratch);
  }
  onednn::Pool pool_;
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

// instance_norm: statistics per (instance, channel) row, accumulated in float64 (oneDNN's
// batch normalization, which computes the same with float32 sums, drifts from the reference by
// 1e-4 on rows whose mean is 100 times their spread); vectorized loops.
class InstanceNorm final : public BnnsKernel {
 public:
  InstanceNorm(const Ctx& c, Formats& f) {
    c.arity(3, 3, 1);
    const GraphTensor& x = c.in(0);
    const GraphTensor& gamma = c.in(1);
    const GraphTensor& beta = c.in(2);
    const GraphTensor& y = c.out(0);
    c.constant(gamma, "gamma");
    c.constant(beta, "beta");
    const std::int32_t r = x.spec.shape.rank();
    if (r != 3 && r != 4) c.fail("data must be of rank 3 or 4");
    rows_ = static_cast<std::size_t>(x.spec.shape[0] * x.spec.shape[1]);
    channels_ = static_cast<std::size_t>(x.spec.shape[1]);
    length_ = static_cast<std::size_t>(product(x.spec.shape, 2, r));
    expect_shape(c, gamma, {x.spec.shape[1]}, "gamma");
    expect_shape(c, beta, {x.spec.shape[1]}, "beta");
    expect_shape(c, y, dims_of(x.spec.shape), "output");
    const double eps = c.n.attrs.number("epsilon");
    if (!(eps >= 0) || !std::isfinite(eps)) c.fail("epsilon must be a finite non-negative number");
    eps_ = static_cast<float>(eps);
    threads_ = c.threads;
    for (std::size_t i = 0; i < 3; ++i) input(c, f, i, plain_md(c.in(i)));  // gamma and beta: kept by the runtime
    output(c, f, plain_md(y));
    finish(0);
  }

 private:
  void compute(Exec&, const void* const* src, void* dst, std::uint8_t*) const override {
    const auto* x = static_cast<const float*>(src[0]);
    const auto* gamma = static_cast<const float*>(src[1]);
    const auto* beta = static_cast<const float*>(src[2]);
    auto* y = static_cast<float*>(dst);
    for (std::size_t row = 0; row < rows_; ++row) {
      const std::size_t ch = row % channels_, off = row * length_;
      normalize_row(x + off, y + off, length_, gamma[ch], beta[ch], eps_);
    }
  }
  std::size_t rows_ = 0, channels_ = 1, length_ = 0;
  float eps_ = 0;
};

// add (+ relu): two tensors of one shape, BNNS's arithmetic layer. oneDNN's binary add in the
// format the first operand is held in (the second is reordered to it where it is held in
// another); the relu in place afterwards as the reference computes it (NaN stays NaN, -0.0
// stays -0.0, where oneDNN's eltwise relu gives 0), over the padding of a blocked format too,
// which it leaves at zero.
class Add final : public BnnsKernel {
 public:
  Add(const Ctx& c, Formats& f) {
    c.arity(2, 2, 1);
    const memory::dims dims = dims_of(c.in(0).spec.shape);
    expect_shape(c, c.in(1), dims, "operand 1");
    expect_shape(c, c.out(0), dims, "output");
    const std::string& act = c.n.attrs.string("activation");
    if (act != "none" && act != "relu") c.fail("activation '" + act + "' is not none or relu");
    relu_ = act == "relu";
    const memory::desc md = f.held(c.n.inputs[0]);
    threads_ = c.threads_for(static_cast<double>(c.out(0).spec.shape.elements()), accel_sdk::kSmallElementwise);
    onednn::ThreadScope scope(threads_);
    const auto pd = onednn::guard("binary add create", [&] {
      return dnnl::binary::primitive_desc(onednn::engine(), dnnl::algorithm::binary_add, md, md, md, user_scratchpad());
    });
    prim_ = dnnl::binary(pd);
    md_ = md;
    scratch_ = pd.scratchpad_desc();
    input(c, f, 0, md);
    input(c, f, 1, md);
    output(c, f, md);
    finish(scratch_.get_size());
  }

 private:
  void compute(Exec& e, const void* const* src, void* dst, std::uint8_t* scratch) const override {
    const memory a = onednn::thread_memory(onednn::kSrcMemory, md_, src[0]);
    const memory b = onednn::thread_memory(onednn::kSrc1Memory, md_, src[1]);
    const memory y = onednn::thread_memory(onednn::kDstMemory, md_, dst);
    const memory pad = onednn::thread_memory(onednn::kScratchMemory, scratch_, scratch);
    onednn::guard("binary add", [&] {
      onednn::execute(prim_, e.call.stream(),
                      {{DNNL_ARG_SRC_0, &a}, {DNNL_ARG_SRC_1, &b}, {DNNL_ARG_DST, &y}, {DNNL_ARG_SCRATCHPAD, &pad}});
    });
    if (!relu_) return;
    float* p = static_cast<float*>(dst);
    const std::size_t n = md_.get_size() / sizeof(float);
    for (std::size_t i = 0; i < n; ++i) p[i] = p[i] < 0.f ? 0.f : p[i];
  }
  dnnl::binary prim_;
  memory::desc md_, scratch_;
  bool relu_ = false;
};

// The bnns runtime: accel_sdk's graph runtime with bnns's header and kernels. The formats
// tensors are held in are kept while the kernels are made, one node after the other.
class BnnsRuntime final : public accel_sdk::GraphRuntime<BnnsRuntime, onednn::Call> {
 public:
  // "BNNS", version, num_threads, graph_size, zero padding to 64 bytes, then the graph blob to
  // the end. num_threads is what blobs written before the count was chosen at load time carry:
  // checked, ignored.
  static GraphBlob parse(BlobReader& blob) {
    blob.expect_magic("BNNS");
    blob.expect_version(kVersion, kVersion);
    blob.read_in_range<std::uint32_t>(0, static_cast<std::uint32_t>(accel_sdk::kMaxThreads), "num_threads");
    const std::uint64_t size = blob.read<std::uint64_t>("graph_size");
    blob.align(kHeaderSize, "header padding");
    if (size > blob.remaining()) {
      blob.fail("graph blob: needs " + std::to_string(size) + " bytes, " + std::to_string(blob.remaining()) + " left");
    }
    const std::uint8_t* body = blob.read_bytes(static_cast<std::size_t>(size), "graph blob");
    blob.expect_end();
    return GraphBlob::parse(body, static_cast<std::size_t>(size), {"bnns", kKindVersion, kKindVersion});
  }

  std::unique_ptr<Kernel> make_kernel(const Ctx& c) {
    if (!formats_.started()) formats_.start(c.g);
    const std::string& k = c.n.kernel;
    if (k == "conv2d") return std::make_unique<Conv2d>(c, formats_);
    if (k == "dense") return std::make_unique<Dense>(c, formats_);
    if (k == "batch_matmul") return std::make_unique<BatchMatmul>(c, formats_);
    if (k == "pool2d") return std::make_unique<Pool2d>(c, formats_);
    if (k == "instance_norm") return std::make_unique<InstanceNorm>(c, formats_);
    if (k == "add") return std::make_unique<Add>(c, formats_);
    c.fail("unknown kernel (bnns runs conv2d, dense, batch_matmul, pool2d, instance_norm, add)");
  }

 private:
  Formats formats_;
};

}  // namespace

ACCEL_SDK_RUNTIME_MODULE(_runtime, "bnns", BnnsRuntime)

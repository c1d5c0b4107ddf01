// The acl runtime: one partition (accel-sdk's graph blob, kind "acl") run through oneDNN.
//
// accel_sdk::GraphRuntime does what every graph-blob backend does: it parses and validates
// the blob, plans one arena for the intermediates by liveness, lends each concurrent run
// an arena of its own, binds the caller's buffers and applies the thread count chosen at
// load time. What is acl's is here: one kernel per node, which checks its attributes
// against the shapes of its tensors and builds its oneDNN primitive once, with its weights
// reordered into the layout the primitive chose.
//
// Float32 kernels are oneDNN's: convolution and inner product through accel_sdk's FloatConv /
// FloatDense (ReLU / bounded ReLU fused, NaN kept as the reference keeps it), pooling (max
// pooling's NaN through accel_sdk's MaxPoolNan), binary. Quantized convolutions and dense take raw
// int32 accumulators from oneDNN (accel_sdk/int_ops.hpp, exact on every ISA) and are
// requantized here by accel_sdk/requantize.hpp, bit for bit as accel.quant defines it;
// qnn.add, requantize, quantize, dequantize, integer average pools, concatenate and reshape
// are this file's own (what no library computes with accel's rounding); softmax is oneDNN's.
#include "nodes.hpp"

#include <accel_sdk/float_ops.hpp>
#include <accel_sdk/geometry.hpp>
#include <accel_sdk/graph_blob.hpp>
#include <accel_sdk/graph_runtime.hpp>
#include <accel_sdk/int_ops.hpp>
#include <accel_sdk/onednn.hpp>
#include <accel_sdk/pool.hpp>
#include <accel_sdk/quant.hpp>
#include <accel_sdk/runtime.hpp>
#include <accel_sdk/tensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using accel_sdk::BlobError;
using accel_sdk::GraphBlob;
using accel_sdk::GraphNode;
using accel_sdk::GraphTensor;
using accel_sdk::Shape;
using accel_sdk::TensorSpec;
using accel_sdk::TensorView;
namespace onednn = accel_sdk::onednn;
namespace quant = accel_sdk::quant;
using namespace accel_acl;  // the nodes (nodes.hpp)
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

using Kernel = accel_sdk::Kernel<onednn::Call>;
using Exec = Kernel::Exec;
using Ctx = accel_sdk::NodeContext;

dnnl::memory::dims dims_of(const Shape& s) { return dnnl::memory::dims(s.dims(), s.dims() + s.rank()); }

// NHWC activation [1, H, W, C] as oneDNN's logical NCHW dims with the nhwc tag.
dnnl::memory::desc nhwc_desc(const Shape& s, dt type) {
  return dnnl::memory::desc({s[0], s[3], s[1], s[2]}, type, tag::nhwc);
}

using onednn::user_scratchpad;

// A oneDNN primitive and its scratchpad, run on the caller's buffers.
struct Prim {
  dnnl::primitive prim;
  dnnl::memory::desc scratch_md;
  std::size_t scratch = 0;

  template <class P, class PD>
  void set(const PD& pd) {
    prim = P(pd);
    scratch_md = pd.scratchpad_desc();
    scratch = scratch_md.get_size();
  }
  // One source and a destination; the scratchpad is added here.
  void exec(Exec& e, const dnnl::memory& src, const dnnl::memory& dst) const {
    const dnnl::memory pad =
        scratch ? onednn::thread_memory(onednn::kScratchMemory, scratch_md, e.scratch) : dnnl::memory();
    onednn::execute(prim, e.call.stream(),
                    {{DNNL_ARG_SRC, &src}, {DNNL_ARG_DST, &dst}, {DNNL_ARG_SCRATCHPAD, scratch ? &pad : nullptr}});
  }
  // Two sources and a destination; the scratchpad is added here.
  void exec(Exec& e, const dnnl::memory& src0, const dnnl::memory& src1, const dnnl::memory& dst) const {
    const dnnl::memory pad =
        scratch ? onednn::thread_memory(onednn::kScratchMemory, scratch_md, e.scratch) : dnnl::memory();
    onednn::execute(prim, e.call.stream(),
                    {{DNNL_ARG_SRC_0, &src0}, {DNNL_ARG_SRC_1, &src1}, {DNNL_ARG_DST, &dst},
                     {DNNL_ARG_SCRATCHPAD, scratch ? &pad : nullptr}});
  }
};

// ReLU (act 1) or bounded ReLU [0, hi] (act 2) in place, as the reference computes them:
// NaN stays NaN and -0.0 stays -0.0 (oneDNN's eltwise relu turns NaN into 0).
void activate(float* p, std::size_t n, std::int64_t act, float hi) {
  if (act == 1) {
    for (std::size_t i = 0; i < n; ++i) p[i] = p[i] < 0.f ? 0.f : p[i];
  } else if (act == 2) {
    for (std::size_t i = 0; i < n; ++i) {
      const float v = p[i] < 0.f ? 0.f : p[i];
      p[i] = v > hi ? hi : v;
    }
  }
}

// -- float32 convolution and dense ------------------------------------------------------

// An accel_sdk float32 layer (FloatConv, FloatDense) from the node's one input to its output.
template <class Op>
class Layer : public Kernel {
 public:
  void run(Exec& e) const override {
    onednn::ThreadScope threads(op_->threads());  // as the layer was made for (one, for small work)
    op_->execute(e.call.stream(), e.in<float>(0), e.out<float>(0));
  }

 protected:
  template <class Make>
  void set(const Ctx& c, const Make& make) {
    try {
      op_ = std::make_unique<const Op>(make());
    } catch (const onednn::Error& e) {
      c.fail(e.what());  // oneDNN refused the layer: name the node
    }
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
  }
  const Op& op() const { return *op_; }
  using Operands = FloatOperands;
  static Operands operands(const Ctx& c, int r) { return float_operands(c, r); }
  static const float* bias(const Ctx& c, std::int64_t outputs) { return float_bias(c, outputs); }

 private:
  std::unique_ptr<const Op> op_;
};

// The sdk's ConvShape of NHWC data x, OHWI weights w.
onednn::ConvShape conv_shape(const Shape& x, const Shape& w, std::int64_t groups, const Window& win) {
  onednn::ConvShape s;
  s.batch = x[0];
  s.in_h = x[1];
  s.in_w = x[2];
  s.in_channels = x[3];
  s.out_channels = w[0];
  s.groups = groups;
  s.window = {win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.pt, win.pl, win.pb, win.pr};
  return s;
}

// conv2d (+ bias, relu / bounded relu) on NHWC tensors.
class ConvF32 final : public Layer<onednn::FloatConv> {
 public:
  explicit ConvF32(const Ctx& c) {
    const auto [x, w, y] = operands(c, 4);
    const std::int64_t groups = c.integer("groups", 1, 1 << 20);
    const Window win = conv_window(c, w.spec.shape[1], w.spec.shape[2]);
    check_conv_shapes(c, x.spec.shape, w.spec.shape, y.spec.shape, groups, win);
    const Activation a = Activation::read(c, 0);
    onednn::FloatConvSpec spec;
    spec.shape = conv_shape(x.spec.shape, w.spec.shape, groups, win);
    spec.weights = reinterpret_cast<const float*>(w.data);
    spec.weight_layout = onednn::WeightLayout::ohwi;
    spec.bias = bias(c, w.spec.shape[0]);
    if (a.act == 1) spec.post_ops = {onednn::PostOp::relu()};
    if (a.act == 2) spec.post_ops = {onednn::PostOp::clip(0.f, a.hi)};
    spec.bands = true;  // on several threads: bands on accel_sdk's pool
    // NHWC in and out: the tensors of the partition, no reorders
    const auto src_md = nhwc_desc(x.spec.shape, dt::f32), dst_md = nhwc_desc(y.spec.shape, dt::f32);
    const double macs = static_cast<double>(y.spec.shape.elements()) * static_cast<double>(w.spec.shape.elements() / w.spec.shape[0]);
    // bands pay from kSmallBandedLayer (the pool's workers stay awake from layer to layer)
    const int threads = c.threads_for(macs, accel_sdk::kSmallBandedLayer);
    set(c, [&] { return onednn::FloatConv(spec, threads, &src_md, &dst_md); });
    conv_ = &op();
    clip_out_ = a.act == 2;  // outputs in [0, hi]
    // A bounded ReLU convolution of this partition writes the input: when its own check found
    // nothing this run, the input is finite and in [0, its hi], and this layer's check (a scan
    // of the whole input) is needed only when that bound is past the fused kernel's limit.
    if (const accel_sdk::GraphNode* n = c.g.producer(c.n.inputs[0]); n != nullptr && n->kernel == "conv2d") {
      const double hi = n->attrs.integer("activation", 0) == 2 ? n->attrs.number("act_max") : -1.0;
      skip_when_bounded_ = hi >= 0.0 && hi <= static_cast<double>(conv_->nan_limit());
    }
  }

  void run(Exec& e) const override {
    onednn::ThreadScope threads(conv_->threads());
    const bool check = !(skip_when_bounded_ && e.bounded != nullptr && e.bounded[ins[0]] != 0);
    const bool repaired = conv_->execute(e.call.stream(), e.in<float>(0), e.out<float>(0), check);
    if (e.bounded != nullptr) e.bounded[outs[0]] = clip_out_ && !repaired ? 1 : 0;
  }

 private:
  const onednn::FloatConv* conv_ = nullptr;
  bool clip_out_ = false, skip_when_bounded_ = false;
};

// dense (+ bias): [M, K] x [N, K].
class DenseF32 final : public Layer<onednn::FloatDense> {
 public:
  explicit DenseF32(const Ctx& c) {
    const auto [x, w, y] = operands(c, 2);
    const auto M = x.spec.shape[0], K = x.spec.shape[1], N = w.spec.shape[0];
    check_dense_shapes(c, x.spec.shape, w.spec.shape, y.spec.shape);
    onednn::FloatDenseSpec spec;
    spec.m = M;
    spec.k = K;
    spec.n = N;
    spec.weights = reinterpret_cast<const float*>(w.data);
    spec.bias = bias(c, N);
    spec.bands = true;  // on several threads: blocks on accel_sdk's pool
    const int threads = c.threads_for(static_cast<double>(M) * K * N, accel_sdk::kSmallBandedLayer);
    set(c, [&] { return onednn::FloatDense(spec, threads); });
  }
};

// -- pooling ----------------------------------------------------------------------------

// Float32 and 8-bit max, float32 average and L2 pools: accel_sdk's onednn::Pool on NHWC tensors.
class PoolOneDnn final : public Kernel {
 public:
  explicit PoolOneDnn(const Ctx& c) {
    const PoolParams p = float_pool(c);
    const auto& x = c.in(0);
    const auto& y = c.out(0);
    onednn::PoolSpec spec;
    spec.kind = p.kind == "max"  ? onednn::PoolSpec::Kind::max
                : p.kind == "l2" ? onednn::PoolSpec::Kind::l2
                : p.include_pad  ? onednn::PoolSpec::Kind::avg_include_pad
                                 : onednn::PoolSpec::Kind::avg;
    spec.strides = {p.sh, p.sw};
    spec.kernel = {p.kh, p.kw};
    spec.pad_begin = {p.pt, p.pl};
    spec.pad_end = {p.pb, p.pr};
    const dt type = onednn::data_type(x.spec.dtype);
    // a pool reads its input about once: memory-bound, on one thread below kSmallElementwise elements
    threads_ = c.threads_for(static_cast<double>(x.spec.shape.elements()), accel_sdk::kSmallElementwise);
    onednn::ThreadScope threads(threads_);  // (oneDNN partitions the work when the primitive is made)
    try {
      pool_ = onednn::Pool(spec, nhwc_desc(x.spec.shape, type), nhwc_desc(y.spec.shape, type));
    } catch (const onednn::Error& e) {
      c.fail(e.what());
    }
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
    scratch_bytes = pool_.scratch_bytes();
  }

  void run(Exec& e) const override {
    onednn::ThreadScope threads(threads_);
    pool_.execute(e.call.stream(), e.in(0), e.out(0), e.scratch);
  }

 private:
  onednn::Pool pool_;
  int threads_ = 1;
};

// -- float32 elementwise ----------------------------------------------------------------

// A memory-bound oneDNN primitive (binary, softmax, transpose): on one thread below
// kSmallElementwise elements, and made under the thread count it runs with (oneDNN partitions
// the work when the primitive is made). make() returns the primitive descriptor of P.
class Elementwise : public Kernel {
 protected:
  template <class P, class Make>
  void set(const Ctx& c, const char* what, double elements, const Make& make) {
    threads_ = c.threads_for(elements, accel_sdk::kSmallElementwise);
    onednn::ThreadScope threads(threads_);
    onednn::guard(std::string(what) + " " + c.n.name, [&] { prim_.set<P>(make()); });
    outs = {c.n.outputs[0]};
    scratch_bytes = prim_.scratch;
  }

  Prim prim_;
  int threads_ = 1;
};

// An Elementwise primitive from the node's one input to its output: softmax, transpose.
class OneInput : public Elementwise {
 public:
  void run(Exec& e) const override {
    onednn::ThreadScope threads(threads_);
    prim_.exec(e, onednn::thread_memory(onednn::kSrcMemory, src_md_, e.ptr[ins[0]]),
               onednn::thread_memory(onednn::kDstMemory, dst_md_, e.ptr[outs[0]]));
  }

 protected:
  template <class P, class Make>
  void set(const Ctx& c, const char* what, double elements, const dnnl::memory::desc& src, const dnnl::memory::desc& dst,
           const Make& make) {
    src_md_ = src;
    dst_md_ = dst;
    ins = {c.n.inputs[0]};
    Elementwise::set<P>(c, what, elements, make);
  }

 private:
  dnnl::memory::desc src_md_, dst_md_;
};

// add, multiply, maximum of float32 tensors of one shape; add and multiply also by a constant that
// varies along the last (channel) axis only, broadcast over the rest (a per-channel scale or shift:
// a batch norm left after a concatenation). The full-shaped operand is input 0 (the serializer orders
// them; the ops commute).
class BinaryF32 final : public Elementwise {
 public:
  BinaryF32(const Ctx& c, dnnl::algorithm alg) {
    const Shape& s = c.out(0).spec.shape;
    md_ = dnnl::memory::desc({static_cast<std::int64_t>(s.elements())}, dt::f32, tag::a);
    md1_ = md_;
    if (float_binary(c, alg != dnnl::algorithm::binary_max)) {
      // [1, ..., 1, C] (or fewer leading ones) against [..., C]: rows of C elements, input 1 broadcast
      const std::int64_t C = s[s.rank() - 1];
      const std::int64_t rows = static_cast<std::int64_t>(s.elements()) / C;
      md_ = dnnl::memory::desc({rows, C}, dt::f32, tag::ab);
      md1_ = dnnl::memory::desc({1, C}, dt::f32, tag::ab);
    }
    ins = {c.n.inputs[0], c.n.inputs[1]};
    set<dnnl::binary>(c, "binary", static_cast<double>(s.elements()), [&] {
      return dnnl::binary::primitive_desc(onednn::engine(), alg, md_, md1_, md_, user_scratchpad());
    });
  }

  void run(Exec& e) const override {
    onednn::ThreadScope threads(threads_);  // one thread below kSmallElementwise elements
    prim_.exec(e, onednn::thread_memory(onednn::kSrcMemory, md_, e.ptr[ins[0]]),
               onednn::thread_memory(onednn::kSrc1Memory, md1_, e.ptr[ins[1]]),
               onednn::thread_memory(onednn::kDstMemory, md_, e.ptr[outs[0]]));
  }

 private:
  dnnl::memory::desc md_, md1_;
};

class ActivationF32 final : public Kernel {
 public:
  explicit ActivationF32(const Ctx& c) {
    const Activation a = Activation::node(c);
    act_ = a.act;
    hi_ = a.hi;
    n_ = c.out(0).spec.shape.elements();
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    float* y = static_cast<float*>(e.ptr[outs[0]]);
    if (n_ && y != e.ptr[ins[0]]) std::memcpy(y, e.ptr[ins[0]], n_ * sizeof(float));
    activate(y, n_, act_, hi_);
  }

 private:
  std::int64_t act_ = 1;
  float hi_ = 0.f;
  std::size_t n_ = 0;
};

// softmax along the last axis: oneDNN's accurate softmax over rows of the last dimension, then
// the rows the reference makes NaN (SoftmaxRows).
class SoftmaxF32 final : public OneInput {
 public:
  explicit SoftmaxF32(const Ctx& c) : rows_(SoftmaxRows::read(c)) {
    const dnnl::memory::desc md({static_cast<std::int64_t>(rows_.rows), static_cast<std::int64_t>(rows_.width)}, dt::f32, tag::ab);
    set<dnnl::softmax_forward>(c, "softmax", static_cast<double>(rows_.rows * rows_.width), md, md, [&] {
      return dnnl::softmax_forward::primitive_desc(onednn::engine(), dnnl::prop_kind::forward_inference,
                                                   dnnl::algorithm::softmax_accurate, md, md, 1, user_scratchpad());
    });
  }

  void run(Exec& e) const override {
    OneInput::run(e);
    rows_.fix(e.in<float>(0), e.out<float>(0));
  }

 private:
  SoftmaxRows rows_;
};

// -- data movement ----------------------------------------------------------------------------

// transpose: a oneDNN reorder of the input, read through the strides the permutation gives its
// axes, into the plain output.
class Transpose final : public OneInput {
 public:
  explicit Transpose(const Ctx& c) {
    const std::vector<int> axes = transpose_axes(c);
    const Shape& x = c.in(0).spec.shape;
    const Shape& y = c.out(0).spec.shape;
    std::vector<std::int64_t> dims(static_cast<std::size_t>(x.rank()));
    for (int d = 0; d < x.rank(); ++d) dims[static_cast<std::size_t>(d)] = x[d];
    const onednn::PermuteDescs p = onednn::permute_descs(dims.data(), x.rank(), axes.data(), c.in(0).spec.dtype);
    const dnnl::memory::desc &src = p.from, &dst = p.to;
    set<dnnl::reorder>(c, "transpose", static_cast<double>(y.elements()), src, dst, [&] {
      return dnnl::reorder::primitive_desc(onednn::engine(), src, onednn::engine(), dst, user_scratchpad());
    });
  }
};

class Reshape final : public Kernel {
 public:
  explicit Reshape(const Ctx& c) {
    c.arity(1, 1, 1);
    if (c.in(0).spec.dtype != c.out(0).spec.dtype || c.in(0).nbytes != c.out(0).nbytes) c.fail("reshape must keep dtype and size");
    bytes_ = c.out(0).nbytes;
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
  }
  void run(Exec& e) const override {
    if (bytes_) std::memcpy(e.ptr[outs[0]], e.ptr[ins[0]], bytes_);
  }

 private:
  std::size_t bytes_ = 0;
};

class Concatenate final : public Kernel {
 public:
  explicit Concatenate(const Ctx& c) {
    const std::int64_t axis = concatenate_axis(c);
    const auto& y = c.out(0).spec;
    std::size_t outer = 1, inner = accel_sdk::dtype_size(y.dtype);
    for (int d = 0; d < axis; ++d) outer *= static_cast<std::size_t>(y.shape[d]);
    for (int d = static_cast<int>(axis) + 1; d < y.shape.rank(); ++d) inner *= static_cast<std::size_t>(y.shape[d]);
    for (std::size_t i = 0; i < c.n.inputs.size(); ++i) {
      chunks_.push_back(static_cast<std::size_t>(c.in(i).spec.shape[static_cast<int>(axis)]) * inner);
      ins.push_back(c.n.inputs[i]);
    }
    outer_ = outer;
    row_ = static_cast<std::size_t>(y.shape[static_cast<int>(axis)]) * inner;
    outs = {c.n.outputs[0]};
  }
  void run(Exec& e) const override {
    auto* y = static_cast<std::uint8_t*>(e.ptr[outs[0]]);
    std::size_t at = 0;
    for (std::size_t i = 0; i < ins.size(); ++i) {
      const auto* x = static_cast<const std::uint8_t*>(e.ptr[ins[i]]);
      for (std::size_t o = 0; o < outer_; ++o) std::memcpy(y + o * row_ + at, x + o * chunks_[i], chunks_[i]);
      at += chunks_[i];
    }
  }

 private:
  std::vector<std::size_t> chunks_;
  std::size_t outer_ = 1, row_ = 0;
};

// -- quantized: requantize and qnn.add (accel.quant's arithmetic) -------------------------

// -- quantized convolution and dense -------------------------------------------------------

// qnn.conv2d / qnn.dense (+ int32 bias, fused relu) + requantize: accel_sdk's
// IntConvRequantize, exact int32 accumulators from oneDNN on CPUs with and without VNNI
// (its int8 path, or its exact float32 path where that is faster), requantized bit for bit
// by accel_sdk/requantize.hpp, band by band while they are in cache.
class QnnConv final : public Kernel {
 public:
  QnnConv(const Ctx& c, bool dense) {
    QnnLayer q = QnnLayer::read(c, dense);
    const Shape& xs = q.x->spec.shape;
    const Shape& ws = q.w->spec.shape;
    onednn::IntConvSpec spec;
    if (dense) {
      spec = onednn::dense_spec(xs[0], xs[1], q.outputs, q.x->spec.dtype, 0, q.w->spec.dtype, q.w->data);
    } else {
      spec.shape = conv_shape(xs, ws, q.groups, q.win);
      spec.data_dtype = q.x->spec.dtype;
      spec.weight_dtype = q.w->spec.dtype;
      spec.weights = q.w->data;
      spec.weight_layout = onednn::WeightLayout::ohwi;
    }
    spec.data_zero_point = q.data_zero_point;
    spec.weight_zero_points = q.weight_zero_points;
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
    // small layers on one thread: sharing them costs more than it saves
    op_ = std::make_unique<onednn::IntConvRequantize>(spec, q.requantizer(q.bias), q.y->spec.dtype,
                                                      c.threads_for(onednn::banded_work(spec.shape), accel_sdk::kSmallBandedLayer));
  }

  void run(Exec& e) const override { op_->run(e.ptr[ins[0]], e.ptr[outs[0]]); }

 private:
  std::unique_ptr<onednn::IntConvRequantize> op_;
};

// -- the runtime --------------------------------------------------------------------------

std::unique_ptr<Kernel> acl_kernel(const Ctx& c) {
  const std::string& k = c.n.kernel;
  if (k == "conv2d") return std::make_unique<ConvF32>(c);
  if (k == "dense") return std::make_unique<DenseF32>(c);
  if (k == "qnn_conv2d") return std::make_unique<QnnConv>(c, false);
  if (k == "qnn_dense") return std::make_unique<QnnConv>(c, true);
  if (k == "pool2d") {
    if (c.n.inputs.size() == 1 && c.in(0).spec.dtype == ACCEL_INT32) return std::make_unique<PoolInt<onednn::Call>>(c, false);
    return std::make_unique<PoolOneDnn>(c);
  }
  if (k == "qnn_avg_pool2d") return std::make_unique<PoolInt<onednn::Call>>(c, true);
  if (k == "add") return std::make_unique<BinaryF32>(c, dnnl::algorithm::binary_add);
  if (k == "maximum") return std::make_unique<BinaryF32>(c, dnnl::algorithm::binary_max);
  if (k == "multiply") return std::make_unique<BinaryF32>(c, dnnl::algorithm::binary_mul);
  if (k == "activation") return std::make_unique<ActivationF32>(c);
  if (k == "reshape") return std::make_unique<Reshape>(c);
  if (k == "concatenate") return std::make_unique<Concatenate>(c);
  if (k == "requantize") return std::make_unique<RequantizeOp<onednn::Call>>(c);
  if (k == "qnn_add") return std::make_unique<QnnAdd<onednn::Call>>(c);
  if (k == "dequantize") return std::make_unique<DequantizeOp<onednn::Call>>(c);
  if (k == "quantize") return std::make_unique<QuantizeOp<onednn::Call>>(c);
  if (k == "softmax") return std::make_unique<SoftmaxF32>(c);
  if (k == "transpose") return std::make_unique<Transpose>(c);
  c.fail("unknown kernel");
}

// The acl runtime: accel_sdk's graph runtime with acl's kernels. Blobs written before the
// thread count was chosen at load time carry a `threads` attribute on every node; it is
// ignored (the count is the one accel passes when it loads the blob).
class AclRuntime final : public accel_sdk::GraphRuntime<AclRuntime, onednn::Call> {
 public:
  static accel_sdk::GraphBlobSpec blob_spec() { return {"acl", kKindVersion, kKindVersion}; }
  std::unique_ptr<Kernel> make_kernel(const Ctx& c) const { return acl_kernel(c); }
};

}  // namespace

#ifndef ACCEL_ACL_NO_MODULE  // fuzz/fuzz_acl_blob.cpp includes this file without the Python module
ACCEL_SDK_RUNTIME_MODULE(_runtime, "acl", AclRuntime)
#endif

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
// qnn.add, requantize, integer average pools, concatenate and reshape are this file's
// own (what no library computes with accel's rounding).
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
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

constexpr std::uint32_t kKindVersion = 1;

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
  void exec(Exec& e, std::unordered_map<int, dnnl::memory> args) const {
    if (scratch) args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch_md, onednn::engine(), e.scratch));
    prim.execute(e.call.stream(), args);
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
  // The node's data, constant weights and output (inputs 0, 1, output 0): float32 of rank r.
  struct Operands {
    const GraphTensor &x, &w, &y;
  };
  static Operands operands(const Ctx& c, int r) {
    c.arity(2, 3, 1);
    const Operands o{c.in(0), c.in(1), c.out(0)};
    c.activation(o.x, "data");
    c.constant(o.w, "weights");
    for (const auto* t : {&o.x, &o.w, &o.y}) {
      c.dtype(*t, ACCEL_FLOAT32, "data, weights and output");
      c.rank(*t, r, "data, weights and output");
    }
    return o;
  }
  // The constant float32 bias [outputs] (input 2), or none.
  static const float* bias(const Ctx& c, std::int64_t outputs) {
    if (c.n.inputs.size() != 3) return nullptr;
    const auto& b = c.in(2);
    c.constant(b, "bias");
    c.dtype(b, ACCEL_FLOAT32, "bias");
    if (b.spec.shape != Shape{outputs}) c.fail("bias must be [" + std::to_string(outputs) + "], got " + b.spec.shape.str());
    return reinterpret_cast<const float*>(b.data);
  }

 private:
  std::unique_ptr<const Op> op_;
};

struct Window {
  std::int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
};

// strides, dilation, padding of a conv node, and the output shape they give for in_shape.
Window conv_window(const Ctx& c, std::int64_t kh, std::int64_t kw) {
  const auto s = c.ints("strides", 2, 1, 1 << 16);
  const auto d = c.ints("dilation", 2, 1, 1 << 16);
  const auto p = c.ints("padding", 4, 0, 1 << 16);
  return {kh, kw, s[0], s[1], d[0], d[1], p[0], p[1], p[2], p[3]};
}

void check_conv_shapes(const Ctx& c, const Shape& x, const Shape& w, const Shape& y, std::int64_t groups, const Window& win) {
  const std::int64_t C = x[3], O = w[0];
  if (groups < 1 || C % groups != 0 || O % groups != 0 || w[3] != C / groups) {
    c.fail("weights " + w.str() + " do not fit data " + x.str() + " with groups=" + std::to_string(groups));
  }
  accel_sdk::geometry::Window2d gw{win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.pt, win.pl, win.pb, win.pr};
  const auto g = accel_sdk::geometry::conv2d(x[1], x[2], gw);
  const Shape want{x[0], g.oh, g.ow, O};
  if (y != want) c.fail("output must be " + want.str() + ", got " + y.str());
  if (x.elements() == 0 || y.elements() == 0) c.fail("empty tensors are not supported");
}

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
    const std::int64_t act = c.integer("activation", 0, 2);
    const float act_max = static_cast<float>(c.n.attrs.number("act_max"));
    if (act == 2 && !(act_max > 0.f && std::isfinite(act_max))) c.fail("bounded relu needs act_max > 0");
    onednn::FloatConvSpec spec;
    spec.shape = conv_shape(x.spec.shape, w.spec.shape, groups, win);
    spec.weights = reinterpret_cast<const float*>(w.data);
    spec.weight_layout = onednn::WeightLayout::ohwi;
    spec.bias = bias(c, w.spec.shape[0]);
    if (act == 1) spec.post_ops = {onednn::PostOp::relu()};
    if (act == 2) spec.post_ops = {onednn::PostOp::clip(0.f, act_max)};
    // NHWC in and out: the tensors of the partition, no reorders
    const auto src_md = nhwc_desc(x.spec.shape, dt::f32), dst_md = nhwc_desc(y.spec.shape, dt::f32);
    const double macs = static_cast<double>(y.spec.shape.elements()) * static_cast<double>(w.spec.shape.elements() / w.spec.shape[0]);
    set(c, [&] { return onednn::FloatConv(spec, c.threads_for(macs), &src_md, &dst_md); });
  }
};

// dense (+ bias): [M, K] x [N, K].
class DenseF32 final : public Layer<onednn::FloatDense> {
 public:
  explicit DenseF32(const Ctx& c) {
    const auto [x, w, y] = operands(c, 2);
    const auto M = x.spec.shape[0], K = x.spec.shape[1], N = w.spec.shape[0];
    if (w.spec.shape[1] != K || y.spec.shape != Shape{M, N} || M * K * N == 0) {
      c.fail("shapes " + x.spec.shape.str() + " x " + w.spec.shape.str() + " -> " + y.spec.shape.str() + " do not fit");
    }
    onednn::FloatDenseSpec spec;
    spec.m = M;
    spec.k = K;
    spec.n = N;
    spec.weights = reinterpret_cast<const float*>(w.data);
    spec.bias = bias(c, N);
    set(c, [&] { return onednn::FloatDense(spec, c.threads_for(static_cast<double>(M) * K * N)); });
  }
};

// -- pooling ----------------------------------------------------------------------------

struct PoolParams {
  std::string kind;
  std::int64_t kh, kw, sh, sw, pt, pl, pb, pr;
  std::int64_t dpb, dpr;  // declared bottom/right padding (without the ceil-mode extension)
  bool include_pad;
};

PoolParams pool_params(const Ctx& c, const Shape& x, const Shape& y) {
  PoolParams p;
  p.kind = c.n.attrs.string("kind");
  const auto k = c.ints("kernel", 2, 1, 1 << 20);
  const auto s = c.ints("strides", 2, 1, 1 << 20);
  const auto pad = c.ints("padding", 4, 0, 1 << 20);
  p.kh = k[0], p.kw = k[1], p.sh = s[0], p.sw = s[1], p.pt = pad[0], p.pl = pad[1], p.pb = pad[2], p.pr = pad[3];
  p.dpb = p.pb, p.dpr = p.pr;
  if (c.n.attrs.has("declared_padding")) {
    const auto d = c.ints("declared_padding", 4, 0, 1 << 20);
    if (d[0] != p.pt || d[1] != p.pl || d[2] > p.pb || d[3] > p.pr) c.fail("declared padding does not fit the padding");
    p.dpb = d[2], p.dpr = d[3];
  }
  p.include_pad = c.n.attrs.boolean("count_include_pad", false);
  if (x.rank() != 4 || y.rank() != 4 || y[0] != x[0] || y[3] != x[3]) c.fail("pool shapes " + x.str() + " -> " + y.str() + " do not fit");
  if (x.elements() == 0) c.fail("empty tensors are not supported");
  if (p.pt >= p.kh || p.pb >= p.kh || p.pl >= p.kw || p.pr >= p.kw) c.fail("padding must be smaller than the window");
  const std::int64_t ph = x[1] + p.pt + p.pb, pw = x[2] + p.pl + p.pr;
  if (ph < p.kh || pw < p.kw) c.fail("window larger than the padded input");
  const std::int64_t oh = (ph - p.kh) / p.sh + 1, ow = (pw - p.kw) / p.sw + 1;
  if (y[1] != oh || y[2] != ow) c.fail("output must be [" + std::to_string(x[0]) + "," + std::to_string(oh) + "," + std::to_string(ow) + "," + std::to_string(x[3]) + "], got " + y.str());
  // every window starts inside the input or its declared padding (what the geometry guarantees)
  if ((oh - 1) * p.sh >= x[1] + p.pt + p.dpb || (ow - 1) * p.sw >= x[2] + p.pl + p.dpr) c.fail("a window starts in the padding");
  return p;
}

// Float32 and 8-bit max, float32 average and L2 pools: accel_sdk's onednn::Pool on NHWC tensors.
class PoolOneDnn final : public Kernel {
 public:
  explicit PoolOneDnn(const Ctx& c) {
    c.arity(1, 1, 1);
    const auto& x = c.in(0);
    const auto& y = c.out(0);
    c.activation(x, "data");
    if (x.spec.dtype != y.spec.dtype) c.fail("input and output dtypes differ");
    const PoolParams p = pool_params(c, x.spec.shape, y.spec.shape);
    onednn::PoolSpec spec;
    if (p.kind == "max") {
      spec.kind = onednn::PoolSpec::Kind::max;
      if (x.spec.dtype != ACCEL_FLOAT32 && x.spec.dtype != ACCEL_UINT8 && x.spec.dtype != ACCEL_INT8) c.fail("max pool dtype must be float32, uint8 or int8");
    } else if (p.kind == "avg" || p.kind == "l2") {
      c.dtype(x, ACCEL_FLOAT32, "data");
      if (p.include_pad && (p.dpb != p.pb || p.dpr != p.pr)) c.fail("count_include_pad with ceil mode is not supported");
      spec.kind = p.kind == "l2" ? onednn::PoolSpec::Kind::l2
                  : p.include_pad ? onednn::PoolSpec::Kind::avg_include_pad
                                  : onednn::PoolSpec::Kind::avg;
    } else {
      c.fail("pool kind '" + p.kind + "' is not max, avg or l2");
    }
    spec.strides = {p.sh, p.sw};
    spec.kernel = {p.kh, p.kw};
    spec.pad_begin = {p.pt, p.pl};
    spec.pad_end = {p.pb, p.pr};
    const dt type = onednn::data_type(x.spec.dtype);
    try {
      pool_ = onednn::Pool(spec, nhwc_desc(x.spec.shape, type), nhwc_desc(y.spec.shape, type));
    } catch (const onednn::Error& e) {
      c.fail(e.what());
    }
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
    scratch_bytes = pool_.scratch_bytes();
  }

  void run(Exec& e) const override { pool_.execute(e.call.stream(), e.in(0), e.out(0), e.scratch); }

 private:
  onednn::Pool pool_;
};

// Integer average pool: int64 window sums divided rounding half away from zero, as the
// reference (oneDNN rounds its integer averages another way). Reads In, writes Out.
class PoolInt final : public Kernel {
 public:
  explicit PoolInt(const Ctx& c, bool cast) {
    c.arity(1, 1, 1);
    const auto& x = c.in(0);
    const auto& y = c.out(0);
    c.activation(x, "data");
    p_ = pool_params(c, x.spec.shape, y.spec.shape);
    if (p_.kind != "avg") c.fail("integer pools are averages");
    in_ = x.spec.dtype;
    out_ = y.spec.dtype;
    const bool quant8 = in_ == ACCEL_UINT8 || in_ == ACCEL_INT8;
    if (cast ? !(quant8 && out_ == in_) : !(in_ == ACCEL_INT32 && out_ == ACCEL_INT32)) {
      c.fail("integer average pool of " + x.spec.describe() + " to " + y.spec.describe() + " is not supported");
    }
    x_ = x.spec.shape;
    y_ = y.spec.shape;
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    switch (in_) {
      case ACCEL_UINT8: go<std::uint8_t, std::uint8_t>(e); break;
      case ACCEL_INT8: go<std::int8_t, std::int8_t>(e); break;
      default: go<std::int32_t, std::int32_t>(e); break;
    }
  }

 private:
  // How many taps of the window starting at padded position s count along one axis.
  static std::int64_t count(std::int64_t s, std::int64_t k, std::int64_t size, std::int64_t pb, std::int64_t pe, bool include) {
    const std::int64_t lo = include ? 0 : pb, hi = include ? size + pb + pe : pb + size;
    return std::max<std::int64_t>(0, std::min(s + k, hi) - std::max(s, lo));
  }

  template <class In, class Out>
  void go(Exec& e) const {
    const std::int64_t H = x_[1], W = x_[2], C = x_[3], OH = y_[1], OW = y_[2];
    for (std::int64_t n = 0; n < x_[0]; ++n) {
      go_image<In, Out>(static_cast<const In*>(e.ptr[ins[0]]) + n * H * W * C,
                        static_cast<Out*>(e.ptr[outs[0]]) + n * OH * OW * C);
    }
  }

  // One image of the batch: x [H, W, C] -> y [OH, OW, C].
  template <class In, class Out>
  void go_image(const In* x, Out* y) const {
    const std::int64_t H = x_[1], W = x_[2], C = x_[3], OH = y_[1], OW = y_[2];
    std::vector<std::int64_t> acc(static_cast<std::size_t>(C));
    for (std::int64_t oh = 0; oh < OH; ++oh) {
      const std::int64_t sh = oh * p_.sh;  // in padded coordinates
      const std::int64_t h0 = std::max<std::int64_t>(0, sh - p_.pt), h1 = std::min(H, sh - p_.pt + p_.kh);
      const std::int64_t ch = count(sh, p_.kh, H, p_.pt, p_.dpb, p_.include_pad);
      for (std::int64_t ow = 0; ow < OW; ++ow) {
        const std::int64_t sw = ow * p_.sw;
        const std::int64_t w0 = std::max<std::int64_t>(0, sw - p_.pl), w1 = std::min(W, sw - p_.pl + p_.kw);
        const std::int64_t cw = count(sw, p_.kw, W, p_.pl, p_.dpr, p_.include_pad);
        const std::int64_t n = std::max<std::int64_t>(1, ch * cw);
        std::fill(acc.begin(), acc.end(), 0);
        for (std::int64_t h = h0; h < h1; ++h) {
          for (std::int64_t w = w0; w < w1; ++w) {
            const In* px = x + (h * W + w) * C;
            for (std::int64_t k = 0; k < C; ++k) acc[static_cast<std::size_t>(k)] += px[k];
          }
        }
        Out* py = y + (oh * OW + ow) * C;
        for (std::int64_t k = 0; k < C; ++k) {
          py[k] = static_cast<Out>(quant::div_round_away(acc[static_cast<std::size_t>(k)], n));
        }
      }
    }
  }

  PoolParams p_{};
  std::int32_t in_ = 0, out_ = 0;
  Shape x_, y_;
};

// -- float32 elementwise ----------------------------------------------------------------

// add, multiply, maximum of float32 tensors of one shape; add and multiply also by a constant that
// varies along the last (channel) axis only, broadcast over the rest (a per-channel scale or shift:
// a batch norm left after a concatenation). The full-shaped operand is input 0 (the serializer orders
// them; the ops commute).
class BinaryF32 final : public Kernel {
 public:
  BinaryF32(const Ctx& c, dnnl::algorithm alg) {
    c.arity(2, 2, 1);
    for (std::size_t i = 0; i < 2; ++i) c.dtype(c.in(i), ACCEL_FLOAT32, "inputs");
    c.dtype(c.out(0), ACCEL_FLOAT32, "output");
    const Shape& s = c.out(0).spec.shape;
    const Shape& b = c.in(1).spec.shape;
    if (c.in(0).spec.shape != s) c.fail("input 0 and the output must have one shape");
    if (s.rank() < 1 || s.elements() == 0) c.fail("empty or scalar tensors are not supported");
    md_ = dnnl::memory::desc({static_cast<std::int64_t>(s.elements())}, dt::f32, tag::a);
    md1_ = md_;
    if (b != s) {
      // [1, ..., 1, C] (or fewer leading ones) against [..., C]: rows of C elements, input 1 broadcast
      const std::int64_t C = s[s.rank() - 1];
      bool channel = alg != dnnl::algorithm::binary_max && c.in(1).constant() && b.rank() >= 1 &&
                     b.rank() <= s.rank() && b[b.rank() - 1] == C && static_cast<std::int64_t>(b.elements()) == C;
      if (!channel) c.fail("input 1 " + b.str() + " must have the output's shape " + s.str() + " or be a per-channel constant");
      const std::int64_t rows = static_cast<std::int64_t>(s.elements()) / C;
      md_ = dnnl::memory::desc({rows, C}, dt::f32, tag::ab);
      md1_ = dnnl::memory::desc({1, C}, dt::f32, tag::ab);
    }
    onednn::guard("binary " + c.n.name, [&] {
      dnnl::binary::primitive_desc pd(onednn::engine(), alg, md_, md1_, md_, user_scratchpad());
      prim_.set<dnnl::binary>(pd);
    });
    ins = {c.n.inputs[0], c.n.inputs[1]};
    outs = {c.n.outputs[0]};
    scratch_bytes = prim_.scratch;
  }

  void run(Exec& e) const override {
    const auto& eng = onednn::engine();
    prim_.exec(e, {{DNNL_ARG_SRC_0, dnnl::memory(md_, eng, e.ptr[ins[0]])},
                   {DNNL_ARG_SRC_1, dnnl::memory(md1_, eng, e.ptr[ins[1]])},
                   {DNNL_ARG_DST, dnnl::memory(md_, eng, e.ptr[outs[0]])}});
  }

 private:
  Prim prim_;
  dnnl::memory::desc md_, md1_;
};

class ActivationF32 final : public Kernel {
 public:
  explicit ActivationF32(const Ctx& c) {
    c.arity(1, 1, 1);
    c.dtype(c.in(0), ACCEL_FLOAT32, "input");
    c.dtype(c.out(0), ACCEL_FLOAT32, "output");
    const Shape& s = c.out(0).spec.shape;
    if (c.in(0).spec.shape != s) c.fail("input and output must have one shape");
    act_ = c.integer("activation", 1, 2);
    hi_ = static_cast<float>(c.n.attrs.number("act_max"));
    if (act_ == 2 && !(hi_ > 0.f && std::isfinite(hi_))) c.fail("bounded relu needs act_max > 0");
    n_ = s.elements();
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

// -- data movement ------------------------------------------------------------------------

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
    c.arity(1, 1u << 16, 1);
    const auto& y = c.out(0).spec;
    const std::int64_t axis = c.integer("axis", 0, std::max(0, y.shape.rank() - 1));
    if (y.shape.rank() < 1) c.fail("cannot concatenate scalars");
    std::size_t outer = 1, inner = accel_sdk::dtype_size(y.dtype);
    for (int d = 0; d < axis; ++d) outer *= static_cast<std::size_t>(y.shape[d]);
    for (int d = static_cast<int>(axis) + 1; d < y.shape.rank(); ++d) inner *= static_cast<std::size_t>(y.shape[d]);
    std::int64_t total = 0;
    for (std::size_t i = 0; i < c.n.inputs.size(); ++i) {
      const auto& x = c.in(i).spec;
      if (x.dtype != y.dtype || x.shape.rank() != y.shape.rank()) c.fail("input " + std::to_string(i) + " does not fit the output");
      for (int d = 0; d < y.shape.rank(); ++d) {
        if (d != axis && x.shape[d] != y.shape[d]) c.fail("input " + std::to_string(i) + " " + x.shape.str() + " does not fit " + y.shape.str());
      }
      total += x.shape[static_cast<int>(axis)];
      chunks_.push_back(static_cast<std::size_t>(x.shape[static_cast<int>(axis)]) * inner);
      ins.push_back(c.n.inputs[i]);
    }
    if (total != y.shape[static_cast<int>(axis)]) c.fail("inputs do not add up to the output along the axis");
    outer_ = outer;
    row_ = static_cast<std::size_t>(total) * inner;
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

// The requantize attributes of a node: multipliers per channel (or one), zero points, clamp.
struct Requant {
  std::vector<std::int32_t> m, shift, z_in;
  std::int64_t z_out = 0, lo = 0, hi = 0;

  static Requant read(const Ctx& c, std::size_t channels, std::int32_t out_dtype) {
    Requant r;
    const auto& m = c.n.attrs.ints("multiplier");
    const auto& s = c.n.attrs.ints("shift");
    const auto& z = c.n.attrs.ints("input_zero_point");
    if (m.size() != s.size() || (m.size() != 1 && m.size() != channels) || (z.size() != 1 && z.size() != m.size())) {
      c.fail("requantize parameters do not fit " + std::to_string(channels) + " channels");
    }
    for (std::size_t i = 0; i < m.size(); ++i) {
      if (!quant::canonical_multiplier(m[i], s[i])) {
        c.fail("multiplier " + std::to_string(i) + " (" + std::to_string(m[i]) + ", shift " + std::to_string(s[i]) +
               ") is not a fixed-point multiplier quantize_multiplier makes");
      }
      r.m.push_back(static_cast<std::int32_t>(m[i]));
      r.shift.push_back(static_cast<std::int32_t>(s[i]));
    }
    for (std::int64_t v : z) {
      if (v < quant::kInt32Min || v > quant::kInt32Max) c.fail("input zero point out of range");
      r.z_in.push_back(static_cast<std::int32_t>(v));
    }
    std::int64_t dlo = 0, dhi = 0;
    switch (out_dtype) {
      case ACCEL_UINT8: dlo = 0, dhi = 255; break;
      case ACCEL_INT8: dlo = -128, dhi = 127; break;
      case ACCEL_INT32: dlo = quant::kInt32Min, dhi = quant::kInt32Max; break;
      default: c.fail("requantize output must be uint8, int8 or int32");
    }
    r.z_out = c.integer("output_zero_point", dlo, dhi);
    r.lo = c.integer("clamp_min", dlo, dhi);
    r.hi = c.integer("clamp_max", dlo, dhi);
    if (r.lo > r.hi) c.fail("clamp_min > clamp_max");
    return r;
  }

  // y[i] for x[i] of channel k.
  std::int64_t apply(std::int64_t x, std::size_t k) const {
    const std::size_t j = m.size() == 1 ? 0 : k;
    const std::int64_t zi = z_in.size() == 1 ? z_in[0] : z_in[j];
    const std::int64_t v = static_cast<std::int64_t>(quant::mbqm(quant::sat32(x - zi), m[j], shift[j])) + z_out;
    return v < lo ? lo : (v > hi ? hi : v);
  }
};

class RequantizeOp final : public Kernel {
 public:
  explicit RequantizeOp(const Ctx& c) {
    c.arity(1, 1, 1);
    const auto& x = c.in(0).spec;
    const auto& y = c.out(0).spec;
    if (x.shape != y.shape || x.shape.rank() < 1) c.fail("input and output must have one shape");
    if (x.dtype != ACCEL_UINT8 && x.dtype != ACCEL_INT8 && x.dtype != ACCEL_INT32) c.fail("requantize input must be uint8, int8 or int32");
    const std::int64_t axis = c.integer("axis", -1, x.shape.rank() - 1);
    channels_ = axis < 0 ? 1 : static_cast<std::size_t>(x.shape[static_cast<int>(axis)]);
    inner_ = 1;
    for (int d = static_cast<int>(axis) + 1; axis >= 0 && d < x.shape.rank(); ++d) inner_ *= static_cast<std::size_t>(x.shape[d]);
    r_ = Requant::read(c, channels_, y.dtype);
    if (axis < 0 && r_.m.size() != 1) c.fail("per-tensor requantize has one multiplier");
    n_ = x.shape.elements();
    in_ = x.dtype;
    out_ = y.dtype;
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    switch (in_) {
      case ACCEL_UINT8: by_out<std::uint8_t>(e); break;
      case ACCEL_INT8: by_out<std::int8_t>(e); break;
      default: by_out<std::int32_t>(e); break;
    }
  }

 private:
  template <class In>
  void by_out(Exec& e) const {
    switch (out_) {
      case ACCEL_UINT8: go<In, std::uint8_t>(e); break;
      case ACCEL_INT8: go<In, std::int8_t>(e); break;
      default: go<In, std::int32_t>(e); break;
    }
  }
  template <class In, class Out>
  void go(Exec& e) const {
    const In* x = static_cast<const In*>(e.ptr[ins[0]]);
    Out* y = static_cast<Out*>(e.ptr[outs[0]]);
    for (std::size_t i = 0; i < n_; ++i) y[i] = static_cast<Out>(r_.apply(x[i], channels_ == 1 ? 0 : (i / inner_) % channels_));
  }

  Requant r_;
  std::size_t channels_ = 1, inner_ = 1, n_ = 0;
  std::int32_t in_ = 0, out_ = 0;
};

class QnnAdd final : public Kernel {
 public:
  explicit QnnAdd(const Ctx& c) {
    c.arity(2, 2, 1);
    const auto& y = c.out(0).spec;
    if (y.dtype != ACCEL_UINT8 && y.dtype != ACCEL_INT8) c.fail("qnn.add output must be uint8 or int8");
    for (std::size_t i = 0; i < 2; ++i) {
      if (c.in(i).spec.dtype != y.dtype || c.in(i).spec.shape != y.shape) c.fail("inputs and output must have one dtype and shape");
    }
    const auto& m = c.n.attrs.ints("multipliers", 3);
    const auto& s = c.n.attrs.ints("shifts", 3);
    const std::int64_t lo = y.dtype == ACCEL_UINT8 ? 0 : -128, hi = y.dtype == ACCEL_UINT8 ? 255 : 127;
    const auto z = c.ints("zero_points", 3, lo, hi);
    for (int i = 0; i < 3; ++i) {
      if (!quant::canonical_multiplier(m[i], s[i])) c.fail("multiplier " + std::to_string(i) + " is not a fixed-point multiplier quantize_multiplier makes");
      m_[i] = static_cast<std::int32_t>(m[i]);
      s_[i] = static_cast<std::int32_t>(s[i]);
      z_[i] = z[i];
    }
    left_ = static_cast<int>(c.integer("left_shift", 0, 24));
    lo_ = c.integer("clamp_min", lo, hi);
    hi_ = c.integer("clamp_max", lo, hi);
    n_ = y.shape.elements();
    signed_ = y.dtype == ACCEL_INT8;
    if (signed_) tabulate<std::int8_t>(); else tabulate<std::uint8_t>();
    ins = {c.n.inputs[0], c.n.inputs[1]};
    outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    const auto* a = static_cast<const std::uint8_t*>(e.ptr[ins[0]]);
    const auto* b = static_cast<const std::uint8_t*>(e.ptr[ins[1]]);
    auto* y = static_cast<std::uint8_t*>(e.ptr[outs[0]]);
    const std::uint8_t* t = table_.data();
    for (std::size_t i = 0; i < n_; ++i) y[i] = t[(static_cast<std::size_t>(a[i]) << 8) | b[i]];
  }

 private:
  // Every result depends on the two 8-bit inputs only: the definition over all 2^16 pairs,
  // indexed by their bit patterns.
  template <class T>
  void tabulate() {
    table_.resize(1u << 16);
    for (int a = 0; a < 256; ++a) {
      for (int b = 0; b < 256; ++b) {
        const std::int64_t va = static_cast<T>(a), vb = static_cast<T>(b);
        const std::int64_t xa = quant::mbqm(quant::sat32((va - z_[0]) * (std::int64_t{1} << left_)), m_[0], s_[0]);
        const std::int64_t xb = quant::mbqm(quant::sat32((vb - z_[1]) * (std::int64_t{1} << left_)), m_[1], s_[1]);
        const std::int64_t v = static_cast<std::int64_t>(quant::mbqm(quant::sat32(xa + xb), m_[2], s_[2])) + z_[2];
        const T out = static_cast<T>(v < lo_ ? lo_ : (v > hi_ ? hi_ : v));
        std::memcpy(&table_[(static_cast<std::size_t>(a) << 8) | static_cast<std::size_t>(b)], &out, 1);
      }
    }
  }

  std::vector<std::uint8_t> table_;
  std::int32_t m_[3] = {}, s_[3] = {};
  std::int64_t z_[3] = {};
  int left_ = 0;
  std::int64_t lo_ = 0, hi_ = 0;
  std::size_t n_ = 0;
  bool signed_ = false;
};

// -- quantized convolution and dense -------------------------------------------------------

// qnn.conv2d / qnn.dense (+ int32 bias, fused relu) + requantize: accel_sdk's
// IntConvRequantize, exact int32 accumulators from oneDNN on CPUs with and without VNNI
// (its int8 path, or its exact float32 path where that is faster), requantized bit for bit
// by accel_sdk/requantize.hpp, band by band while they are in cache.
class QnnConv final : public Kernel {
 public:
  QnnConv(const Ctx& c, bool dense) {
    c.arity(2, 3, 1);
    const auto& x = c.in(0);
    const auto& w = c.in(1);
    const auto& y = c.out(0);
    c.activation(x, "data");
    c.constant(w, "weights");
    auto q8 = [&](const GraphTensor& t, const char* what) {
      if (t.spec.dtype != ACCEL_UINT8 && t.spec.dtype != ACCEL_INT8) c.fail(std::string(what) + " must be uint8 or int8, got " + t.spec.describe());
    };
    q8(x, "data");
    q8(w, "weights");
    q8(y, "output");
    onednn::IntConvSpec spec;
    const Shape& xs = x.spec.shape;
    const Shape& ws = w.spec.shape;
    const Shape& ys = y.spec.shape;
    std::int64_t O = 0;
    if (dense) {
      c.rank(x, 2, "data");
      c.rank(w, 2, "weights");
      c.rank(y, 2, "output");
      O = ws[0];
      if (ws[1] != xs[1] || ys != Shape{xs[0], O} || xs.elements() == 0 || ws.elements() == 0) {
        c.fail("shapes " + xs.str() + " x " + ws.str() + " -> " + ys.str() + " do not fit");
      }
      spec = onednn::dense_spec(xs[0], xs[1], O, x.spec.dtype, 0, w.spec.dtype, w.data);
    } else {
      c.rank(x, 4, "data");
      c.rank(w, 4, "weights");
      c.rank(y, 4, "output");
      const std::int64_t groups = c.integer("groups", 1, 1 << 20);
      const Window win = conv_window(c, ws[1], ws[2]);
      check_conv_shapes(c, xs, ws, ys, groups, win);
      O = ws[0];
      spec.shape = conv_shape(xs, ws, groups, win);
      spec.data_dtype = x.spec.dtype;
      spec.weight_dtype = w.spec.dtype;
      spec.weights = w.data;
      spec.weight_layout = onednn::WeightLayout::ohwi;
    }
    const std::int64_t xlo = x.spec.dtype == ACCEL_UINT8 ? 0 : -128;
    spec.data_zero_point = static_cast<std::int32_t>(c.integer("data_zero_point", xlo, xlo + 255));
    const std::int64_t wlo = w.spec.dtype == ACCEL_UINT8 ? 0 : -128;
    const auto& wz = c.n.attrs.ints("weight_zero_point");
    if (wz.size() != 1 && wz.size() != static_cast<std::size_t>(O)) c.fail("weight zero points must be 1 or one per output channel");
    spec.weight_zero_points.clear();
    for (std::int64_t z : wz) {
      if (z < wlo || z > wlo + 255) c.fail("weight zero point outside the weight dtype's range");
      spec.weight_zero_points.push_back(static_cast<std::int32_t>(z));
    }
    std::vector<std::int32_t> bias;
    if (c.n.inputs.size() == 3) {
      const auto& b = c.in(2);
      c.constant(b, "bias");
      c.dtype(b, ACCEL_INT32, "bias");
      if (b.spec.shape != Shape{O}) c.fail("bias must be [" + std::to_string(O) + "], got " + b.spec.shape.str());
      bias.resize(static_cast<std::size_t>(O));
      std::memcpy(bias.data(), b.data, bias.size() * sizeof(std::int32_t));
    }
    // the requantize attributes (serializer.py): multipliers per channel or one, accumulators' zero point 0
    const Requant r = Requant::read(c, static_cast<std::size_t>(O), y.spec.dtype);
    // the accumulators' channel axis is the output's last (NHWC, or [M, N]); -1: one multiplier
    const std::int64_t axis = c.integer("axis", -1, y.spec.shape.rank() - 1);
    if (axis != -1 && axis != y.spec.shape.rank() - 1) c.fail("axis must be -1 or the channel axis " + std::to_string(y.spec.shape.rank() - 1));
    if (axis == -1 && r.m.size() != 1) c.fail("per-channel multipliers need the channel axis, got axis -1");
    for (std::int32_t z : r.z_in) {
      if (z != 0) c.fail("the accumulators' zero point must be 0");
    }
    std::vector<quant::Multiplier> ms;
    for (std::size_t i = 0; i < r.m.size(); ++i) ms.push_back({r.m[i], r.shift[i]});
    quant::ChannelRequantizer rq(static_cast<std::size_t>(O), ms, static_cast<std::int32_t>(r.z_out),
                                 static_cast<std::int32_t>(r.lo), static_cast<std::int32_t>(r.hi), bias);
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
    // small layers on one thread: waking a team costs more than it saves there
    const double macs = static_cast<double>(ys.elements()) * static_cast<double>(ws.elements() / ws[0]);
    op_ = std::make_unique<onednn::IntConvRequantize>(spec, std::move(rq), y.spec.dtype, c.threads_for(macs));
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
    if (c.n.inputs.size() == 1 && c.in(0).spec.dtype == ACCEL_INT32) return std::make_unique<PoolInt>(c, false);
    return std::make_unique<PoolOneDnn>(c);
  }
  if (k == "qnn_avg_pool2d") return std::make_unique<PoolInt>(c, true);
  if (k == "add") return std::make_unique<BinaryF32>(c, dnnl::algorithm::binary_add);
  if (k == "maximum") return std::make_unique<BinaryF32>(c, dnnl::algorithm::binary_max);
  if (k == "multiply") return std::make_unique<BinaryF32>(c, dnnl::algorithm::binary_mul);
  if (k == "activation") return std::make_unique<ActivationF32>(c);
  if (k == "reshape") return std::make_unique<Reshape>(c);
  if (k == "concatenate") return std::make_unique<Concatenate>(c);
  if (k == "requantize") return std::make_unique<RequantizeOp>(c);
  if (k == "qnn_add") return std::make_unique<QnnAdd>(c);
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

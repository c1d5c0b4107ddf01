// acl's nodes, read the same whichever library computes them: the attributes of a
// node checked against the shapes of its tensors (windows, pools, requantize
// parameters, quantized layers), and the kernels that are accel's own on every CPU
// because no library computes them with accel.quant's rounding (integer average pools,
// requantize, qnn.add). runtime.cpp (oneDNN) and runtime_acl.cpp (Arm Compute Library)
// build their kernels on these; the templates take the runtime's Call.
#ifndef ACCEL_ACL_NODES_HPP
#define ACCEL_ACL_NODES_HPP

#include <accel_sdk/geometry.hpp>
#include <accel_sdk/graph_blob.hpp>
#include <accel_sdk/graph_runtime.hpp>
#include <accel_sdk/quant.hpp>
#include <accel_sdk/requantize.hpp>
#include <accel_sdk/tensor.hpp>
#include <accel_sdk/thread_pool.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace accel_acl {

using accel_sdk::GraphTensor;
using accel_sdk::Shape;
using Ctx = accel_sdk::NodeContext;
using accel_sdk::GraphNode;
namespace quant = accel_sdk::quant;

// The version of the "acl" graph blob kind this runtime reads.
constexpr std::uint32_t kKindVersion = 1;

// ReLU (act 1) or bounded ReLU [0, hi] (act 2) of a node: its `activation` and `act_max`.
struct Activation {
  std::int64_t act = 0;
  float hi = 0.f;

  static Activation read(const Ctx& c, std::int64_t lo) {
    Activation a;
    a.act = c.integer("activation", lo, 2);
    a.hi = static_cast<float>(c.n.attrs.number("act_max"));
    if (a.act == 2 && !(a.hi > 0.f && std::isfinite(a.hi))) c.fail("bounded relu needs act_max > 0");
    return a;
  }
  // An activation node: one float32 input and output of one shape, ReLU or bounded ReLU.
  static Activation node(const Ctx& c) {
    c.arity(1, 1, 1);
    c.dtype(c.in(0), ACCEL_FLOAT32, "input");
    c.dtype(c.out(0), ACCEL_FLOAT32, "output");
    if (c.in(0).spec.shape != c.out(0).spec.shape) c.fail("input and output must have one shape");
    return read(c, 1);
  }
};

struct Window {
  std::int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
};

// strides, dilation, padding of a conv node, and the output shape they give for in_shape.
inline Window conv_window(const Ctx& c, std::int64_t kh, std::int64_t kw) {
  const auto s = c.ints("strides", 2, 1, 1 << 16);
  const auto d = c.ints("dilation", 2, 1, 1 << 16);
  const auto p = c.ints("padding", 4, 0, 1 << 16);
  return {kh, kw, s[0], s[1], d[0], d[1], p[0], p[1], p[2], p[3]};
}

inline void check_conv_shapes(const Ctx& c, const Shape& x, const Shape& w, const Shape& y, std::int64_t groups, const Window& win) {
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


struct PoolParams {
  std::string kind;
  std::int64_t kh, kw, sh, sw, pt, pl, pb, pr;
  std::int64_t dpb, dpr;  // declared bottom/right padding (without the ceil-mode extension)
  bool include_pad;
};

inline PoolParams pool_params(const Ctx& c, const Shape& x, const Shape& y) {
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

// A requantize of 8-bit data to int32 that only an integer average pool reads (the widening
// before it, as the QDQ import writes an average): the pool takes it in and reads the 8-bit
// tensor, and the requantize does nothing (RequantizeOp and PoolInt both ask this). Per
// tensor, or per channel along the last axis of a 4-D tensor (NHWC: the pool's channels).
inline bool pool_takes_widen(const Ctx& rq) {
  const GraphNode& n = rq.n;
  if (n.kernel != "requantize" || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  const auto& x = rq.g.tensor(n.inputs[0]).spec;
  const auto& y = rq.g.tensor(n.outputs[0]).spec;
  if ((x.dtype != ACCEL_UINT8 && x.dtype != ACCEL_INT8) || y.dtype != ACCEL_INT32 || rq.g.is_output(n.outputs[0])) return false;
  if (!n.attrs.has("axis")) return false;
  const std::int64_t axis = rq.n.attrs.integer("axis");
  if (axis >= 0 && !(x.shape.rank() == 4 && axis == 3)) return false;
  const GraphNode* pool = rq.g.only_reader(n.outputs[0]);
  if (pool == nullptr || pool->kernel != "pool2d" || pool->inputs.size() != 1 || pool->outputs.size() != 1) return false;
  if (!pool->attrs.has("kind") || pool->attrs.string("kind") != "avg") return false;
  return rq.g.tensor(pool->outputs[0]).spec.dtype == ACCEL_INT32 && x.shape.rank() == 4;
}

// A requantize of 8-bit data as a table: channel k's result for byte b at [k * 256 + b].
inline std::vector<std::int32_t> byte_table(const Requant& r, std::size_t channels, std::int32_t in_dtype) {
  std::vector<std::int32_t> t(channels * 256);
  for (std::size_t k = 0; k < channels; ++k) {
    for (int b = 0; b < 256; ++b) {
      const std::int64_t v = in_dtype == ACCEL_INT8 ? static_cast<std::int8_t>(b) : b;
      t[k * 256 + static_cast<std::size_t>(b)] = static_cast<std::int32_t>(r.apply(v, k));
    }
  }
  return t;
}

// Integer average pool: int64 window sums divided rounding half away from zero, as the
// reference (oneDNN rounds its integer averages another way). Reads In, writes Out.
template <class Call>
class PoolInt final : public accel_sdk::Kernel<Call> {
  using Exec = accel_sdk::KernelExec<Call>;

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
    this->ins = {c.n.inputs[0]};
    this->outs = {c.n.outputs[0]};
    const GraphNode* widen = cast ? nullptr : c.g.producer(c.n.inputs[0]);
    if (widen != nullptr && pool_takes_widen(Ctx{c.g, *widen, c.threads})) take_widen(Ctx{c.g, *widen, c.threads});
  }

  void run(Exec& e) const override {
    if (!widen_.empty()) {
      if (in_ == ACCEL_UINT8) {
        widened<std::uint8_t>(e);
      } else {
        widened<std::int8_t>(e);
      }
      return;
    }
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
      go_image<In, Out>(static_cast<const In*>(e.ptr[this->ins[0]]) + n * H * W * C,
                        static_cast<Out*>(e.ptr[this->outs[0]]) + n * OH * OW * C);
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

  // The widening requantize rq (pool_takes_widen): read its 8-bit input, widen through its table.
  // A table affine in the input value (a cast, or a multiplier that is a power of two, as the
  // QDQ import widens) lets a window sum the 8-bit values in int32 and widen the sum once.
  void take_widen(const Ctx& rq) {
    const auto& x = rq.in(0).spec;
    const std::int64_t axis = rq.integer("axis", -1, x.shape.rank() - 1);
    const std::size_t channels = axis < 0 ? 1 : static_cast<std::size_t>(x.shape[3]);
    const Requant r = Requant::read(rq, channels, ACCEL_INT32);
    in_ = x.dtype;
    widen_ = byte_table(r, channels, in_);
    per_channel_ = channels > 1;
    affine_ = true;
    base_.assign(channels, 0);
    step_.assign(channels, 0);
    for (std::size_t k = 0; k < channels && affine_; ++k) {
      affine_ = quant::affine_byte_table(widen_.data() + k * 256, in_ == ACCEL_INT8, base_[k], step_[k]);
    }
    affine_ = affine_ && p_.kh * p_.kw <= (std::int64_t{1} << 23);  // byte sums of a window fit int32
    this->ins = {rq.n.inputs[0]};
  }

  template <class In>
  void widened(Exec& e) const {
    const std::int64_t H = x_[1], W = x_[2], C = x_[3], OH = y_[1], OW = y_[2];
    const In* x0 = static_cast<const In*>(e.ptr[this->ins[0]]);
    std::int32_t* y0 = static_cast<std::int32_t*>(e.ptr[this->outs[0]]);
    const std::size_t c = static_cast<std::size_t>(C);
    std::vector<std::int64_t> acc(c);
    std::vector<std::int32_t> bytes(c);
    for (std::int64_t img = 0; img < x_[0]; ++img) {
      const In* x = x0 + img * H * W * C;
      std::int32_t* y = y0 + img * OH * OW * C;
      for (std::int64_t oh = 0; oh < OH; ++oh) {
        const std::int64_t sh = oh * p_.sh;
        const std::int64_t h0 = std::max<std::int64_t>(0, sh - p_.pt), h1 = std::min(H, sh - p_.pt + p_.kh);
        const std::int64_t ch = count(sh, p_.kh, H, p_.pt, p_.dpb, p_.include_pad);
        for (std::int64_t ow = 0; ow < OW; ++ow) {
          const std::int64_t sw = ow * p_.sw;
          const std::int64_t w0 = std::max<std::int64_t>(0, sw - p_.pl), w1 = std::min(W, sw - p_.pl + p_.kw);
          const std::int64_t n = std::max<std::int64_t>(1, ch * count(sw, p_.kw, W, p_.pl, p_.dpr, p_.include_pad));
          if (affine_) {
            // the window's values summed in int32 (a loop the compiler vectorizes), widened once:
            // padding adds nothing, so the base counts the window's real taps only
            std::fill(bytes.begin(), bytes.end(), 0);
            for (std::int64_t h = h0; h < h1; ++h) {
              for (std::int64_t w = w0; w < w1; ++w) {
                const In* px = x + (h * W + w) * C;
                for (std::size_t k = 0; k < c; ++k) bytes[k] += px[k];
              }
            }
            const std::int64_t taps = (h1 - h0) * (w1 - w0);
            for (std::size_t k = 0; k < c; ++k) {
              const std::size_t j = per_channel_ ? k : 0;
              acc[k] = taps * base_[j] + step_[j] * bytes[k];
            }
          } else {
            std::fill(acc.begin(), acc.end(), 0);
            for (std::int64_t h = h0; h < h1; ++h) {
              for (std::int64_t w = w0; w < w1; ++w) {
                const In* px = x + (h * W + w) * C;
                for (std::size_t k = 0; k < c; ++k) {
                  acc[k] += widen_[(per_channel_ ? k * 256 : 0) + static_cast<std::uint8_t>(px[k])];
                }
              }
            }
          }
          std::int32_t* py = y + (oh * OW + ow) * C;
          for (std::size_t k = 0; k < c; ++k) py[k] = static_cast<std::int32_t>(quant::div_round_away(acc[k], n));
        }
      }
    }
  }

  PoolParams p_{};
  std::int32_t in_ = 0, out_ = 0;
  Shape x_, y_;
  std::vector<std::int32_t> widen_;  // taken widening: its table (as byte_table), else empty
  std::vector<std::int64_t> base_, step_;
  bool per_channel_ = false, affine_ = false;
};

// The per-tensor scale and zero point of a quantize (`quantize`: its output is the 8-bit side) or a
// dequantize (its input is), one tensor in and one out of one shape.
struct ByteQuant {
  float scale = 1.f;
  std::int32_t zero_point = 0;
  bool u8 = true;  // the 8-bit side is uint8 (else int8)

  static ByteQuant read(const Ctx& c, bool quantize) {
    c.arity(1, 1, 1);
    if (c.in(0).spec.shape != c.out(0).spec.shape) c.fail("input and output must have one shape");
    const std::string what = quantize ? "quantize output" : "dequantize input";
    const std::int32_t dtype = (quantize ? c.out(0) : c.in(0)).spec.dtype;
    if (dtype != ACCEL_UINT8 && dtype != ACCEL_INT8) c.fail(what + " must be uint8 or int8");
    ByteQuant q;
    q.scale = static_cast<float>(c.n.attrs.number("scale"));
    if (!(q.scale > 0.f && std::isfinite(q.scale))) c.fail(std::string(quantize ? "quantize" : "dequantize") + " scale must be finite and > 0");
    q.u8 = dtype == ACCEL_UINT8;
    q.zero_point = static_cast<std::int32_t>(c.integer("zero_point", q.u8 ? 0 : -128, q.u8 ? 255 : 127));
    return q;
  }
};

// qnn.dequantize of uint8 / int8 data quantized per tensor: float32(q - z) * s, accel.quant's
// definition bit for bit (accel_sdk::quant::dequantize), on every CPU.
template <class Call>
class DequantizeOp final : public accel_sdk::Kernel<Call> {
  using Exec = accel_sdk::KernelExec<Call>;

 public:
  explicit DequantizeOp(const Ctx& c) : q_(ByteQuant::read(c, false)) {
    c.dtype(c.out(0), ACCEL_FLOAT32, "output");
    n_ = c.in(0).spec.shape.elements();
    this->ins = {c.n.inputs[0]};
    this->outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    float* y = static_cast<float*>(e.ptr[this->outs[0]]);
    const void* x = e.ptr[this->ins[0]];
    if (q_.u8) {
      quant::dequantize(static_cast<const std::uint8_t*>(x), y, n_, q_.scale, q_.zero_point);
    } else {
      quant::dequantize(static_cast<const std::int8_t*>(x), y, n_, q_.scale, q_.zero_point);
    }
  }

 private:
  ByteQuant q_;
  std::size_t n_ = 0;
};

// qnn.quantize of float32 data to uint8 / int8 per tensor: accel.quant's definition bit for bit
// (accel_sdk::quant::Quantizer; ACL's NEQuantizationLayer multiplies by 1 / s, which rounds
// differently), in ranges on the handle's threads from kSmallLookup elements.
template <class Call>
class QuantizeOp final : public accel_sdk::Kernel<Call> {
  using Exec = accel_sdk::KernelExec<Call>;

 public:
  explicit QuantizeOp(const Ctx& c) {
    const ByteQuant b = ByteQuant::read(c, true);
    c.dtype(c.in(0), ACCEL_FLOAT32, "input");
    const std::int64_t lo = b.u8 ? 0 : -128;
    q_ = quant::Quantizer(b.scale, b.zero_point, lo, lo + 255);
    n_ = c.out(0).spec.shape.elements();
    shares_ = static_cast<std::size_t>(c.threads_for(static_cast<double>(n_), accel_sdk::kSmallLookup));
    this->ins = {c.n.inputs[0]};
    this->outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    const float* x = static_cast<const float*>(e.ptr[this->ins[0]]);
    auto* y = static_cast<std::uint8_t*>(e.ptr[this->outs[0]]);
    accel_sdk::parallel_ranges(n_, shares_, [&](std::size_t i0, std::size_t i1) { q_.run(x + i0, y + i0, i1 - i0); });
  }

 private:
  quant::Quantizer q_;
  std::size_t n_ = 0, shares_ = 1;
};

// A transpose node: its axes (output axis i is input axis axes[i]), checked to be a permutation
// that gives the output's shape from the input's, one dtype.
inline std::vector<int> transpose_axes(const Ctx& c) {
  c.arity(1, 1, 1);
  const Shape& x = c.in(0).spec.shape;
  const Shape& y = c.out(0).spec.shape;
  if (c.in(0).spec.dtype != c.out(0).spec.dtype) c.fail("transpose must keep the dtype");
  const int r = x.rank();
  if (y.rank() != r || r < 1) c.fail("transpose must keep the rank");
  const auto a = c.ints("axes", static_cast<std::size_t>(r), 0, r - 1);
  std::vector<int> axes(a.begin(), a.end());
  std::vector<bool> seen(static_cast<std::size_t>(r), false);
  for (int i = 0; i < r; ++i) {
    if (seen[static_cast<std::size_t>(axes[i])]) c.fail("transpose axes must be a permutation");
    seen[static_cast<std::size_t>(axes[i])] = true;
    if (y[i] != x[axes[i]]) c.fail("transpose output must be " + x.str() + " permuted by its axes, got " + y.str());
  }
  if (x.elements() == 0) c.fail("empty tensors are not supported");
  return axes;
}

// A transpose of at most 4 dimensions as a loop nest over the output, reading the input through
// its permuted strides: what the Arm runtime runs for the permutations its NEPermute refuses
// (Arm Compute Library 20.08 lists the ones it takes).
struct PermuteCopy {
  std::int64_t dims[4] = {1, 1, 1, 1};     // the output's, padded with leading 1s
  std::int64_t strides[4] = {0, 0, 0, 0};  // the input's, in elements, for each output axis
  std::size_t elem = 1;

  PermuteCopy(const Ctx& c, const std::vector<int>& axes) {
    const Shape& x = c.in(0).spec.shape;
    const int r = x.rank();
    if (r > 4) c.fail("transpose of more than 4 dimensions");
    std::int64_t in_strides[4] = {0, 0, 0, 0}, st = 1;
    for (int d = r - 1; d >= 0; --d) {
      in_strides[d] = st;
      st *= x[d];
    }
    for (int i = 0; i < r; ++i) {
      dims[4 - r + i] = x[axes[static_cast<std::size_t>(i)]];
      strides[4 - r + i] = in_strides[axes[static_cast<std::size_t>(i)]];
    }
    elem = accel_sdk::dtype_size(c.in(0).spec.dtype);
  }

  void run(const void* in, void* out) const {
    if (elem == 1) {
      go(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out));
    } else {
      go(static_cast<const std::uint32_t*>(in), static_cast<std::uint32_t*>(out));
    }
  }

 private:
  template <class T>
  void go(const T* x, T* y) const {
    for (std::int64_t a = 0; a < dims[0]; ++a)
      for (std::int64_t b = 0; b < dims[1]; ++b)
        for (std::int64_t c = 0; c < dims[2]; ++c) {
          const T* row = x + a * strides[0] + b * strides[1] + c * strides[2];
          for (std::int64_t d = 0; d < dims[3]; ++d) *y++ = row[d * strides[3]];
        }
  }
};

// A float32 softmax along the last axis, as rows of its last dimension. A library computes
// it; fix() then gives NaN to the rows where the reference's exp(x - max) / sum(...) has no
// number, which libraries leave unspecified: a row holding NaN or +Inf, or only -Inf.
struct SoftmaxRows {
  std::size_t rows = 0, width = 0;

  static SoftmaxRows read(const Ctx& c) {
    c.arity(1, 1, 1);
    c.dtype(c.in(0), ACCEL_FLOAT32, "input");
    c.dtype(c.out(0), ACCEL_FLOAT32, "output");
    const Shape& s = c.in(0).spec.shape;
    if (s != c.out(0).spec.shape || s.rank() < 1) c.fail("input and output must have one shape");
    if (s.elements() == 0) c.fail("empty tensors are not supported");
    SoftmaxRows r;
    r.width = static_cast<std::size_t>(s[s.rank() - 1]);
    r.rows = s.elements() / r.width;
    return r;
  }

  void fix(const float* x, float* y) const {
    const float inf = std::numeric_limits<float>::infinity();
    for (std::size_t r = 0; r < rows; ++r) {
      const float* row = x + r * width;
      bool number = false, none = false;
      for (std::size_t i = 0; i < width; ++i) {
        const float v = row[i];
        none = none || !(v < inf);  // NaN or +Inf
        number = number || v > -inf;
      }
      if (none || !number) std::fill(y + r * width, y + (r + 1) * width, std::numeric_limits<float>::quiet_NaN());
    }
  }
};


template <class Call>
class RequantizeOp final : public accel_sdk::Kernel<Call> {
  using Exec = accel_sdk::KernelExec<Call>;

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
    if (in_ != ACCEL_INT32) table_ = byte_table(r_, channels_, in_);
    taken_ = pool_takes_widen(c);  // then the pool reads x and this kernel writes nothing
    this->ins = {c.n.inputs[0]};
    this->outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    if (taken_) return;
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
    const In* x = static_cast<const In*>(e.ptr[this->ins[0]]);
    Out* y = static_cast<Out*>(e.ptr[this->outs[0]]);
    if (sizeof(In) == 1) {  // 8-bit input: a table of every result (256 per channel), built once
      table<In, Out>(x, y);
      return;
    }
    for (std::size_t i = 0; i < n_; ++i) y[i] = static_cast<Out>(r_.apply(x[i], channels_ == 1 ? 0 : (i / inner_) % channels_));
  }

  // y[i] = table[channel][byte of x[i]]: a requantize of 8-bit data (the widening before an
  // integer average pool, a dtype change) has 256 possible results per channel.
  template <class In, class Out>
  void table(const In* x, Out* y) const {
    const std::int32_t* t = table_.data();
    if (channels_ == 1) {
      for (std::size_t i = 0; i < n_; ++i) y[i] = static_cast<Out>(t[static_cast<std::uint8_t>(x[i])]);
      return;
    }
    for (std::size_t i = 0; i < n_;) {  // runs of inner_ elements share a channel
      for (std::size_t k = 0; k < channels_ && i < n_; ++k) {
        const std::int32_t* tk = t + k * 256;
        const std::size_t end = std::min(n_, i + inner_);
        for (; i < end; ++i) y[i] = static_cast<Out>(tk[static_cast<std::uint8_t>(x[i])]);
      }
    }
  }

  Requant r_;
  std::size_t channels_ = 1, inner_ = 1, n_ = 0;
  std::int32_t in_ = 0, out_ = 0;
  std::vector<std::int32_t> table_;  // 8-bit input: channel k's result for byte b at [k * 256 + b]
  bool taken_ = false;                // the average pool that reads y computes from x (pool_takes_widen)
};

template <class Call>
class QnnAdd final : public accel_sdk::Kernel<Call> {
  using Exec = accel_sdk::KernelExec<Call>;

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
    quant::Multiplier mult[3];
    std::int64_t zero[3];
    for (int i = 0; i < 3; ++i) {
      if (!quant::canonical_multiplier(m[i], s[i])) c.fail("multiplier " + std::to_string(i) + " is not a fixed-point multiplier quantize_multiplier makes");
      mult[i] = {static_cast<std::int32_t>(m[i]), static_cast<std::int32_t>(s[i])};
      zero[i] = z[i];
    }
    const int left = static_cast<int>(c.integer("left_shift", 0, 24));
    const std::int64_t clamp_lo = c.integer("clamp_min", lo, hi);
    const std::int64_t clamp_hi = c.integer("clamp_max", lo, hi);
    if (clamp_lo > clamp_hi) c.fail("clamp_min is above clamp_max");
    n_ = y.shape.elements();
    // a large add in ranges on accel-sdk's pool (whose caller does not wait for a sleeping worker)
    shares_ = static_cast<std::size_t>(c.threads_for(static_cast<double>(n_), accel_sdk::kSmallLookup));
    table_ = quant::AddTable(y.dtype == ACCEL_INT8, mult, zero, left, clamp_lo, clamp_hi);
    this->ins = {c.n.inputs[0], c.n.inputs[1]};
    this->outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    const auto* a = static_cast<const std::uint8_t*>(e.ptr[this->ins[0]]);
    const auto* b = static_cast<const std::uint8_t*>(e.ptr[this->ins[1]]);
    auto* y = static_cast<std::uint8_t*>(e.ptr[this->outs[0]]);
    accel_sdk::parallel_ranges(n_, shares_, [&](std::size_t i0, std::size_t i1) { table_.run(a + i0, b + i0, y + i0, i1 - i0); });
  }

 private:
  quant::AddTable table_;
  std::size_t n_ = 0, shares_ = 1;
};


// -- checks both kernel paths make ------------------------------------------------------

// The data, constant weights and output of a float32 layer (inputs 0 and 1, output 0), of rank r.
struct FloatOperands {
  const GraphTensor &x, &w, &y;
};
inline FloatOperands float_operands(const Ctx& c, int r) {
  c.arity(2, 3, 1);
  const FloatOperands o{c.in(0), c.in(1), c.out(0)};
  c.activation(o.x, "data");
  c.constant(o.w, "weights");
  for (const auto* t : {&o.x, &o.w, &o.y}) {
    c.dtype(*t, ACCEL_FLOAT32, "data, weights and output");
    c.rank(*t, r, "data, weights and output");
  }
  return o;
}

// The constant float32 bias [outputs] (input 2) of a float32 layer, or none.
inline const float* float_bias(const Ctx& c, std::int64_t outputs) {
  if (c.n.inputs.size() != 3) return nullptr;
  const auto& b = c.in(2);
  c.constant(b, "bias");
  c.dtype(b, ACCEL_FLOAT32, "bias");
  if (b.spec.shape != Shape{outputs}) c.fail("bias must be [" + std::to_string(outputs) + "], got " + b.spec.shape.str());
  return reinterpret_cast<const float*>(b.data);
}

// A dense layer's [M, K] x [N, K] -> [M, N] shapes.
inline void check_dense_shapes(const Ctx& c, const Shape& x, const Shape& w, const Shape& y) {
  if (w[1] != x[1] || y != Shape{x[0], w[0]} || x[0] * x[1] * w[0] == 0) {
    c.fail("shapes " + x.str() + " x " + w.str() + " -> " + y.str() + " do not fit");
  }
}

// add / multiply / maximum of float32: input 0 of the output's shape; input 1 of it too, or (where
// `channel` allows) a constant varying along the last axis only. True when input 1 is that constant.
inline bool float_binary(const Ctx& c, bool channel) {
  c.arity(2, 2, 1);
  for (std::size_t i = 0; i < 2; ++i) c.dtype(c.in(i), ACCEL_FLOAT32, "inputs");
  c.dtype(c.out(0), ACCEL_FLOAT32, "output");
  const Shape& s = c.out(0).spec.shape;
  const Shape& b = c.in(1).spec.shape;
  if (c.in(0).spec.shape != s) c.fail("input 0 and the output must have one shape");
  if (s.rank() < 1 || s.elements() == 0) c.fail("empty or scalar tensors are not supported");
  if (b == s) return false;
  const std::int64_t C = s[s.rank() - 1];
  const bool ok = channel && c.in(1).constant() && b.rank() >= 1 && b.rank() <= s.rank() && b[b.rank() - 1] == C &&
                  static_cast<std::int64_t>(b.elements()) == C;
  if (!ok) c.fail("input 1 " + b.str() + " must have the output's shape " + s.str() + " or be a per-channel constant");
  return true;
}

// A concatenation's axis, its inputs checked against its output (one dtype and rank, equal off the axis).
inline std::int64_t concatenate_axis(const Ctx& c) {
  c.arity(1, 1u << 16, 1);
  const auto& y = c.out(0).spec;
  if (y.shape.rank() < 1) c.fail("cannot concatenate scalars");
  const std::int64_t axis = c.integer("axis", 0, std::max(0, y.shape.rank() - 1));
  std::int64_t total = 0;
  for (std::size_t i = 0; i < c.n.inputs.size(); ++i) {
    const auto& x = c.in(i).spec;
    if (x.dtype != y.dtype || x.shape.rank() != y.shape.rank()) c.fail("input " + std::to_string(i) + " does not fit the output");
    for (int d = 0; d < y.shape.rank(); ++d) {
      if (d != axis && x.shape[d] != y.shape[d]) c.fail("input " + std::to_string(i) + " " + x.shape.str() + " does not fit " + y.shape.str());
    }
    total += x.shape[static_cast<int>(axis)];
  }
  if (total != y.shape[static_cast<int>(axis)]) c.fail("inputs do not add up to the output along the axis");
  return axis;
}

// A pool node's kind checked against its dtype: "max" (float32, uint8, int8), "avg" or "l2" (float32).
inline void check_pool_kind(const Ctx& c, const PoolParams& p, std::int32_t dtype) {
  if (p.kind == "max") {
    if (dtype != ACCEL_FLOAT32 && dtype != ACCEL_UINT8 && dtype != ACCEL_INT8) c.fail("max pool dtype must be float32, uint8 or int8");
  } else if (p.kind == "avg" || p.kind == "l2") {
    c.dtype(c.in(0), ACCEL_FLOAT32, "data");
    if (p.include_pad && (p.dpb != p.pb || p.dpr != p.pr)) c.fail("count_include_pad with ceil mode is not supported");
  } else {
    c.fail("pool kind '" + p.kind + "' is not max, avg or l2");
  }
}

// A float32 / 8-bit pool node (max, avg, L2) of one input and output of one dtype, checked.
inline PoolParams float_pool(const Ctx& c) {
  c.arity(1, 1, 1);
  const auto& x = c.in(0);
  const auto& y = c.out(0);
  c.activation(x, "data");
  if (x.spec.dtype != y.spec.dtype) c.fail("input and output dtypes differ");
  const PoolParams p = pool_params(c, x.spec.shape, y.spec.shape);
  check_pool_kind(c, p, x.spec.dtype);
  return p;
}

// A qnn.conv2d / qnn.dense node (+ int32 bias, fused relu) + requantize, read and checked:
// NHWC data [N, H, W, C] and OHWI weights (conv), or [M, K] x [N, K] (dense); zero points;
// the requantizer of the int32 accumulators (bias and clamp included), bit for bit accel.quant.
struct QnnLayer {
  bool dense = false;
  const GraphTensor* x = nullptr;
  const GraphTensor* w = nullptr;
  const GraphTensor* y = nullptr;
  std::int64_t groups = 1, outputs = 0;
  Window win{};
  std::int32_t data_zero_point = 0;
  std::vector<std::int32_t> weight_zero_points;  // 1 or one per output channel
  std::vector<std::int32_t> bias;                // empty or one per output channel
  std::vector<quant::Multiplier> multipliers;    // 1 or one per output channel
  std::int32_t out_zero_point = 0, lo = 0, hi = 0;

  // The requantizer of the layer's int32 accumulators with `with_bias` added first (the
  // node's bias, or one a kernel folded more constants into), bit for bit accel.quant.
  quant::ChannelRequantizer requantizer(const std::vector<std::int32_t>& with_bias) const {
    return quant::ChannelRequantizer(static_cast<std::size_t>(outputs), multipliers, out_zero_point, lo, hi, with_bias);
  }

  static QnnLayer read(const Ctx& c, bool dense) {
    QnnLayer q;
    q.dense = dense;
    c.arity(2, 3, 1);
    q.x = &c.in(0);
    q.w = &c.in(1);
    q.y = &c.out(0);
    c.activation(*q.x, "data");
    c.constant(*q.w, "weights");
    auto q8 = [&](const GraphTensor& t, const char* what) {
      if (t.spec.dtype != ACCEL_UINT8 && t.spec.dtype != ACCEL_INT8) c.fail(std::string(what) + " must be uint8 or int8, got " + t.spec.describe());
    };
    q8(*q.x, "data");
    q8(*q.w, "weights");
    q8(*q.y, "output");
    const Shape& xs = q.x->spec.shape;
    const Shape& ws = q.w->spec.shape;
    const Shape& ys = q.y->spec.shape;
    const int r = dense ? 2 : 4;
    c.rank(*q.x, r, "data");
    c.rank(*q.w, r, "weights");
    c.rank(*q.y, r, "output");
    q.outputs = ws[0];
    if (dense) {
      if (ws[1] != xs[1] || ys != Shape{xs[0], q.outputs} || xs.elements() == 0 || ws.elements() == 0) {
        c.fail("shapes " + xs.str() + " x " + ws.str() + " -> " + ys.str() + " do not fit");
      }
    } else {
      q.groups = c.integer("groups", 1, 1 << 20);
      q.win = conv_window(c, ws[1], ws[2]);
      check_conv_shapes(c, xs, ws, ys, q.groups, q.win);
    }
    const std::int64_t xlo = q.x->spec.dtype == ACCEL_UINT8 ? 0 : -128;
    q.data_zero_point = static_cast<std::int32_t>(c.integer("data_zero_point", xlo, xlo + 255));
    const std::int64_t wlo = q.w->spec.dtype == ACCEL_UINT8 ? 0 : -128;
    const auto& wz = c.n.attrs.ints("weight_zero_point");
    if (wz.size() != 1 && wz.size() != static_cast<std::size_t>(q.outputs)) c.fail("weight zero points must be 1 or one per output channel");
    for (std::int64_t z : wz) {
      if (z < wlo || z > wlo + 255) c.fail("weight zero point outside the weight dtype's range");
      q.weight_zero_points.push_back(static_cast<std::int32_t>(z));
    }
    if (c.n.inputs.size() == 3) {
      const auto& b = c.in(2);
      c.constant(b, "bias");
      c.dtype(b, ACCEL_INT32, "bias");
      if (b.spec.shape != Shape{q.outputs}) c.fail("bias must be [" + std::to_string(q.outputs) + "], got " + b.spec.shape.str());
      q.bias.resize(static_cast<std::size_t>(q.outputs));
      std::memcpy(q.bias.data(), b.data, q.bias.size() * sizeof(std::int32_t));
    }
    // the requantize attributes (serializer.py): multipliers per channel or one, accumulators' zero point 0
    const Requant rq = Requant::read(c, static_cast<std::size_t>(q.outputs), q.y->spec.dtype);
    // the accumulators' channel axis is the output's last (NHWC, or [M, N]); -1: one multiplier
    const std::int64_t axis = c.integer("axis", -1, ys.rank() - 1);
    if (axis != -1 && axis != ys.rank() - 1) c.fail("axis must be -1 or the channel axis " + std::to_string(ys.rank() - 1));
    if (axis == -1 && rq.m.size() != 1) c.fail("per-channel multipliers need the channel axis, got axis -1");
    for (std::int32_t z : rq.z_in) {
      if (z != 0) c.fail("the accumulators' zero point must be 0");
    }
    for (std::size_t i = 0; i < rq.m.size(); ++i) q.multipliers.push_back({rq.m[i], rq.shift[i]});
    q.out_zero_point = static_cast<std::int32_t>(rq.z_out);
    q.lo = static_cast<std::int32_t>(rq.lo);
    q.hi = static_cast<std::int32_t>(rq.hi);
    return q;
  }
};

}  // namespace accel_acl

#endif  // ACCEL_ACL_NODES_HPP

// accel_sdk/float_ops.hpp: float32 convolution and dense layers through oneDNN.
//
//   FloatConv   conv2d + bias + fused activations (relu, clip / bounded relu, sigmoid,
//               tanh, gelu_tanh, gelu_erf), groups, stride, padding, dilation, batch;
//   FloatDense  [M, K] x [N, K]^T + bias + the same activations (oneDNN inner product);
//   MaxPoolNan  what a float32 max pooling primitive needs to return NaN for windows
//               holding one;
//   Reorder     a cached reorder between two memory formats.
//
// NaN. The reference (numpy, ONNX) keeps NaN through every activation and through max
// pooling; oneDNN does not always: its relu and clip map NaN to 0 and on some ISAs its
// sigmoid and GELU clamp it away, and its max pooling skips NaN. FloatConv and FloatDense
// compute the activations fused and stay exact: at create they bound the input magnitude
// below which no pre-activation value can be NaN (finite weights and bias, and no sum that
// can overflow); at run, one vectorized read of the input checks that bound, and only an
// input past it (a NaN, an infinity, a huge value) runs the layer a second time without its
// activations (a primitive made at create, in the same formats) and copies its NaNs over.
// That second pass also repairs what such an input can make a fused kernel overflow: where
// the pre-activation value is finite but the fused result is not (oneDNN's AVX-512 GELU
// computes x * (1 + erf) before halving, infinite for x past FLT_MAX / 2), the activations
// are applied to that value in double, as the reference defines them. Values are the
// fused primitive's otherwise, bit for bit.
//
// Formats. A primitive picks its own data formats (format_tag::any; on x86 a blocked
// format such as nChw8c, measured ~3x faster than plain NCHW), and its weights are
// reordered once at create. At run the caller's buffers are in the layout it named
// (NHWC or NCHW); run() reorders at entry and exit only when the primitive's format
// differs, with reorder primitives made at create. A runtime chaining layers skips
// those: it creates each next layer with the previous one's dst_desc() as its source
// format, reorders once into the first layer's src_desc() and once out of the last
// layer's dst_desc(), and calls execute() in between; one that keeps every tensor in one
// layout names it as both formats (src_format, dst_format) and never reorders.
//
// Threads as in onednn.hpp: each op keeps its thread count (<= 0: every core) and sets it
// around create and run. run() and execute() are const and may be called from several
// threads at once.
#ifndef ACCEL_SDK_FLOAT_OPS_HPP
#define ACCEL_SDK_FLOAT_OPS_HPP

#include <accel_sdk/onednn.hpp>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

namespace accel_sdk {
namespace onednn {

// The caller's data layout at run(): NHWC (channels last) or NCHW (planar).
enum class Layout { nhwc, nchw };

// An activation fused into the primitive, applied in order (NaN in, NaN out: see above).
struct PostOp {
  enum class Kind { relu, clip, sigmoid, tanh, gelu_tanh, gelu_erf };
  Kind kind = Kind::relu;
  float lo = 0.0f, hi = 0.0f;  // clip's bounds (bounded relu: lo = 0)

  static PostOp relu() { return {Kind::relu, 0.0f, 0.0f}; }
  static PostOp clip(float lo, float hi) { return {Kind::clip, lo, hi}; }
  static PostOp sigmoid() { return {Kind::sigmoid, 0.0f, 0.0f}; }
  static PostOp tanh() { return {Kind::tanh, 0.0f, 0.0f}; }
  static PostOp gelu_tanh() { return {Kind::gelu_tanh, 0.0f, 0.0f}; }
  static PostOp gelu_erf() { return {Kind::gelu_erf, 0.0f, 0.0f}; }
};

namespace detail {

inline dnnl::primitive_attr post_op_attr(const std::vector<PostOp>& ops) {
  dnnl::post_ops po;
  for (const PostOp& op : ops) {
    switch (op.kind) {
      case PostOp::Kind::relu: po.append_eltwise(dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
      case PostOp::Kind::clip:
        if (!(op.lo <= op.hi)) throw Error("clip: lower bound above the upper one", dnnl_invalid_arguments);
        po.append_eltwise(dnnl::algorithm::eltwise_clip_v2, op.lo, op.hi);
        break;
      case PostOp::Kind::sigmoid: po.append_eltwise(dnnl::algorithm::eltwise_logistic, 0.0f, 0.0f); break;
      case PostOp::Kind::tanh: po.append_eltwise(dnnl::algorithm::eltwise_tanh, 0.0f, 0.0f); break;
      case PostOp::Kind::gelu_tanh: po.append_eltwise(dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f); break;
      case PostOp::Kind::gelu_erf: po.append_eltwise(dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f); break;
    }
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // thread_scratchpad() at run
  return attr;
}

inline dnnl::memory::format_tag tag_of(Layout l) {
  return l == Layout::nhwc ? dnnl::memory::format_tag::nhwc : dnnl::memory::format_tag::nchw;
}

// The largest input magnitude for which no pre-activation value b_o + sum_i x_i w_oi can be
// NaN: weights and bias finite, and max|x| * max_o sum_i |w_oi| + max|b| at most half of
// FLT_MAX (a partial sum, in any order and with float32 rounding, then stays finite; an
// infinity times a zero weight, or two infinities of opposite signs, are what make NaN).
// -1 when a weight or bias is not finite (every input is then suspect). w: `rows` rows of
// `row_len` weights, one row per output (bias: `rows` values, or none).
inline float nan_free_limit(const float* w, std::size_t rows, std::size_t row_len, const float* bias) {
  constexpr double kMax = std::numeric_limits<float>::max();
  double widest = 0.0, b = 0.0;
  for (std::size_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (std::size_t i = 0; i < row_len; ++i) {
      const float v = w[r * row_len + i];
      if (!std::isfinite(v)) return -1.0f;
      sum += std::fabs(static_cast<double>(v));
    }
    widest = std::max(widest, sum);
    if (bias != nullptr) {
      if (!std::isfinite(bias[r])) return -1.0f;
      b = std::max(b, std::fabs(static_cast<double>(bias[r])));
    }
  }
  if (b > kMax / 4) return -1.0f;
  if (widest == 0.0) return std::numeric_limits<float>::max();  // all zero: finite inputs give 0
  return static_cast<float>(std::min(kMax, (kMax / 4) / widest));
}

// Whether one of x[0, n) is NaN or past `limit` in magnitude (limit = infinity: NaN only).
// One pass over a layer's input on one thread, with an early exit: 32 floats a step with
// AVX2 (chosen at run time; the file needs no special compiler flags), else a branch-free
// loop the compiler vectorizes for the baseline ISA (SSE2 on x86-64: 4x slower, 141 us
// against 37 us for MobileNetV2's 1.2M-float depthwise input, most of that layer's time).
inline bool any_past_portable(const float* x, std::size_t n, float limit) {
  constexpr std::size_t kChunk = 4096;
  for (std::size_t at = 0; at < n; at += kChunk) {
    const std::size_t stop = std::min(n, at + kChunk);
    int bad = 0;
    for (std::size_t i = at; i < stop; ++i) bad |= static_cast<int>(!(std::fabs(x[i]) <= limit));
    if (bad) return true;
  }
  return false;
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ACCEL_SDK_FLOAT_OPS_X86 1
// !(|x| <= limit) as a mask: _CMP_NLE_UQ is true for NaN too.
__attribute__((target("avx2"))) inline __m256 past8(const float* x, __m256 limit, __m256 abs_mask) {
  return _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x), abs_mask), limit, _CMP_NLE_UQ);
}

__attribute__((target("avx2"))) inline bool any_past_avx2(const float* x, std::size_t n, float limit) {
  const __m256 lim = _mm256_set1_ps(limit);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 m = _mm256_or_ps(_mm256_or_ps(past8(x + i, lim, abs_mask), past8(x + i + 8, lim, abs_mask)),
                                  _mm256_or_ps(past8(x + i + 16, lim, abs_mask), past8(x + i + 24, lim, abs_mask)));
    if (_mm256_movemask_ps(m) != 0) return true;
  }
  return any_past_portable(x + i, n - i, limit);
}

inline bool has_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}
#endif

inline bool any_past(const float* x, std::size_t n, float limit) {
#ifdef ACCEL_SDK_FLOAT_OPS_X86
  if (has_avx2()) return any_past_avx2(x, n, limit);
#endif
  return any_past_portable(x, n, limit);
}

// The activations applied to one value in double, as the reference (ONNX) defines them.
inline double apply_post_ops(double x, const std::vector<PostOp>& ops) {
  constexpr double kSqrt2 = 1.4142135623730951, kSqrt2OverPi = 0.7978845608028654;
  for (const PostOp& op : ops) {
    switch (op.kind) {
      case PostOp::Kind::relu: x = x > 0.0 ? x : 0.0; break;
      case PostOp::Kind::clip: x = std::min(std::max(x, static_cast<double>(op.lo)), static_cast<double>(op.hi)); break;
      case PostOp::Kind::sigmoid: x = 1.0 / (1.0 + std::exp(-x)); break;
      case PostOp::Kind::tanh: x = std::tanh(x); break;
      case PostOp::Kind::gelu_tanh: x = 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x))); break;
      case PostOp::Kind::gelu_erf: x = 0.5 * x * (1.0 + std::erf(x / kSqrt2)); break;
    }
  }
  return x;
}

// y: the fused result, pre: the layer's output without its activations. NaN where pre is
// NaN; where pre is finite and y is not (the fused kernel overflowed: every activation of a
// finite float32 is finite), the activations of pre.
inline void repair_from_unfused(const float* pre, float* y, std::size_t n, const std::vector<PostOp>& ops) {
  for (std::size_t i = 0; i < n; ++i) {
    if (pre[i] != pre[i]) {
      y[i] = pre[i];
    } else if (!std::isfinite(y[i]) && std::isfinite(pre[i])) {
      y[i] = static_cast<float>(apply_post_ops(pre[i], ops));
    }
  }
}

// The calling thread's buffer of n floats for the rare second pass (valid until its next use).
inline float* thread_floats(std::size_t n, int which) {
  thread_local std::vector<float> buf[2];
  if (buf[which].size() < n) buf[which].resize(n);
  return buf[which].data();
}

// One run of a convolution or inner product: src, its weights (and bias), dst; the calling
// thread's scratchpad.
inline void execute_weighted(const dnnl::primitive& prim, const dnnl::memory::desc& scratch, dnnl::stream& stream,
                             const dnnl::memory& src, const dnnl::memory& weights, const dnnl::memory* bias,
                             const dnnl::memory& dst) {
  const dnnl::memory pad = thread_memory(kScratchMemory, scratch, thread_scratchpad(scratch.get_size()));
  onednn::execute(prim, stream,
                  {{DNNL_ARG_SRC, &src}, {DNNL_ARG_WEIGHTS, &weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, &dst},
                   {DNNL_ARG_SCRATCHPAD, &pad}});
}

// The second pass of a layer with activations (see the header): the layer without them, in
// the fused primitive's formats, its weights shared with the fused one where oneDNN takes
// their format, and the input magnitude that needs it.
struct Unfused {
  dnnl::primitive prim;
  dnnl::memory weights;
  dnnl::memory::desc scratch;
  std::vector<PostOp> ops;  // the fused layer's activations
  float limit = -1.0f;
  bool on = false;  // the layer has activations

  // make(weights_desc) -> the unfused primitive_desc; `fused_weights` in the fused layer's format.
  template <class P, class PD, class Make>
  void build(const Make& make, const dnnl::memory& fused_weights, const dnnl::memory::desc& w_any, float nan_limit,
             const std::vector<PostOp>& post_ops) {
    PD pd;
    try {
      pd = make(fused_weights.get_desc());
    } catch (const dnnl::error&) {
      pd = make(w_any);
    }
    prim = P(pd);
    limit = nan_limit;
    ops = post_ops;
    scratch = pd.scratchpad_desc();
    weights = fused_weights;
    if (pd.weights_desc() != fused_weights.get_desc()) {
      weights = dnnl::memory(pd.weights_desc(), engine());
      dnnl::stream s(engine());
      dnnl::reorder(fused_weights, weights).execute(s, const_cast<dnnl::memory&>(fused_weights), weights);
      s.wait();
    }
    on = true;
  }

  // After the fused run into dst: when src is past the limit, the unfused run, its NaNs and
  // what the fused kernel overflowed; true when it ran. check = false: the caller knows src
  // is finite and within the limit.
  bool fix(dnnl::stream& stream, const dnnl::memory& src, const dnnl::memory* bias, const dnnl::memory& dst,
           bool check = true) const {
    if (!on || !check) return false;
    const dnnl::memory::desc& dst_md = dst.get_desc();
    const std::size_t nx = src.get_desc().get_size() / sizeof(float), ny = dst_md.get_size() / sizeof(float);
    if (!any_past(static_cast<const float*>(src.get_data_handle()), nx, limit)) return false;
    float* pre = thread_floats(ny, 0);
    execute_weighted(prim, scratch, stream, src, weights, bias, dnnl::memory(dst_md, engine(), pre));
    stream.wait();
    repair_from_unfused(pre, static_cast<float*>(dst.get_data_handle()), ny, ops);
    return true;
  }
};

}  // namespace detail

// A reorder between two formats of the same tensor, made once; a no-op when they are equal.
class Reorder {
 public:
  Reorder() = default;
  Reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) : from_(from), to_(to) {
    if (from != to) {
      prim_ = guard("reorder create", [&] { return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to)); });
      needed_ = true;
    }
  }
  bool needed() const { return needed_; }
  const dnnl::memory::desc& from() const { return from_; }
  const dnnl::memory::desc& to() const { return to_; }
  void execute(Stream& stream, const dnnl::memory& from, const dnnl::memory& to) const {
    guard("reorder", [&] { prim_.execute(stream.get(), const_cast<dnnl::memory&>(from), const_cast<dnnl::memory&>(to)); });
  }

 private:
  dnnl::memory::desc from_, to_;
  dnnl::reorder prim_;
  bool needed_ = false;
};

// A transpose as oneDNN memory descriptors: `from`, the input (dims[rank], dtype code) read
// through the strides its axes take in the output (output axis i is input axis axes[i]); `to`,
// the plain output. One reorder from one to the other is the transpose (acl's transpose, ethosn's
// layout conversions at its partitions' edges).
struct PermuteDescs {
  dnnl::memory::desc from, to;
};

inline PermuteDescs permute_descs(const std::int64_t* dims, int rank, const int* axes, std::int32_t dtype) {
  const auto r = static_cast<std::size_t>(rank);
  dnnl::memory::dims out_dims(r), in_strides(r), from_strides(r), to_strides(r);
  for (std::size_t i = 0; i < r; ++i) out_dims[i] = dims[axes[i]];
  std::int64_t in = 1, out = 1;
  for (std::size_t d = r; d-- > 0;) {
    in_strides[d] = in;
    to_strides[d] = out;
    in *= dims[d];
    out *= out_dims[d];
  }
  for (std::size_t i = 0; i < r; ++i) from_strides[i] = in_strides[static_cast<std::size_t>(axes[i])];
  const dnnl::memory::data_type type = data_type(dtype);
  return {dnnl::memory::desc(out_dims, type, from_strides), dnnl::memory::desc(out_dims, type, to_strides)};
}

// permute_descs as one reorder made at create; run() on the calling thread's stream and on one
// thread (a layout transpose is memory-bound: oneDNN's team would cost its wake-up).
class Permute {
 public:
  Permute() = default;
  Permute(const std::int64_t* dims, int rank, const int* axes, std::int32_t dtype)
      : d_(permute_descs(dims, rank, axes, dtype)) {
    ThreadScope scope(1);
    prim_ = guard("transpose create",
                  [&] { return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), d_.from, engine(), d_.to)); });
  }
  void run(const void* in, void* out) const {
    ThreadScope scope(1);
    Stream stream;
    const dnnl::memory from = thread_memory(kSrcMemory, d_.from, in), to = thread_memory(kDstMemory, d_.to, out);
    guard("transpose", [&] { execute(prim_, stream.get(), {{DNNL_ARG_FROM, &from}, {DNNL_ARG_TO, &to}}); });
  }

 private:
  PermuteDescs d_;
  dnnl::reorder prim_;
};

struct FloatConvSpec {
  ConvShape shape;
  const float* weights = nullptr;  // shape.weight_count() floats in weight_layout
  WeightLayout weight_layout = WeightLayout::oihw;
  const float* bias = nullptr;  // out_channels floats, or none
  std::vector<PostOp> post_ops;
  Layout layout = Layout::nhwc;  // of run()'s buffers
  // On several threads, run as bands of output rows on accel_sdk's pool (see FloatConv),
  // when the primitive's tensors are NHWC (src_format and dst_format NHWC).
  bool bands = false;
};

class FloatConv {
 public:
  // src_format / dst_format: the formats execute() takes, when the input comes from another
  // primitive (chaining) or the caller keeps its tensors in one format (e.g. NHWC); omitted,
  // the primitive picks them.
  FloatConv(const FloatConvSpec& spec, int threads, const dnnl::memory::desc* src_format = nullptr,
            const dnnl::memory::desc* dst_format = nullptr)
      : s_(spec.shape), threads_(resolve_threads(threads)) {
    s_.validate();
    if (spec.weights == nullptr) throw Error("float convolution: no weights", dnnl_invalid_arguments);
    ThreadScope scope(threads_);
    guard("float convolution create", [&] {
      using dt = dnnl::memory::data_type;
      using tag = dnnl::memory::format_tag;
      const std::int64_t G = s_.groups, OCg = s_.out_per_group(), ICg = s_.in_per_group();
      const std::int64_t KH = s_.window.kh, KW = s_.window.kw;
      const dnnl::memory::dims src_dims{s_.batch, s_.in_channels, s_.in_h, s_.in_w};
      const dnnl::memory::dims dst_dims{s_.batch, s_.out_channels, s_.out_h(), s_.out_w()};
      const dnnl::memory::dims w_dims =
          G > 1 ? dnnl::memory::dims{G, OCg, ICg, KH, KW} : dnnl::memory::dims{s_.out_channels, ICg, KH, KW};
      user_src_ = dnnl::memory::desc(src_dims, dt::f32, detail::tag_of(spec.layout));
      user_dst_ = dnnl::memory::desc(dst_dims, dt::f32, detail::tag_of(spec.layout));
      const dnnl::memory::desc src_any = src_format ? *src_format : dnnl::memory::desc(src_dims, dt::f32, tag::any);
      const dnnl::memory::desc dst_any = dst_format ? *dst_format : dnnl::memory::desc(dst_dims, dt::f32, tag::any);
      const dnnl::memory::desc w_any(w_dims, dt::f32, tag::any);
      const dnnl::memory::desc b_md = spec.bias ? dnnl::memory::desc({s_.out_channels}, dt::f32, tag::x) : dnnl::memory::desc();
      const auto& win = s_.window;
      auto make = [&](const dnnl::memory::desc& src, const dnnl::memory::desc& w, const dnnl::memory::desc& dst,
                      const std::vector<PostOp>& ops) {
        return dnnl::convolution_forward::primitive_desc(
            engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, w, b_md, dst,
            {win.sh, win.sw}, {win.dh - 1, win.dw - 1}, {win.pt, win.pl}, {win.pb, win.pr}, detail::post_op_attr(ops));
      };
      // weights: the caller's layout -> goihw/oihw -> the primitive's format, once
      std::vector<float> plain(s_.weight_count());
      for (std::int64_t o = 0; o < s_.out_channels; ++o) {
        for (std::int64_t i = 0; i < ICg; ++i) {
          for (std::int64_t y = 0; y < KH; ++y) {
            for (std::int64_t x = 0; x < KW; ++x) {
              plain[static_cast<std::size_t>(((o * ICg + i) * KH + y) * KW + x)] =
                  spec.weights[weight_index(spec.weight_layout, s_, o, i, y, x)];
            }
          }
        }
      }
      const dnnl::memory user_w({w_dims, dt::f32, G > 1 ? tag::goihw : tag::oihw}, engine(), plain.data());
      // the weights in a primitive's format, reordered once per format
      auto weights_for = [&](const dnnl::memory::desc& md) {
        for (const Band& o : bands_) {
          if (o.weights.get_desc() == md) return o.weights;
        }
        dnnl::memory w(md, engine());
        dnnl::stream stream(engine());
        dnnl::reorder(user_w, w).execute(stream, const_cast<dnnl::memory&>(user_w), w);
        stream.wait();
        return w;
      };
      if (spec.bias) {
        bias_ = dnnl::memory(b_md, engine());
        std::copy(spec.bias, spec.bias + s_.out_channels, static_cast<float*>(bias_.get_data_handle()));
      }
      has_bias_ = spec.bias != nullptr;
      const float limit = spec.post_ops.empty()
                              ? -1.0f
                              : detail::nan_free_limit(plain.data(), static_cast<std::size_t>(s_.out_channels),
                                                       static_cast<std::size_t>(ICg * KH * KW), spec.bias);
      const dnnl::memory::desc nhwc_src(src_dims, dt::f32, tag::nhwc), nhwc_dst(dst_dims, dt::f32, tag::nhwc);
      const std::int64_t OH = s_.out_h();
      if (spec.bands && threads_ > 1 && s_.batch * OH >= 2 && src_any == nhwc_src && dst_any == nhwc_dst) {
        // bands: single-thread primitives of about OH / (threads / batch) output rows, one
        // per distinct geometry (the first and last bands pad, the middle ones do not)
        const std::int64_t per_image = std::min<std::int64_t>(OH, (threads_ + s_.batch - 1) / s_.batch);
        band_rows_ = (OH + per_image - 1) / per_image;
        ThreadScope one(1);
        for (std::int64_t r0 = 0; r0 < OH; r0 += band_rows_) {
          const ConvShape::Band g = s_.band(r0, std::min(OH, r0 + band_rows_));
          std::size_t same = 0;
          while (same < bands_.size() && !bands_[same].rows.same_geometry(g)) ++same;
          band_of_.push_back(same);
          if (same < bands_.size()) continue;
          Band b;
          b.rows = g;
          b.src = dnnl::memory::desc({1, s_.in_channels, g.in_rows, s_.in_w}, dt::f32, tag::nhwc);
          b.dst = dnnl::memory::desc({1, s_.out_channels, g.out_rows, s_.out_w()}, dt::f32, tag::nhwc);
          auto make_band = [&](const dnnl::memory::desc& w, const std::vector<PostOp>& ops) {
            return dnnl::convolution_forward::primitive_desc(
                engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, b.src, w, b_md,
                b.dst, {win.sh, win.sw}, {win.dh - 1, win.dw - 1}, {g.pad_t, win.pl}, {g.pad_b, win.pr},
                detail::post_op_attr(ops));
          };
          const auto pd = make_band(w_any, spec.post_ops);
          b.prim = dnnl::convolution_forward(pd);
          b.scratch = pd.scratchpad_desc();
          b.weights = weights_for(pd.weights_desc());
          if (!spec.post_ops.empty()) {
            b.unfused.build<dnnl::convolution_forward, dnnl::convolution_forward::primitive_desc>(
                [&](const dnnl::memory::desc& w) { return make_band(w, {}); }, b.weights, w_any, limit,
                spec.post_ops);
          }
          if (bands_.empty()) impl_ = std::string(pd.impl_info_str()) + " (bands)";
          bands_.push_back(std::move(b));
        }
        src_ = nhwc_src;
        dst_ = nhwc_dst;
        return;
      }
      const dnnl::convolution_forward::primitive_desc pd = make(src_any, w_any, dst_any, spec.post_ops);
      prim_ = dnnl::convolution_forward(pd);
      impl_ = pd.impl_info_str();
      scratch_ = pd.scratchpad_desc();
      src_ = pd.src_desc();
      dst_ = pd.dst_desc();
      weights_ = weights_for(pd.weights_desc());
      if (!spec.post_ops.empty()) {
        unfused_.build<dnnl::convolution_forward, dnnl::convolution_forward::primitive_desc>(
            [&](const dnnl::memory::desc& w) { return make(src_, w, dst_, {}); }, weights_, w_any, limit,
            spec.post_ops);
      }
    });
    in_ = Reorder(user_src_, src_);
    out_ = Reorder(dst_, user_dst_);
  }

  const ConvShape& shape() const { return s_; }
  // The primitive's own formats, and the caller's (run()'s) ones.
  const dnnl::memory::desc& src_desc() const { return src_; }
  const dnnl::memory::desc& dst_desc() const { return dst_; }
  const dnnl::memory::desc& user_src_desc() const { return user_src_; }
  const dnnl::memory::desc& user_dst_desc() const { return user_dst_; }
  std::string impl() const { return impl_; }
  int threads() const { return threads_; }
  // The input magnitude past which run() checks for NaN with a second pass (-1: every input;
  // no activations: never).
  float nan_limit() const {
    const detail::Unfused& u = bands_.empty() ? unfused_ : bands_.front().unfused;
    return u.on ? u.limit : std::numeric_limits<float>::infinity();
  }
  // Whether the layer runs as bands (spec.bands on several threads, NHWC tensors).
  bool banded() const { return !bands_.empty(); }

  // src / dst in the primitive's formats (src_desc(), dst_desc()); the caller sets the threads.
  // check = false skips the NaN check (nan_limit()): the caller knows src is finite and at
  // most nan_limit() in magnitude. True when the check found values past the limit (dst was
  // then repaired from the unfused pass, and may hold NaN).
  bool execute(dnnl::stream& stream, const dnnl::memory& src, const dnnl::memory& dst, bool check = true) const {
    if (banded()) {
      return execute_bands(static_cast<const float*>(src.get_data_handle()), static_cast<float*>(dst.get_data_handle()),
                           check);
    }
    return guard("float convolution", [&] {
      detail::execute_weighted(prim_, scratch_, stream, src, weights_, has_bias_ ? &bias_ : nullptr, dst);
      return unfused_.fix(stream, src, has_bias_ ? &bias_ : nullptr, dst, check);
    });
  }
  // The same on buffers in those formats.
  bool execute(dnnl::stream& stream, const float* src, float* dst, bool check = true) const {
    if (banded()) return execute_bands(src, dst, check);
    return execute(stream, thread_memory(kSrcMemory, src_, src), thread_memory(kDstMemory, dst_, dst), check);
  }

  // src / dst in the caller's layout (batch x in_channels x in_h x in_w, NHWC or NCHW).
  void run(const float* src, float* dst) const {
    ThreadScope scope(threads_);
    Stream stream;
    guard("float convolution run", [&] {
      const dnnl::memory user_src = thread_memory(kSrcMemory, user_src_, src);
      const dnnl::memory user_dst = thread_memory(kDstMemory, user_dst_, dst);
      const dnnl::memory s = in_.needed() ? dnnl::memory(src_, engine()) : user_src;
      const dnnl::memory d = out_.needed() ? dnnl::memory(dst_, engine()) : user_dst;
      if (in_.needed()) in_.execute(stream, user_src, s);
      execute(stream.get(), s, d);
      if (out_.needed()) out_.execute(stream, d, user_dst);
      stream.get().wait();
    });
  }

 private:
  // A band's primitive on one thread, its own fused-activation repair, its rows.
  struct Band {
    ConvShape::Band rows;
    dnnl::convolution_forward prim;
    dnnl::memory::desc src, dst, scratch;
    dnnl::memory weights;
    detail::Unfused unfused;
  };

  // Every band of every image, in contiguous shares, one a thread of accel_sdk's pool (the
  // caller's included): the caller never waits for a worker that has not started (it takes
  // that share too), and the pool's workers stay awake from layer to layer of a run, where
  // an OpenMP team's sleeping member is woken at every layer (tens of microseconds on a
  // virtual machine). Each band checks its own input rows for the NaN repair.
  bool execute_bands(const float* src, float* dst, bool check) const {
    const std::size_t per_image = band_of_.size();
    const std::size_t tasks = static_cast<std::size_t>(s_.batch) * per_image;
    const std::size_t in_row = static_cast<std::size_t>(s_.in_w * s_.in_channels);
    const std::size_t out_row = static_cast<std::size_t>(s_.out_w() * s_.out_channels);
    std::atomic<bool> repaired{false};
    auto share = [&](std::size_t t0, std::size_t t1) {
      ThreadScope one(1);
      Stream stream;
      guard("float convolution", [&] {
        for (std::size_t t = t0; t < t1; ++t) {
          const std::int64_t n = static_cast<std::int64_t>(t / per_image);
          const std::int64_t r0 = static_cast<std::int64_t>(t % per_image) * band_rows_;
          const Band& b = bands_[band_of_[t % per_image]];
          const std::int64_t first = s_.band(r0, r0 + 1).in_first;  // bands of one geometry share b
          const dnnl::memory sm =
              thread_memory(kSrcMemory, b.src, src + static_cast<std::size_t>(n * s_.in_h + first) * in_row);
          const dnnl::memory dm =
              thread_memory(kDstMemory, b.dst, dst + static_cast<std::size_t>(n * s_.out_h() + r0) * out_row);
          detail::execute_weighted(b.prim, b.scratch, stream.get(), sm, b.weights, has_bias_ ? &bias_ : nullptr, dm);
          if (b.unfused.fix(stream.get(), sm, has_bias_ ? &bias_ : nullptr, dm, check)) repaired = true;
        }
        stream.wait();
      });
    };
    accel_sdk::parallel_ranges(tasks, static_cast<std::size_t>(threads_), share, 1);
    return repaired;
  }

  ConvShape s_;
  int threads_ = 1;
  std::vector<Band> bands_;
  std::vector<std::size_t> band_of_;  // band k of an image -> its primitive in bands_
  std::int64_t band_rows_ = 0;
  dnnl::convolution_forward prim_;
  dnnl::memory weights_, bias_;
  bool has_bias_ = false;
  dnnl::memory::desc src_, dst_, user_src_, user_dst_;
  Reorder in_, out_;
  std::string impl_;
  dnnl::memory::desc scratch_;
  detail::Unfused unfused_;
};

struct FloatDenseSpec {
  std::int64_t m = 1, k = 0, n = 0;  // data [m, k], weights [n, k] (layout "OI"), output [m, n]
  const float* weights = nullptr;
  const float* bias = nullptr;  // n floats, or none
  std::vector<PostOp> post_ops;
  // On several threads, run as blocks on accel_sdk's pool (see FloatDense).
  bool bands = false;
};

// Blocks (spec.bands, several threads): one inner product a thread of accel_sdk's pool, the
// caller's included, as FloatConv's bands: for one row of data (m = 1, the layer reads its
// weights once and is bound by that) a block of output columns each, with its rows of the
// weights; for several rows a block of rows each.
class FloatDense {
 public:
  FloatDense(const FloatDenseSpec& spec, int threads) : threads_(resolve_threads(threads)) {
    if (spec.m < 1 || spec.k < 1 || spec.n < 1) throw Error("float dense: empty shape", dnnl_invalid_arguments);
    if (spec.weights == nullptr) throw Error("float dense: no weights", dnnl_invalid_arguments);
    ThreadScope scope(threads_);
    if (spec.bands && threads_ > 1 && (spec.m > 1 || spec.n >= 32)) {
      guard("float dense create", [&] { make_blocks(spec); });
      return;
    }
    guard("float dense create", [&] {
      using dt = dnnl::memory::data_type;
      using tag = dnnl::memory::format_tag;
      src_ = dnnl::memory::desc({spec.m, spec.k}, dt::f32, tag::nc);
      dst_ = dnnl::memory::desc({spec.m, spec.n}, dt::f32, tag::nc);
      const dnnl::memory::desc w_any({spec.n, spec.k}, dt::f32, tag::any);
      const dnnl::memory::desc b_md = spec.bias ? dnnl::memory::desc({spec.n}, dt::f32, tag::x) : dnnl::memory::desc();
      auto make = [&](const dnnl::memory::desc& w, const std::vector<PostOp>& ops) {
        return dnnl::inner_product_forward::primitive_desc(engine(), dnnl::prop_kind::forward_inference, src_, w, b_md,
                                                           dst_, detail::post_op_attr(ops));
      };
      const dnnl::inner_product_forward::primitive_desc pd = make(w_any, spec.post_ops);
      prim_ = dnnl::inner_product_forward(pd);
      impl_ = pd.impl_info_str();
      scratch_ = pd.scratchpad_desc();
      const dnnl::memory user_w({{spec.n, spec.k}, dt::f32, tag::oi}, engine(), const_cast<float*>(spec.weights));
      weights_ = dnnl::memory(pd.weights_desc(), engine());
      dnnl::stream stream(engine());
      dnnl::reorder(user_w, weights_).execute(stream, const_cast<dnnl::memory&>(user_w), weights_);
      if (spec.bias) {
        bias_ = dnnl::memory(b_md, engine());
        std::copy(spec.bias, spec.bias + spec.n, static_cast<float*>(bias_.get_data_handle()));
      }
      stream.wait();
      has_bias_ = spec.bias != nullptr;
      if (!spec.post_ops.empty()) {
        const float limit = detail::nan_free_limit(spec.weights, static_cast<std::size_t>(spec.n),
                                                   static_cast<std::size_t>(spec.k), spec.bias);
        unfused_.build<dnnl::inner_product_forward, dnnl::inner_product_forward::primitive_desc>(
            [&](const dnnl::memory::desc& w) { return make(w, {}); }, weights_, w_any, limit, spec.post_ops);
      }
    });
  }

  std::string impl() const { return impl_; }
  int threads() const { return threads_; }
  float nan_limit() const {
    const detail::Unfused& u = blocks_.empty() ? unfused_ : blocks_.front().unfused;
    return u.on ? u.limit : std::numeric_limits<float>::infinity();
  }
  // Whether the layer runs as blocks (spec.bands on several threads).
  bool banded() const { return !blocks_.empty(); }

  // src: m x k, dst: m x n, row-major; the caller sets the threads.
  void execute(dnnl::stream& stream, const float* src, float* dst) const {
    if (banded()) {
      execute_blocks(src, dst);
      return;
    }
    guard("float dense", [&] {
      const dnnl::memory s = thread_memory(kSrcMemory, src_, src), d = thread_memory(kDstMemory, dst_, dst);
      detail::execute_weighted(prim_, scratch_, stream, s, weights_, has_bias_ ? &bias_ : nullptr, d);
      unfused_.fix(stream, s, has_bias_ ? &bias_ : nullptr, d);
    });
  }

  // The same on this op's threads and a stream of its own.
  void run(const float* src, float* dst) const {
    ThreadScope scope(threads_);
    Stream stream;
    execute(stream.get(), src, dst);
    stream.wait();
  }

 private:
  // One block: rows [row0, row0 + rows) of the data and the output, or its columns [col0, col0 + cols).
  struct Block {
    std::int64_t row0 = 0, col0 = 0;
    dnnl::inner_product_forward prim;
    dnnl::memory::desc src, dst, scratch;
    dnnl::memory weights, bias;
    detail::Unfused unfused;
  };

  void make_blocks(const FloatDenseSpec& spec) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    ThreadScope one(1);
    const bool by_rows = spec.m > 1;
    const std::int64_t extent = by_rows ? spec.m : spec.n;
    const std::int64_t parts = std::min<std::int64_t>(threads_, by_rows ? extent : extent / 16);
    const float limit = spec.post_ops.empty() ? -1.0f
                                              : detail::nan_free_limit(spec.weights, static_cast<std::size_t>(spec.n),
                                                                       static_cast<std::size_t>(spec.k), spec.bias);
    // where block b starts: columns at multiples of 16 (whole vectors of weights and outputs)
    auto edge = [&](std::int64_t b) {
      return b == parts ? extent : by_rows ? extent * b / parts : extent * b / parts / 16 * 16;
    };
    for (std::int64_t b = 0; b < parts; ++b) {
      const std::int64_t at = edge(b), end = edge(b + 1);
      const std::int64_t m = by_rows ? end - at : spec.m, n = by_rows ? spec.n : end - at;
      Block k;
      (by_rows ? k.row0 : k.col0) = at;
      k.src = dnnl::memory::desc({m, spec.k}, dt::f32, tag::nc);
      k.dst = dnnl::memory::desc({m, n}, dt::f32, tag::nc);
      const dnnl::memory::desc w_any({n, spec.k}, dt::f32, tag::any);
      const dnnl::memory::desc b_md = spec.bias ? dnnl::memory::desc({n}, dt::f32, tag::x) : dnnl::memory::desc();
      auto make = [&](const dnnl::memory::desc& w, const std::vector<PostOp>& ops) {
        return dnnl::inner_product_forward::primitive_desc(engine(), dnnl::prop_kind::forward_inference, k.src, w, b_md,
                                                           k.dst, detail::post_op_attr(ops));
      };
      const auto pd = make(w_any, spec.post_ops);
      k.prim = dnnl::inner_product_forward(pd);
      k.scratch = pd.scratchpad_desc();
      for (const Block& o : blocks_) {
        if (by_rows && o.weights.get_desc() == pd.weights_desc()) k.weights = o.weights, k.bias = o.bias;
      }
      if (!k.weights) {
        const float* rows = spec.weights + (by_rows ? 0 : at * spec.k);
        const dnnl::memory user_w({{n, spec.k}, dt::f32, tag::oi}, engine(), const_cast<float*>(rows));
        k.weights = dnnl::memory(pd.weights_desc(), engine());
        dnnl::stream stream(engine());
        dnnl::reorder(user_w, k.weights).execute(stream, const_cast<dnnl::memory&>(user_w), k.weights);
        stream.wait();
        if (spec.bias) {
          k.bias = dnnl::memory(b_md, engine());
          const float* from = spec.bias + (by_rows ? 0 : at);
          std::copy(from, from + n, static_cast<float*>(k.bias.get_data_handle()));
        }
      }
      if (!spec.post_ops.empty()) {
        k.unfused.build<dnnl::inner_product_forward, dnnl::inner_product_forward::primitive_desc>(
            [&](const dnnl::memory::desc& w) { return make(w, {}); }, k.weights, w_any, limit, spec.post_ops);
      }
      if (blocks_.empty()) impl_ = std::string(pd.impl_info_str()) + (by_rows ? " (row blocks)" : " (column blocks)");
      blocks_.push_back(std::move(k));
    }
    k_ = spec.k;
    n_ = spec.n;
  }

  // Each block on a thread of accel_sdk's pool (the caller takes one, and the rest when a
  // worker has not started).
  void execute_blocks(const float* src, float* dst) const {
    accel_sdk::parallel_for(
        blocks_.size(),
        [&](std::size_t i) {
          const Block& b = blocks_[i];
          ThreadScope one(1);
          Stream stream;
          guard("float dense", [&] {
            // a column block writes its columns of a one-row output; a row block its rows
            const dnnl::memory s = thread_memory(kSrcMemory, b.src, src + b.row0 * k_);
            const dnnl::memory d = thread_memory(kDstMemory, b.dst, dst + b.row0 * n_ + b.col0);
            const dnnl::memory* bias = b.bias ? &b.bias : nullptr;
            detail::execute_weighted(b.prim, b.scratch, stream.get(), s, b.weights, bias, d);
            b.unfused.fix(stream.get(), s, bias, d);
            stream.wait();
          });
        },
        blocks_.size());
  }

  int threads_ = 1;
  std::vector<Block> blocks_;
  std::int64_t k_ = 0, n_ = 0;
  dnnl::inner_product_forward prim_;
  dnnl::memory weights_, bias_;
  bool has_bias_ = false;
  dnnl::memory::desc src_, dst_;
  std::string impl_;
  dnnl::memory::desc scratch_;
  detail::Unfused unfused_;
};

// oneDNN's max pooling skips NaN; the reference's max returns NaN for a window holding one.
// Made from a float32 max pooling primitive_desc (any formats; user or library scratchpad):
// after each run of that primitive, apply() checks the input for NaN (one vectorized read)
// and only when there is one pools a NaN mask with the same primitive and sets the outputs of
// the windows holding one to NaN. src / dst: the primitive's buffers, in its formats.
class MaxPoolNan {
 public:
  MaxPoolNan() = default;
  explicit MaxPoolNan(const dnnl::pooling_forward::primitive_desc& pd)
      : prim_(pd), src_(pd.src_desc()), dst_(pd.dst_desc()), scratch_(pd.scratchpad_desc()), on_(true) {
    if (src_.get_data_type() != dnnl::memory::data_type::f32) on_ = false;  // integers have no NaN
  }

  void apply(dnnl::stream& stream, const float* src, float* dst) const {
    if (!on_) return;
    const std::size_t nx = src_.get_size() / sizeof(float), ny = dst_.get_size() / sizeof(float);
    if (!detail::any_past(src, nx, std::numeric_limits<float>::infinity())) return;
    guard("max pooling (NaN)", [&] {
      float* mask = detail::thread_floats(nx, 0);
      float* pooled = detail::thread_floats(ny, 1);
      for (std::size_t i = 0; i < nx; ++i) mask[i] = src[i] != src[i] ? 1.0f : 0.0f;
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(src_, engine(), mask)},
                                                 {DNNL_ARG_DST, dnnl::memory(dst_, engine(), pooled)}};
      if (scratch_.get_size() > 0) {
        args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch_, engine(), thread_scratchpad(scratch_.get_size())));
      }
      prim_.execute(stream, args);
      stream.wait();
      const float nan = std::numeric_limits<float>::quiet_NaN();
      for (std::size_t i = 0; i < ny; ++i) dst[i] = pooled[i] > 0.0f ? nan : dst[i];
    });
  }

 private:
  dnnl::pooling_forward prim_;
  dnnl::memory::desc src_, dst_, scratch_;
  bool on_ = false;
};

}  // namespace onednn
}  // namespace accel_sdk

#endif  // ACCEL_SDK_FLOAT_OPS_HPP

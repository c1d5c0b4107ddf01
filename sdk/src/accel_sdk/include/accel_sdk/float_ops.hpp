// accel_sdk/float_ops.hpp: float32 convolution and dense layers through oneDNN.
//
//   FloatConv   conv2d + bias + fused activations (relu, clip / bounded relu, sigmoid,
//               tanh, gelu_tanh), groups, stride, padding, dilation, batch;
//   FloatDense  [M, K] x [N, K]^T + bias + the same activations (oneDNN inner product);
//   Reorder     a cached reorder between two memory formats.
//
// Formats. A primitive picks its own data formats (format_tag::any; on x86 a blocked
// format such as nChw8c, measured ~3x faster than plain NCHW), and its weights are
// reordered once at create. At run the caller's buffers are in the layout it named
// (NHWC or NCHW); run() reorders at entry and exit only when the primitive's format
// differs, with reorder primitives made at create. A runtime chaining layers skips
// those: it creates each next layer with the previous one's dst_desc() as its source
// format, reorders once into the first layer's src_desc() and once out of the last
// layer's dst_desc(), and calls execute() in between.
//
// Threads as in onednn.hpp: each op keeps its thread count (<= 0: every core) and sets it
// around create and run. run() and execute() are const and may be called from several
// threads at once.
#ifndef ACCEL_SDK_FLOAT_OPS_HPP
#define ACCEL_SDK_FLOAT_OPS_HPP

#include <accel_sdk/onednn.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace accel_sdk {
namespace onednn {

// The caller's data layout at run(): NHWC (channels last) or NCHW (planar).
enum class Layout { nhwc, nchw };

// An activation fused into the primitive, applied in order.
struct PostOp {
  enum class Kind { relu, clip, sigmoid, tanh, gelu_tanh };
  Kind kind = Kind::relu;
  float lo = 0.0f, hi = 0.0f;  // clip's bounds (bounded relu: lo = 0)

  static PostOp relu() { return {Kind::relu, 0.0f, 0.0f}; }
  static PostOp clip(float lo, float hi) { return {Kind::clip, lo, hi}; }
  static PostOp sigmoid() { return {Kind::sigmoid, 0.0f, 0.0f}; }
  static PostOp tanh() { return {Kind::tanh, 0.0f, 0.0f}; }
  static PostOp gelu_tanh() { return {Kind::gelu_tanh, 0.0f, 0.0f}; }
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

struct FloatConvSpec {
  ConvShape shape;
  const float* weights = nullptr;  // shape.weight_count() floats in weight_layout
  WeightLayout weight_layout = WeightLayout::oihw;
  const float* bias = nullptr;  // out_channels floats, or none
  std::vector<PostOp> post_ops;
  Layout layout = Layout::nhwc;  // of run()'s buffers
};

class FloatConv {
 public:
  // src_format: the source format when the input comes from another primitive (chaining);
  // omitted, the primitive picks one.
  FloatConv(const FloatConvSpec& spec, int threads, const dnnl::memory::desc* src_format = nullptr)
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
      const dnnl::memory::desc dst_any(dst_dims, dt::f32, tag::any);
      const dnnl::memory::desc w_any(w_dims, dt::f32, tag::any);
      const dnnl::memory::desc b_md({s_.out_channels}, dt::f32, tag::x);
      const dnnl::primitive_attr attr = detail::post_op_attr(spec.post_ops);
      const auto& win = s_.window;
      dnnl::convolution_forward::primitive_desc pd =
          spec.bias ? dnnl::convolution_forward::primitive_desc(
                          engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_any,
                          w_any, b_md, dst_any, {win.sh, win.sw}, {win.dh - 1, win.dw - 1}, {win.pt, win.pl},
                          {win.pb, win.pr}, attr)
                    : dnnl::convolution_forward::primitive_desc(
                          engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_any,
                          w_any, dst_any, {win.sh, win.sw}, {win.dh - 1, win.dw - 1}, {win.pt, win.pl},
                          {win.pb, win.pr}, attr);
      prim_ = dnnl::convolution_forward(pd);
      impl_ = pd.impl_info_str();
      scratch_ = pd.scratchpad_desc();
      src_ = pd.src_desc();
      dst_ = pd.dst_desc();
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
      weights_ = dnnl::memory(pd.weights_desc(), engine());
      dnnl::stream stream(engine());
      dnnl::reorder(user_w, weights_).execute(stream, const_cast<dnnl::memory&>(user_w), weights_);
      if (spec.bias) {
        bias_ = dnnl::memory(b_md, engine());
        std::copy(spec.bias, spec.bias + s_.out_channels, static_cast<float*>(bias_.get_data_handle()));
      }
      stream.wait();
      has_bias_ = spec.bias != nullptr;
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

  // src / dst in the primitive's formats (src_desc(), dst_desc()); the caller sets the threads.
  void execute(Stream& stream, const dnnl::memory& src, const dnnl::memory& dst) const {
    guard("float convolution", [&] {
      std::unordered_map<int, dnnl::memory> args{
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst}};
      if (has_bias_) args.emplace(DNNL_ARG_BIAS, bias_);
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch_, engine(), thread_scratchpad(scratch_.get_size())));
      prim_.execute(stream.get(), args);
    });
  }

  // src / dst in the caller's layout (batch x in_channels x in_h x in_w, NHWC or NCHW).
  void run(const float* src, float* dst) const {
    ThreadScope scope(threads_);
    Stream stream;
    guard("float convolution run", [&] {
      const dnnl::memory user_src(user_src_, engine(), const_cast<float*>(src));
      const dnnl::memory user_dst(user_dst_, engine(), dst);
      const dnnl::memory s = in_.needed() ? dnnl::memory(src_, engine()) : user_src;
      const dnnl::memory d = out_.needed() ? dnnl::memory(dst_, engine()) : user_dst;
      if (in_.needed()) in_.execute(stream, user_src, s);
      execute(stream, s, d);
      if (out_.needed()) out_.execute(stream, d, user_dst);
      stream.get().wait();
    });
  }

 private:
  ConvShape s_;
  int threads_ = 1;
  dnnl::convolution_forward prim_;
  dnnl::memory weights_, bias_;
  bool has_bias_ = false;
  dnnl::memory::desc src_, dst_, user_src_, user_dst_;
  Reorder in_, out_;
  std::string impl_;
  dnnl::memory::desc scratch_;
};

struct FloatDenseSpec {
  std::int64_t m = 1, k = 0, n = 0;  // data [m, k], weights [n, k] (layout "OI"), output [m, n]
  const float* weights = nullptr;
  const float* bias = nullptr;  // n floats, or none
  std::vector<PostOp> post_ops;
};

class FloatDense {
 public:
  FloatDense(const FloatDenseSpec& spec, int threads) : threads_(resolve_threads(threads)) {
    if (spec.m < 1 || spec.k < 1 || spec.n < 1) throw Error("float dense: empty shape", dnnl_invalid_arguments);
    if (spec.weights == nullptr) throw Error("float dense: no weights", dnnl_invalid_arguments);
    ThreadScope scope(threads_);
    guard("float dense create", [&] {
      using dt = dnnl::memory::data_type;
      using tag = dnnl::memory::format_tag;
      src_ = dnnl::memory::desc({spec.m, spec.k}, dt::f32, tag::nc);
      dst_ = dnnl::memory::desc({spec.m, spec.n}, dt::f32, tag::nc);
      const dnnl::memory::desc w_any({spec.n, spec.k}, dt::f32, tag::any);
      const dnnl::memory::desc b_md({spec.n}, dt::f32, tag::x);
      const dnnl::primitive_attr attr = detail::post_op_attr(spec.post_ops);
      dnnl::inner_product_forward::primitive_desc pd =
          spec.bias ? dnnl::inner_product_forward::primitive_desc(engine(), dnnl::prop_kind::forward_inference, src_,
                                                                  w_any, b_md, dst_, attr)
                    : dnnl::inner_product_forward::primitive_desc(engine(), dnnl::prop_kind::forward_inference, src_,
                                                                  w_any, dst_, attr);
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
    });
  }

  std::string impl() const { return impl_; }

  // src: m x k, dst: m x n, row-major.
  void run(const float* src, float* dst) const {
    ThreadScope scope(threads_);
    Stream stream;
    guard("float dense run", [&] {
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(src_, engine(), const_cast<float*>(src))},
                                                 {DNNL_ARG_WEIGHTS, weights_},
                                                 {DNNL_ARG_DST, dnnl::memory(dst_, engine(), dst)}};
      if (has_bias_) args.emplace(DNNL_ARG_BIAS, bias_);
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch_, engine(), thread_scratchpad(scratch_.get_size())));
      prim_.execute(stream.get(), args);
      stream.get().wait();
    });
  }

 private:
  int threads_ = 1;
  dnnl::inner_product_forward prim_;
  dnnl::memory weights_, bias_;
  bool has_bias_ = false;
  dnnl::memory::desc src_, dst_;
  std::string impl_;
  dnnl::memory::desc scratch_;
};

}  // namespace onednn
}  // namespace accel_sdk

#endif  // ACCEL_SDK_FLOAT_OPS_HPP

// A pybind11 module driving accel_sdk/onednn.hpp, requantize.hpp and int_ops.hpp for sdk/tests.
#include <accel_sdk/float_ops.hpp>
#include <accel_sdk/int_ops.hpp>
#include <accel_sdk/onednn.hpp>
#include <accel_sdk/requantize.hpp>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

namespace py = pybind11;
using namespace accel_sdk;

namespace {

quant::RequantizeIsa parse_isa(const std::string& name) {
  if (name == "avx512") return quant::RequantizeIsa::avx512;
  if (name == "avx2") return quant::RequantizeIsa::avx2;
  if (name == "portable") return quant::RequantizeIsa::portable;
  throw std::invalid_argument("unknown requantize isa " + name);
}

template <class T>
std::vector<T> to_vector(const py::array_t<T, py::array::c_style | py::array::forcecast>& a) {
  return std::vector<T>(a.data(), a.data() + a.size());
}

// acc: rows x (parts * channels) int32; returns rows x channels of out_dtype.
// quant::AddTable over a and b (uint8 or int8 bytes): m, shift, z for a, b and the output.
py::array add_table(bool is_signed, const std::vector<std::int32_t>& m, const std::vector<std::int32_t>& shift,
                    const std::vector<std::int64_t>& z, int left_shift, std::int64_t lo, std::int64_t hi,
                    const py::array_t<std::uint8_t, py::array::c_style>& a,
                    const py::array_t<std::uint8_t, py::array::c_style>& b, const std::string& isa) {
  if (m.size() != 3 || shift.size() != 3 || z.size() != 3) throw std::invalid_argument("three multipliers and zero points");
  if (a.size() != b.size()) throw std::invalid_argument("a and b must have one size");
  const quant::Multiplier mult[3] = {{m[0], shift[0]}, {m[1], shift[1]}, {m[2], shift[2]}};
  const std::int64_t zero[3] = {z[0], z[1], z[2]};
  const quant::AddTable table(is_signed, mult, zero, left_shift, lo, hi);
  py::array_t<std::uint8_t> y(a.size());
  table.run(a.data(), b.data(), y.mutable_data(), static_cast<std::size_t>(a.size()), parse_isa(isa));
  return y;
}

// Whether quant::AddTable with these parameters evaluates its formula on the kernel `isa`.
bool add_uses_formula(bool is_signed, const std::vector<std::int32_t>& m, const std::vector<std::int32_t>& shift,
                      const std::vector<std::int64_t>& z, int left_shift, std::int64_t lo, std::int64_t hi,
                      const std::string& isa) {
  if (m.size() != 3 || shift.size() != 3 || z.size() != 3) throw std::invalid_argument("three multipliers and zero points");
  const quant::Multiplier mult[3] = {{m[0], shift[0]}, {m[1], shift[1]}, {m[2], shift[2]}};
  const std::int64_t zero[3] = {z[0], z[1], z[2]};
  return quant::AddTable(is_signed, mult, zero, left_shift, lo, hi).uses_formula(parse_isa(isa));
}

// quant::Quantizer over x (float32): the uint8 or int8 bytes.
py::array quantizer(const py::array_t<float, py::array::c_style>& x, float scale, std::int64_t zero_point,
                    const std::string& dtype, const std::string& isa) {
  const bool u8 = dtype == "uint8";
  const quant::Quantizer q(scale, zero_point, u8 ? 0 : -128, u8 ? 255 : 127);
  py::array_t<std::uint8_t> y(x.size());
  q.run(x.data(), y.mutable_data(), static_cast<std::size_t>(x.size()), parse_isa(isa));
  return y;
}

py::array requantize(const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& acc,
                     std::size_t channels, std::size_t parts,
                     const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& m,
                     const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& shift,
                     std::int32_t z_out, std::int32_t lo, std::int32_t hi,
                     const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& bias,
                     std::int32_t z_in, const std::string& out_dtype, const std::string& isa) {
  if (acc.ndim() != 2 || static_cast<std::size_t>(acc.shape(1)) != channels * parts) {
    throw std::invalid_argument("acc must be rows x (parts * channels)");
  }
  std::vector<quant::Multiplier> ms;
  for (py::ssize_t i = 0; i < m.size(); ++i) ms.push_back(quant::Multiplier{m.data()[i], shift.data()[i]});
  quant::ChannelRequantizer rq(channels, ms, z_out, lo, hi, to_vector(bias), z_in);
  const std::size_t rows = static_cast<std::size_t>(acc.shape(0));
  quant::AccBlock b;
  b.data = acc.data();
  b.rows = rows;
  b.row_stride = channels * parts;
  b.parts = parts;
  b.part_stride = channels;
  if (out_dtype == "uint8") {
    py::array_t<std::uint8_t> out({rows, channels});
    rq.run(b, out.mutable_data(), channels, parse_isa(isa));
    return out;
  }
  if (out_dtype == "int8") {
    py::array_t<std::int8_t> out({rows, channels});
    rq.run(b, out.mutable_data(), channels, parse_isa(isa));
    return out;
  }
  py::array_t<std::int32_t> out({rows, channels});
  rq.run(b, out.mutable_data(), channels, parse_isa(isa));
  return out;
}

// Best seconds per output value of ChannelRequantizer::run on a rows x channels block of
// uint8 output (bias, output zero point 128, ReLU: lo = 128), over `rounds` rounds of `repeat` runs.
double requantize_seconds(const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& acc,
                          const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& m,
                          const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& shift,
                          const py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>& bias,
                          const std::string& isa, int repeat, int rounds) {
  if (acc.ndim() != 2) throw std::invalid_argument("acc must be rows x channels");
  const std::size_t rows = static_cast<std::size_t>(acc.shape(0)), channels = static_cast<std::size_t>(acc.shape(1));
  std::vector<quant::Multiplier> ms;
  for (py::ssize_t i = 0; i < m.size(); ++i) ms.push_back(quant::Multiplier{m.data()[i], shift.data()[i]});
  const quant::ChannelRequantizer rq(channels, ms, 128, 128, 255, to_vector(bias));
  std::vector<std::uint8_t> out(rows * channels);
  const quant::RequantizeIsa kernel = parse_isa(isa);
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < repeat; ++i) rq.run(acc.data(), rows, out.data(), 1, kernel);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, dt.count() / repeat / static_cast<double>(rows * channels));
  }
  return best;
}

std::int32_t dtype_code(const py::array& a) {
  if (a.dtype().is(py::dtype::of<std::uint8_t>())) return ACCEL_UINT8;
  if (a.dtype().is(py::dtype::of<std::int8_t>())) return ACCEL_INT8;
  throw std::invalid_argument("expected a uint8 or int8 array");
}

// geometry: dict with batch, h, w, c, oc, groups, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr
onednn::ConvShape shape_of(const py::dict& g) {
  auto get = [&](const char* k) { return g[k].cast<std::int64_t>(); };
  onednn::ConvShape s;
  s.batch = get("batch");
  s.in_h = get("h");
  s.in_w = get("w");
  s.in_channels = get("c");
  s.out_channels = get("oc");
  s.groups = get("groups");
  s.window = {get("kh"), get("kw"), get("sh"), get("sw"), get("dh"), get("dw"),
              get("pt"), get("pl"), get("pb"), get("pr")};
  s.validate();
  return s;
}

// The path every IntConv of the probe is created with (set_path: "auto", "int8", "f32").
onednn::IntConvPath g_path = onednn::IntConvPath::automatic;

onednn::IntConvSpec conv_spec(const py::dict& g, const py::array& data, const py::array& weights, int zx,
                              const std::vector<std::int32_t>& zw, const std::string& layout) {
  onednn::IntConvSpec s;
  s.shape = shape_of(g);
  s.data_dtype = dtype_code(data);
  s.data_zero_point = zx;
  s.weight_dtype = dtype_code(weights);
  s.weights = weights.data();
  s.weight_layout = layout == "oihw" ? onednn::WeightLayout::oihw
                    : layout == "hwio" ? onednn::WeightLayout::hwio
                                       : onednn::WeightLayout::ohwi;
  s.weight_zero_points = zw;
  s.path = g_path;
  if (static_cast<std::size_t>(weights.size()) != s.shape.weight_count()) throw std::invalid_argument("weight size");
  return s;
}

// (acc rows x acc_width, parts, impl)
py::tuple int_conv(const py::dict& g, const py::array& data, const py::array& weights, int zx,
                   const std::vector<std::int32_t>& zw, const std::string& layout, int threads, std::int64_t band_rows) {
  onednn::IntConv conv(conv_spec(g, data, weights, zx, zw, layout), threads, band_rows);
  if (static_cast<std::size_t>(data.size()) != static_cast<std::size_t>(conv.shape().batch * conv.shape().in_h *
                                                                          conv.shape().in_w * conv.shape().in_channels)) {
    throw std::invalid_argument("data size");
  }
  py::array_t<std::int32_t> acc({conv.rows(), conv.acc_width()});
  {
    py::gil_scoped_release release;
    conv.run(data.data(), acc.mutable_data());
  }
  return py::make_tuple(acc, conv.parts(), conv.impl(), conv.band_count());
}

// Seconds per IntConv::run (median of `repeat` runs after one warm-up), without creation.
double int_conv_seconds(const py::dict& g, const py::array& data, const py::array& weights, int zx,
                        const std::vector<std::int32_t>& zw, int threads, int repeat) {
  onednn::IntConv conv(conv_spec(g, data, weights, zx, zw, "ohwi"), threads);
  std::vector<std::int32_t> acc(conv.rows() * conv.acc_width());
  std::vector<double> t;
  py::gil_scoped_release release;
  for (int i = 0; i <= repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    conv.run(data.data(), acc.data());
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin() + 1, t.end());
  return t[1 + static_cast<std::size_t>(repeat) / 2];
}

// requantized output (rows x oc) and whether it ran in bands
py::tuple int_conv_requantize(const py::dict& g, const py::array& data, const py::array& weights, int zx,
                              const std::vector<std::int32_t>& zw, const std::vector<float>& acc_scales,
                              float out_scale, int z_out, int lo, int hi, const std::vector<std::int32_t>& bias,
                              const std::string& out_dtype, int threads, std::int64_t band_rows, int repeat) {
  const std::int32_t code = out_dtype == "uint8" ? ACCEL_UINT8 : ACCEL_INT8;
  const auto spec = conv_spec(g, data, weights, zx, zw, "ohwi");
  onednn::IntConvRequantize op(
      spec, quant::ChannelRequantizer::from_scales(static_cast<std::size_t>(spec.shape.out_channels), acc_scales,
                                                   out_scale, z_out, lo, hi, bias),
      code, threads, band_rows);
  const std::size_t rows = op.conv().rows(), oc = static_cast<std::size_t>(spec.shape.out_channels);
  py::array out = code == ACCEL_UINT8 ? py::array(py::array_t<std::uint8_t>({rows, oc}))
                                      : py::array(py::array_t<std::int8_t>({rows, oc}));
  void* ptr = out.mutable_data();
  {
    py::gil_scoped_release release;
    for (int i = 0; i < repeat; ++i) op.run(data.data(), ptr);
  }
  return py::make_tuple(out, op.banded(), op.conv().band_count());
}

std::vector<onednn::PostOp> post_ops(const std::vector<std::tuple<std::string, float, float>>& ops) {
  std::vector<onednn::PostOp> out;
  for (const auto& [kind, lo, hi] : ops) {
    if (kind == "relu") out.push_back(onednn::PostOp::relu());
    else if (kind == "clip") out.push_back(onednn::PostOp::clip(lo, hi));
    else if (kind == "sigmoid") out.push_back(onednn::PostOp::sigmoid());
    else if (kind == "tanh") out.push_back(onednn::PostOp::tanh());
    else if (kind == "gelu_tanh") out.push_back(onednn::PostOp::gelu_tanh());
    else if (kind == "gelu_erf") out.push_back(onednn::PostOp::gelu_erf());
    else throw std::invalid_argument("unknown post-op " + kind);
  }
  return out;
}

// x in `layout` (nhwc/nchw, or nhwc_bands: NHWC formats and spec.bands), w in weight layout;
// returns (out in `layout`, impl, reorders at entry/exit)
py::tuple float_conv(const py::dict& g, const py::array_t<float, py::array::c_style>& x,
                     const py::array_t<float, py::array::c_style>& w, const std::optional<py::array_t<float>>& bias,
                     const std::vector<std::tuple<std::string, float, float>>& ops, const std::string& layout,
                     const std::string& weight_layout, int threads, int repeat) {
  onednn::FloatConvSpec spec;
  const onednn::ConvShape geo = shape_of(g);
  if (static_cast<std::size_t>(w.size()) != geo.weight_count()) throw std::invalid_argument("weight size");
  spec.shape = geo;
  spec.weights = w.data();
  spec.weight_layout = weight_layout == "oihw" ? onednn::WeightLayout::oihw
                       : weight_layout == "hwio" ? onednn::WeightLayout::hwio
                                                 : onednn::WeightLayout::ohwi;
  spec.bias = bias ? bias->data() : nullptr;
  spec.post_ops = post_ops(ops);
  spec.layout = layout == "nchw" ? onednn::Layout::nchw : onednn::Layout::nhwc;
  spec.bands = layout == "nhwc_bands";
  const dnnl::memory::desc src_md({geo.batch, geo.in_channels, geo.in_h, geo.in_w}, dnnl::memory::data_type::f32,
                                  dnnl::memory::format_tag::nhwc);
  const dnnl::memory::desc dst_md({geo.batch, geo.out_channels, geo.out_h(), geo.out_w()},
                                  dnnl::memory::data_type::f32, dnnl::memory::format_tag::nhwc);
  onednn::FloatConv conv =
      spec.bands ? onednn::FloatConv(spec, threads, &src_md, &dst_md) : onednn::FloatConv(spec, threads);
  if (spec.bands && conv.banded() != (threads > 1 && geo.batch * geo.out_h() >= 2)) {
    throw std::runtime_error("FloatConv: bands not taken as spec.bands asks");
  }
  if (static_cast<std::size_t>(x.size()) != static_cast<std::size_t>(geo.batch * geo.in_h * geo.in_w * geo.in_channels)) {
    throw std::invalid_argument("data size");
  }
  std::vector<py::ssize_t> shape = layout == "nchw"
                                       ? std::vector<py::ssize_t>{geo.batch, geo.out_channels, geo.out_h(), geo.out_w()}
                                       : std::vector<py::ssize_t>{geo.batch, geo.out_h(), geo.out_w(), geo.out_channels};
  py::array_t<float> out(shape);
  float* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    for (int i = 0; i < repeat; ++i) conv.run(x.data(), dst);
  }
  return py::make_tuple(out, conv.impl(), conv.src_desc() != conv.user_src_desc(), conv.dst_desc() != conv.user_dst_desc());
}

py::tuple float_dense(const py::array_t<float, py::array::c_style>& x, const py::array_t<float, py::array::c_style>& w,
                      const std::optional<py::array_t<float>>& bias,
                      const std::vector<std::tuple<std::string, float, float>>& ops, int threads, bool bands) {
  onednn::FloatDenseSpec spec;
  spec.bands = bands;
  spec.m = x.shape(0);
  spec.k = x.shape(1);
  spec.n = w.shape(0);
  if (w.shape(1) != spec.k) throw std::invalid_argument("weight shape");
  spec.weights = w.data();
  spec.bias = bias ? bias->data() : nullptr;
  spec.post_ops = post_ops(ops);
  onednn::FloatDense dense(spec, threads);
  py::array_t<float> out({spec.m, spec.n});
  dense.run(x.data(), out.mutable_data());
  return py::make_tuple(out, dense.impl());
}

// FloatConv's input bound for its NaN check (see float_ops.hpp).
float float_conv_nan_limit(const py::dict& g, const py::array_t<float, py::array::c_style>& w,
                           const std::optional<py::array_t<float>>& bias,
                           const std::vector<std::tuple<std::string, float, float>>& ops) {
  onednn::FloatConvSpec spec;
  spec.shape = shape_of(g);
  if (static_cast<std::size_t>(w.size()) != spec.shape.weight_count()) throw std::invalid_argument("weight size");
  spec.weights = w.data();
  spec.weight_layout = onednn::WeightLayout::ohwi;
  spec.bias = bias ? bias->data() : nullptr;
  spec.post_ops = post_ops(ops);
  return onednn::FloatConv(spec, 1).nan_limit();
}

// A float32 max (or average) pooling of NCHW or NHWC data, with or without MaxPoolNan.
py::array_t<float> pool(const py::array_t<float, py::array::c_style>& x, const std::vector<std::int64_t>& kernel,
                        const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& padding,
                        const std::string& kind, const std::string& layout, bool nan_fix, int threads) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  if (x.ndim() != 4 || kernel.size() != 2 || strides.size() != 2 || padding.size() != 4) throw std::invalid_argument("shapes");
  const bool nhwc = layout == "nhwc";
  const std::int64_t N = x.shape(0), C = x.shape(nhwc ? 3 : 1), H = x.shape(nhwc ? 1 : 2), W = x.shape(nhwc ? 2 : 3);
  const std::int64_t OH = (H + padding[0] + padding[2] - kernel[0]) / strides[0] + 1;
  const std::int64_t OW = (W + padding[1] + padding[3] - kernel[1]) / strides[1] + 1;
  const tag t = nhwc ? tag::nhwc : tag::nchw;
  const dnnl::memory::desc src({N, C, H, W}, dt::f32, t), dst({N, C, OH, OW}, dt::f32, t);
  onednn::ThreadScope scope(threads);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::pooling_forward::primitive_desc pd(
      onednn::engine(), dnnl::prop_kind::forward_inference,
      kind == "max" ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding, src, dst,
      {strides[0], strides[1]}, {kernel[0], kernel[1]}, {0, 0}, {padding[0], padding[1]}, {padding[2], padding[3]}, attr);
  const onednn::MaxPoolNan fix(pd);
  py::array_t<float> out(nhwc ? std::vector<py::ssize_t>{N, OH, OW, C} : std::vector<py::ssize_t>{N, C, OH, OW});
  onednn::Stream stream;
  const dnnl::memory s(src, onednn::engine(), const_cast<float*>(x.data())), d(dst, onednn::engine(), out.mutable_data());
  const dnnl::memory scratch(pd.scratchpad_desc(), onednn::engine(), onednn::thread_scratchpad(pd.scratchpad_desc().get_size()));
  dnnl::pooling_forward(pd).execute(stream.get(), {{DNNL_ARG_SRC, s}, {DNNL_ARG_DST, d}, {DNNL_ARG_SCRATCHPAD, scratch}});
  stream.wait();
  if (nan_fix) fix.apply(stream.get(), x.data(), out.mutable_data());
  return out;
}

// Two FloatConvs chained in their own formats: one reorder in, one out (what a graph runtime does).
py::array_t<float> float_conv_chain(const py::dict& g1, const py::dict& g2, const py::array_t<float, py::array::c_style>& x,
                                    const py::array_t<float, py::array::c_style>& w1,
                                    const py::array_t<float, py::array::c_style>& w2, const std::string& layout) {
  onednn::FloatConvSpec a, b;
  a.shape = shape_of(g1);
  b.shape = shape_of(g2);
  a.weights = w1.data();
  b.weights = w2.data();
  a.post_ops = {onednn::PostOp::relu()};
  a.layout = b.layout = layout == "nchw" ? onednn::Layout::nchw : onednn::Layout::nhwc;
  onednn::FloatConv first(a, 2);
  onednn::FloatConv second(b, 2, &first.dst_desc());
  if (second.src_desc() != first.dst_desc()) throw std::runtime_error("the chained source format was not kept");
  onednn::Reorder in(first.user_src_desc(), first.src_desc()), out(second.dst_desc(), second.user_dst_desc());
  const auto& s = b.shape;
  std::vector<py::ssize_t> shape = layout == "nchw" ? std::vector<py::ssize_t>{s.batch, s.out_channels, s.out_h(), s.out_w()}
                                                    : std::vector<py::ssize_t>{s.batch, s.out_h(), s.out_w(), s.out_channels};
  py::array_t<float> result(shape);
  onednn::ThreadScope threads(2);
  onednn::Stream stream;
  const dnnl::memory user_in(first.user_src_desc(), onednn::engine(), const_cast<float*>(x.data()));
  const dnnl::memory user_out(second.user_dst_desc(), onednn::engine(), result.mutable_data());
  const dnnl::memory x_in = in.needed() ? dnnl::memory(first.src_desc(), onednn::engine()) : user_in;
  const dnnl::memory mid(first.dst_desc(), onednn::engine());
  const dnnl::memory y = out.needed() ? dnnl::memory(second.dst_desc(), onednn::engine()) : user_out;
  if (in.needed()) in.execute(stream, user_in, x_in);
  first.execute(stream, x_in, mid);
  second.execute(stream, mid, y);
  if (out.needed()) out.execute(stream, y, user_out);
  stream.wait();
  return result;
}

// qnn.dense through dense_spec: data [M, K], weights [N, K] -> (acc M x acc_width, parts)
py::tuple int_dense(const py::array& data, const py::array& weights, int zx, const std::vector<std::int32_t>& zw,
                    int threads) {
  if (data.ndim() != 2 || weights.ndim() != 2 || data.shape(1) != weights.shape(1)) {
    throw std::invalid_argument("data [M, K] and weights [N, K]");
  }
  onednn::IntConvSpec spec = onednn::dense_spec(data.shape(0), data.shape(1), weights.shape(0), dtype_code(data), zx,
                                                dtype_code(weights), weights.data(), zw);
  spec.path = g_path;
  onednn::IntConv conv(spec, threads);
  py::array_t<std::int32_t> acc({conv.rows(), conv.acc_width()});
  conv.run(data.data(), acc.mutable_data());
  return py::make_tuple(acc, conv.parts(), conv.impl());
}

// One IntConvRequantize kept across calls, for the concurrency test.
class ConvOp {
 public:
  ConvOp(const py::dict& g, const py::array& data, const py::array& weights, int zx, const std::vector<std::int32_t>& zw,
         const std::vector<float>& acc_scales, float out_scale, int z_out, const std::vector<std::int32_t>& bias,
         int threads, std::int64_t band_rows) {
    const auto spec = conv_spec(g, data, weights, zx, zw, "ohwi");
    op_ = std::make_unique<onednn::IntConvRequantize>(
        spec,
        quant::ChannelRequantizer::from_scales(static_cast<std::size_t>(spec.shape.out_channels), acc_scales,
                                               out_scale, z_out, 0, 255, bias),
        ACCEL_UINT8, threads, band_rows);
  }
  py::array_t<std::uint8_t> run(const py::array_t<std::uint8_t, py::array::c_style>& data) const {
    const auto& s = op_->conv().shape();
    if (static_cast<std::size_t>(data.size()) != static_cast<std::size_t>(s.batch * s.in_h * s.in_w * s.in_channels)) {
      throw std::invalid_argument("data size");
    }
    py::array_t<std::uint8_t> out({op_->conv().rows(), static_cast<std::size_t>(s.out_channels)});
    std::uint8_t* ptr = out.mutable_data();
    py::gil_scoped_release release;
    op_->run(data.data(), ptr);
    return out;
  }

 private:
  std::unique_ptr<onednn::IntConvRequantize> op_;
};

}  // namespace

PYBIND11_MODULE(_sdk_onednn_probe, m) {
  m.def("cpu_isa", [] { return std::string(onednn::isa_name(onednn::cpu_isa())); });
  m.def("int8_exact", &onednn::int8_exact);
  m.def("set_path", [](const std::string& path) {
    if (path == "auto") g_path = onednn::IntConvPath::automatic;
    else if (path == "int8") g_path = onednn::IntConvPath::int8;
    else if (path == "f32") g_path = onednn::IntConvPath::f32;
    else throw std::invalid_argument("unknown path " + path);
  });
  m.def("requantize_isa", [] { return std::string(quant::requantize_isa_name(quant::best_requantize_isa())); });
  m.def("resolve_threads", &onednn::resolve_threads);
  m.def("threads_in_scope", [](int n) {
    onednn::ThreadScope scope(n);
    return omp_get_max_threads();
  });
  m.def("max_threads", [] { return omp_get_max_threads(); });
  m.def("data_type", [](std::int32_t code) { return static_cast<int>(onednn::data_type(code)); });
  m.def("dnnl_error", [] {
    // a convolution descriptor with mismatched ranks: oneDNN refuses it, guard translates
    return onednn::guard("probe conv create", [] {
      using tag = dnnl::memory::format_tag;
      using dt = dnnl::memory::data_type;
      dnnl::memory::desc src({1, 3, 8, 8}, dt::f32, tag::nchw), wei({4, 3, 3}, dt::f32, tag::abc),
          dst({1, 4, 6, 6}, dt::f32, tag::nchw);
      dnnl::convolution_forward::primitive_desc pd(onednn::engine(), dnnl::prop_kind::forward_inference,
                                                   dnnl::algorithm::convolution_direct, src, wei, dst, {1, 1}, {0, 0},
                                                   {0, 0});
      return 0;
    });
  });
  py::register_exception<onednn::Error>(m, "OnednnError", PyExc_RuntimeError);
  m.def("requantize", &requantize);
  m.def("add_table", &add_table);
  m.def("quantizer", &quantizer);
  m.def("requantize_seconds", &requantize_seconds);
  m.def("add_uses_formula", &add_uses_formula);
  m.def("int_conv", &int_conv);
  m.def("int_dense", &int_dense);
  m.def("int_conv_seconds", &int_conv_seconds);
  py::class_<ConvOp>(m, "ConvOp")
      .def(py::init<const py::dict&, const py::array&, const py::array&, int, const std::vector<std::int32_t>&,
                    const std::vector<float>&, float, int, const std::vector<std::int32_t>&, int, std::int64_t>())
      .def("run", &ConvOp::run);
  m.def("float_conv", &float_conv);
  m.def("float_dense", &float_dense);
  m.def("float_conv_chain", &float_conv_chain);
  m.def("float_conv_nan_limit", &float_conv_nan_limit);
  m.def("any_past", [](const py::array_t<float, py::array::c_style | py::array::forcecast>& x, float limit) -> bool {
    return onednn::detail::any_past(x.data(), static_cast<std::size_t>(x.size()), limit);
  });
  m.def("pool", &pool);
  m.def("int_conv_requantize", &int_conv_requantize);
}

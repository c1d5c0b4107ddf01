// A pybind11 module driving accel_sdk/onednn.hpp, requantize.hpp and int_ops.hpp for sdk/tests.
#include <accel_sdk/int_ops.hpp>
#include <accel_sdk/onednn.hpp>
#include <accel_sdk/requantize.hpp>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
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

std::int32_t dtype_code(const py::array& a) {
  if (a.dtype().is(py::dtype::of<std::uint8_t>())) return ACCEL_UINT8;
  if (a.dtype().is(py::dtype::of<std::int8_t>())) return ACCEL_INT8;
  throw std::invalid_argument("expected a uint8 or int8 array");
}

// geometry: dict with batch, h, w, c, oc, groups, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr
onednn::IntConvSpec conv_spec(const py::dict& g, const py::array& data, const py::array& weights, int zx,
                              const std::vector<std::int32_t>& zw, const std::string& layout) {
  onednn::IntConvSpec s;
  auto get = [&](const char* k) { return g[k].cast<std::int64_t>(); };
  s.shape.batch = get("batch");
  s.shape.in_h = get("h");
  s.shape.in_w = get("w");
  s.shape.in_channels = get("c");
  s.shape.out_channels = get("oc");
  s.shape.groups = get("groups");
  s.shape.window = {get("kh"), get("kw"), get("sh"), get("sw"), get("dh"), get("dw"),
                    get("pt"), get("pl"), get("pb"), get("pr")};
  s.data_dtype = dtype_code(data);
  s.data_zero_point = zx;
  s.weight_dtype = dtype_code(weights);
  s.weights = weights.data();
  s.weight_layout = layout == "oihw" ? onednn::WeightLayout::oihw
                    : layout == "hwio" ? onednn::WeightLayout::hwio
                                       : onednn::WeightLayout::ohwi;
  s.weight_zero_points = zw;
  s.shape.validate();
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

}  // namespace

PYBIND11_MODULE(_sdk_onednn_probe, m) {
  m.def("cpu_isa", [] { return std::string(onednn::isa_name(onednn::cpu_isa())); });
  m.def("int8_exact", &onednn::int8_exact);
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
  m.def("int_conv", &int_conv);
  m.def("int_conv_requantize", &int_conv_requantize);
}

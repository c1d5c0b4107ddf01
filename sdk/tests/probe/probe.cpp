// _sdk_probe: accel-sdk's C++ headers driven from Python, for the sdk's own tests.
//
// read(blob, script)   runs BlobReader calls one by one ("u32", ("string", 64), ...)
// graph(blob, kind)    parses a graph blob with GraphBlob::parse and returns all of it as Python objects
// geometry functions   accel_sdk::geometry, GeometryError -> ValueError
//
// The blob is copied into a heap buffer of exactly its size first, so a read past
// its end is a read past the end of an allocation, not into a bytes object's slack.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <accel_sdk/blob_reader.hpp>
#include <accel_sdk/geometry.hpp>
#include <accel_sdk/graph_blob.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;
using accel_sdk::AttrValue;
using accel_sdk::BlobError;
using accel_sdk::BlobReader;

namespace {

PyObject* g_blob_error = nullptr;  // _sdk_probe.BlobError(ValueError), with .offset

[[noreturn]] void raise_blob_error(const BlobError& e) {
  py::object err = py::reinterpret_borrow<py::object>(g_blob_error)(e.what());
  err.attr("offset") = e.has_offset() ? py::object(py::int_(e.offset())) : py::none();
  PyErr_SetObject(g_blob_error, err.ptr());
  throw py::error_already_set();
}

struct Copy {
  explicit Copy(const py::bytes& b) {
    std::string_view v = b;
    size = v.size();
    data.reset(new std::uint8_t[size == 0 ? 1 : size]);
    if (size != 0) std::memcpy(data.get(), v.data(), size);
  }
  std::unique_ptr<std::uint8_t[]> data;
  std::size_t size = 0;
};

template <class T>
py::object array(BlobReader& r, std::size_t n) {
  py::list out;
  for (T v : r.read_array<T>(n, "array")) out.append(v);
  return out;
}

template <class T>
py::object counted(BlobReader& r, std::uint32_t max_count) {
  py::list out;
  for (T v : r.read_counted_array<T>("array", max_count)) out.append(v);
  return out;
}

template <class F>
py::object by_kind(const std::string& kind, F f) {
  if (kind == "u8") return f(std::uint8_t{});
  if (kind == "u16") return f(std::uint16_t{});
  if (kind == "u32") return f(std::uint32_t{});
  if (kind == "u64") return f(std::uint64_t{});
  if (kind == "i8") return f(std::int8_t{});
  if (kind == "i16") return f(std::int16_t{});
  if (kind == "i32") return f(std::int32_t{});
  if (kind == "i64") return f(std::int64_t{});
  if (kind == "f32") return f(float{});
  if (kind == "f64") return f(double{});
  throw py::value_error("unknown kind " + kind);
}

py::object step(BlobReader& r, const py::tuple& op) {
  const std::string name = py::str(op[0]);
  auto arg = [&](std::size_t i) { return op[i].cast<std::uint64_t>(); };
  if (name == "bytes") {
    const std::size_t n = arg(1);
    const std::uint8_t* p = r.read_bytes(n);
    return py::bytes(reinterpret_cast<const char*>(p), n);
  }
  if (name == "string") return py::bytes(r.read_string(arg(1)));
  if (name == "align") return (r.align(arg(1)), py::none());
  if (name == "constant") {
    std::size_t n = 0;
    const std::uint8_t* p = r.read_constant(arg(1), &n, "constant", op.size() > 2 ? arg(2) : SIZE_MAX);
    return py::make_tuple(static_cast<std::size_t>(p - r.data()), py::bytes(reinterpret_cast<const char*>(p), n));
  }
  if (name == "magic") return (r.expect_magic(std::string(py::str(op[1]))), py::none());
  if (name == "version") return py::int_(r.expect_version(arg(1), arg(2)));
  if (name == "count") return py::int_(r.read_count(arg(1), "count", static_cast<std::uint32_t>(arg(2))));
  if (name == "end") return (r.expect_end(), py::none());
  if (name == "array") {
    const std::size_t n = arg(2);
    return by_kind(py::str(op[1]), [&](auto t) { return array<decltype(t)>(r, n); });
  }
  if (name == "counted") {
    const auto max_count = static_cast<std::uint32_t>(op.size() > 2 ? arg(2) : UINT32_MAX);
    return by_kind(py::str(op[1]), [&](auto t) { return counted<decltype(t)>(r, max_count); });
  }
  return by_kind(name, [&](auto t) { return py::cast(r.read<decltype(t)>()); });
}

py::list read_script(const py::bytes& blob, const py::list& script) {
  Copy c(blob);
  py::list out;
  try {
    BlobReader r(c.data.get(), c.size);
    for (py::handle op : script) {
      out.append(step(r, py::isinstance<py::tuple>(op) ? py::reinterpret_borrow<py::tuple>(op) : py::make_tuple(op)));
    }
  } catch (const BlobError& e) {
    raise_blob_error(e);
  }
  return out;
}

// Names may be any bytes in a damaged blob: decode them leniently.
py::str txt(const std::string& s) {
  return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
}

py::object attr_value(const AttrValue& v) {
  using K = AttrValue::Kind;
  switch (v.kind()) {
    case K::None: return py::none();
    case K::Bool: return py::bool_(v.as_bool());
    case K::Int: return py::int_(v.as_int());
    case K::Float: return py::float_(v.as_float());
    case K::String: return txt(v.as_string());
    case K::Ints: return py::tuple(py::cast(v.as_ints()));
    case K::Floats: return py::tuple(py::cast(v.as_floats()));
    case K::List: {
      py::list out;
      for (const AttrValue& x : v.as_list()) out.append(attr_value(x));
      return py::tuple(out);
    }
    case K::Tensor: {
      py::dict d;
      d["tensor"] = v.as_tensor();
      return d;
    }
  }
  return py::none();
}

py::dict attrs(const accel_sdk::Attrs& a) {
  py::dict d;
  for (const auto& [k, v] : a) d[txt(k)] = attr_value(v);
  return d;
}

accel_sdk::GraphBlobSpec spec_of(const std::string& kind, std::uint32_t oldest, std::uint32_t newest, const py::dict& limits) {
  accel_sdk::GraphBlobSpec s{kind, oldest, newest, {}};
  for (auto [k, v] : limits) {
    const std::string key = py::str(k);
    auto& L = s.limits;
    if (key == "max_table_bytes") L.max_table_bytes = v.cast<std::uint64_t>();
    else if (key == "max_tensors") L.max_tensors = v.cast<std::uint32_t>();
    else if (key == "max_nodes") L.max_nodes = v.cast<std::uint32_t>();
    else if (key == "max_ids") L.max_ids = v.cast<std::uint32_t>();
    else if (key == "max_attrs") L.max_attrs = v.cast<std::uint32_t>();
    else if (key == "max_parts") L.max_parts = v.cast<std::uint32_t>();
    else if (key == "max_labels") L.max_labels = v.cast<std::uint32_t>();
    else if (key == "max_list") L.max_list = v.cast<std::uint32_t>();
    else if (key == "max_depth") L.max_depth = v.cast<std::uint32_t>();
    else if (key == "max_string") L.max_string = v.cast<std::size_t>();
    else if (key == "max_elements") L.max_elements = v.cast<std::uint64_t>();
    else throw py::key_error(key);
  }
  return s;
}

py::dict graph(const py::bytes& blob, const std::string& kind, std::uint32_t oldest, std::uint32_t newest,
               const py::dict& limits) {
  Copy c(blob);
  const accel_sdk::GraphBlobSpec spec = spec_of(kind, oldest, newest, limits);
  py::dict out;
  try {
    const accel_sdk::GraphBlob g = accel_sdk::GraphBlob::parse(c.data.get(), c.size, spec);
    out["kind"] = txt(g.kind());
    out["kind_version"] = g.kind_version();
    out["alignment"] = g.alignment();
    py::list tensors;
    for (const auto& t : g.tensors()) {
      py::dict d;
      d["name"] = txt(t.name);
      d["dtype"] = t.spec.dtype;
      d["shape"] = py::tuple(py::cast(std::vector<std::int64_t>(t.spec.shape.dims(), t.spec.shape.dims() + t.spec.shape.rank())));
      d["flags"] = t.flags;
      if (t.quantized()) d["quant"] = py::make_tuple(t.quant.axis, t.quant.scale, t.quant.zero_point);
      if (t.constant()) {
        d["data"] = py::bytes(reinterpret_cast<const char*>(t.data), t.nbytes);
        d["offset"] = static_cast<std::size_t>(t.data - c.data.get());
      }
      tensors.append(d);
    }
    out["tensors"] = tensors;
    out["inputs"] = g.inputs();
    out["outputs"] = g.outputs();
    py::list nodes;
    for (const auto& n : g.nodes()) {
      py::dict d;
      d["name"] = txt(n.name);
      d["kind"] = static_cast<int>(n.kind);
      d["kernel"] = txt(n.kernel);
      d["source"] = txt(n.source);
      d["inputs"] = n.inputs;
      d["outputs"] = n.outputs;
      d["attrs"] = attrs(n.attrs);
      py::list parts;
      for (const auto& p : n.parts) {
        parts.append(py::make_tuple(txt(p.label), txt(p.op), attrs(p.attrs), p.inputs, p.outputs));
      }
      d["parts"] = parts;
      py::dict labels;
      for (const auto& [label, id] : n.value_labels) labels[txt(label)] = id;
      d["value_labels"] = labels;
      nodes.append(d);
    }
    out["nodes"] = nodes;
  } catch (const BlobError& e) {
    raise_blob_error(e);
  }
  return out;
}

// One typed attribute query on node `node` (its parts with part >= 0): what a runtime's create does.
py::object query(const py::bytes& blob, const std::string& kind, std::size_t node, int part, const std::string& method,
                 const std::string& key, py::object n) {
  Copy c(blob);
  try {
    const auto g = accel_sdk::GraphBlob::parse(c.data.get(), c.size, {kind, 1, 1, {}});
    const auto& nd = g.nodes().at(node);
    const accel_sdk::Attrs& a = part < 0 ? nd.attrs : nd.parts.at(static_cast<std::size_t>(part)).attrs;
    const std::size_t count = n.is_none() ? accel_sdk::Attrs::npos : n.cast<std::size_t>();
    if (method == "integer") return py::int_(a.integer(key));
    if (method == "number") return py::float_(a.number(key));
    if (method == "boolean") return py::bool_(a.boolean(key));
    if (method == "string") return py::str(a.string(key));
    if (method == "ints") return py::cast(a.ints(key, count));
    if (method == "floats") return py::cast(a.floats(key, count));
    if (method == "label") {
      const accel_sdk::GraphPart* p = nd.part(key);
      if (p != nullptr) return py::str(p->op);
      return py::int_(nd.value(key));
    }
  } catch (const BlobError& e) {
    raise_blob_error(e);
  }
  throw py::value_error("unknown method " + method);
}

// Seconds per GraphBlob::parse of blob (the median of `repeat` runs): a runtime's create-time cost.
double parse_seconds(const py::bytes& blob, const std::string& kind, int repeat) {
  std::string_view v = blob;
  std::vector<double> times;
  volatile std::size_t sink = 0;  // keeps the parse from being optimized away
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto g = accel_sdk::GraphBlob::parse(reinterpret_cast<const std::uint8_t*>(v.data()), v.size(), {kind, 1, 1, {}});
    sink += g.nodes().size();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times.empty() ? 0.0 : times[times.size() / 2];
}

}  // namespace

PYBIND11_MODULE(_sdk_probe, m) {
  g_blob_error = PyErr_NewException("_sdk_probe.BlobError", PyExc_ValueError, nullptr);
  m.attr("BlobError") = py::reinterpret_borrow<py::object>(g_blob_error);
  m.def("read", &read_script, py::arg("blob"), py::arg("script"));
  m.def("graph", &graph, py::arg("blob"), py::arg("kind"), py::arg("oldest") = 1, py::arg("newest") = 1,
        py::arg("limits") = py::dict());
  m.def("query", &query, py::arg("blob"), py::arg("kind"), py::arg("node"), py::arg("part"), py::arg("method"),
        py::arg("key"), py::arg("n") = py::none());
  m.def("parse_seconds", &parse_seconds, py::arg("blob"), py::arg("kind"), py::arg("repeat"));
  namespace geo = accel_sdk::geometry;
  m.def("conv_output_size", &geo::conv_output_size);
  m.def("pool_output_size", &geo::pool_output_size);
  m.def("same_padding", &geo::same_padding);
  m.def("conv2d", [](std::int64_t h, std::int64_t w, std::vector<std::int64_t> win) {
    if (win.size() != 10) throw py::value_error("window: kh kw sh sw dh dw pt pl pb pr");
    const auto g = geo::conv2d(h, w, {win[0], win[1], win[2], win[3], win[4], win[5], win[6], win[7], win[8], win[9]});
    return py::make_tuple(g.oh, g.ow);
  });
  m.def("pool2d", [](std::int64_t h, std::int64_t w, std::vector<std::int64_t> win, bool ceil_mode) {
    if (win.size() != 10) throw py::value_error("window: kh kw sh sw dh dw pt pl pb pr");
    const auto g = geo::pool2d(h, w, {win[0], win[1], win[2], win[3], win[4], win[5], win[6], win[7], win[8], win[9]}, ceil_mode);
    return py::make_tuple(g.oh, g.ow, g.eb, g.er);
  });
}

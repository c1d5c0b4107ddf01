// libFuzzer target: accel_sdk::GraphBlob::parse on arbitrary bytes.
//
// A blob that parses is then used the way a runtime uses it: every tensor's
// constant bytes are read, every attribute is read through its typed accessor,
// every part and label is looked up, so a check the parser missed shows up as an
// out-of-bounds read under AddressSanitizer. Only BlobError may come out.
#include <accel_sdk/graph_blob.hpp>

#include <cstddef>
#include <cstdint>

namespace {

volatile std::uint64_t g_sink;

void use(const accel_sdk::AttrValue& v, int depth) {
  using K = accel_sdk::AttrValue::Kind;
  switch (v.kind()) {
    case K::None: break;
    case K::Bool: g_sink = g_sink + v.as_bool(); break;
    case K::Int: g_sink = g_sink + static_cast<std::uint64_t>(v.as_int()); break;
    case K::Float: g_sink = g_sink + (v.as_float() > 0); break;
    case K::String: g_sink = g_sink + v.as_string().size(); break;
    case K::Ints: for (auto x : v.as_ints()) g_sink = g_sink + static_cast<std::uint64_t>(x); break;
    case K::Floats: for (auto x : v.as_floats()) g_sink = g_sink + (x > 0); break;
    case K::List: for (const auto& x : v.as_list()) use(x, depth + 1); break;
    case K::Tensor: g_sink = g_sink + v.as_tensor(); break;
  }
}

void use(const accel_sdk::Attrs& attrs) {
  for (const auto& [key, value] : attrs) {
    use(value, 1);
    if (attrs.find(key) != &value) __builtin_trap();  // lookup must find every key
    try {
      g_sink = g_sink + attrs.ints(key).size();  // wrong kinds throw BlobError
    } catch (const accel_sdk::BlobError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  accel_sdk::GraphBlobSpec spec{"fuzz", 1, 2, {}};
  spec.limits.max_tensors = 4096;
  spec.limits.max_nodes = 4096;
  spec.limits.max_list = 4096;
  try {
    const auto g = accel_sdk::GraphBlob::parse(data, size, spec);
    for (const auto& t : g.tensors()) {
      std::uint64_t s = t.spec.shape.elements();
      if (t.constant()) {
        for (std::size_t i = 0; i < t.nbytes; ++i) s += t.data[i];
      }
      for (float x : t.quant.scale) s += x > 0;
      g_sink = g_sink + s;
    }
    for (std::uint32_t id : g.inputs()) g_sink = g_sink + g.tensor(id).nbytes;
    for (std::uint32_t id : g.outputs()) g_sink = g_sink + g.tensor(id).nbytes;
    for (const auto& n : g.nodes()) {
      for (std::uint32_t id : n.inputs) g_sink = g_sink + g.tensor(id).nbytes;
      for (std::uint32_t id : n.outputs) g_sink = g_sink + g.tensor(id).nbytes;
      use(n.attrs);
      for (const auto& p : n.parts) {
        use(p.attrs);
        for (std::uint32_t id : p.inputs) g_sink = g_sink + g.tensor(id).nbytes;
        for (std::uint32_t id : p.outputs) g_sink = g_sink + g.tensor(id).nbytes;
        if (!p.label.empty() && n.part(p.label) == nullptr) __builtin_trap();
      }
      for (const auto& [label, id] : n.value_labels) g_sink = g_sink + g.tensor(id).nbytes + (n.value(label) >= 0);
    }
  } catch (const accel_sdk::BlobError&) {
  }
  return 0;
}

// accel_sdk/graph_blob.hpp: the bounded reader of accel graph blobs ("AGRB").
//
// accel_sdk.graph_blob.GraphBlobWriter (Python) writes one partition as a table of
// tensors (dtype, shape, quantization, constants in an aligned section) and a
// table of nodes (kernel name, attributes, tensor ids, a composite's parts and
// labels); the format is in that module's docstring. GraphBlob::parse reads it
// through a BlobReader and checks everything before returning:
//
//   - the size of the tables, every count, string, list and the attribute nesting
//     against GraphLimits;
//   - every tensor id, dtype, rank, dimension and element count, every
//     quantization axis and scale, every constant's offset, size and alignment;
//   - the dataflow: each node reads only tensors defined before it (graph inputs,
//     constants, earlier outputs), each tensor is written once, every graph output
//     is written; a composite's parts read only what is defined before the node or
//     written by an earlier part, and write its outputs or its internal tensors;
//   - the header's kind and kind version against what the runtime reads.
//
// A malformed blob is a BlobError naming the offset ("blob offset 120: node 3
// (mynpu_conv) reads tensor 9 before it is written"). Constants are not copied:
// GraphTensor::data points into the blob, which must outlive the GraphBlob.
//
//   static std::unique_ptr<MyRuntime> create(accel_sdk::BlobReader& blob) {
//     auto g = accel_sdk::GraphBlob::parse(blob, {"mynpu", 1, 1});
//     for (const accel_sdk::GraphNode& n : g.nodes()) {
//       if (n.kernel == "mynpu_conv") {
//         auto strides = n.attrs.ints("strides", 2);       // BlobError unless exactly 2 ints
//         bool relu = n.attrs.boolean("relu", false);
//         const accel_sdk::GraphTensor& w = g.tensor(n.inputs.at(1));
//         if (!w.constant()) n.fail("weights must be constant");
//       }
//     }
//   }
#ifndef ACCEL_SDK_GRAPH_BLOB_HPP
#define ACCEL_SDK_GRAPH_BLOB_HPP

#include <accel/runtime_abi.h>

#include <accel_sdk/blob_reader.hpp>
#include <accel_sdk/tensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace accel_sdk {

namespace detail {
class GraphBlobParser;
}  // namespace detail

// Bounds a graph blob must stay within (the defaults hold any partition accel makes).
struct GraphLimits {
  std::uint64_t max_table_bytes = std::uint64_t{1} << 30;  // header, tensor and node tables (not constants)
  std::uint32_t max_tensors = 1u << 20;
  std::uint32_t max_nodes = 1u << 20;
  std::uint32_t max_ids = 1u << 16;      // inputs or outputs of one node or of the graph
  std::uint32_t max_attrs = 1u << 10;    // attributes of one node or part
  std::uint32_t max_parts = 1u << 10;    // parts of one composite
  std::uint32_t max_labels = 1u << 10;   // value labels of one composite
  std::uint32_t max_list = 1u << 20;     // elements of one list attribute
  std::uint32_t max_depth = 8;           // nesting of list attributes (a flat list is depth 1)
  std::size_t max_string = 1u << 12;     // bytes of a name, key, label or string attribute
  std::uint64_t max_elements = std::uint64_t{1} << 40;  // of one tensor, as accel.ir.MAX_ELEMENTS
};

// What a runtime reads: its kind and the range of its own schema versions.
struct GraphBlobSpec {
  std::string kind;
  std::uint32_t oldest_kind_version = 1;
  std::uint32_t newest_kind_version = 1;
  GraphLimits limits = {};
};

// One attribute value. The typed accessors throw BlobError naming the attribute.
class AttrValue {
 public:
  enum class Kind : std::uint8_t { None = 0, Bool, Int, Float, String, Ints, Floats, List, Tensor };

  Kind kind() const { return kind_; }
  bool is(Kind k) const { return kind_ == k; }
  static const char* kind_name(Kind k) {
    static const char* const names[] = {"none", "bool", "int", "float", "string", "ints", "floats", "list", "tensor"};
    return names[static_cast<int>(k)];
  }

  bool as_bool() const { return (want(Kind::Bool), i_ != 0); }
  std::int64_t as_int() const { return (want(Kind::Int), i_); }
  // A float, or an int read as a float.
  double as_float() const { return kind_ == Kind::Int ? static_cast<double>(i_) : (want(Kind::Float), f_); }
  const std::string& as_string() const { return (want(Kind::String), s_); }
  const std::vector<std::int64_t>& as_ints() const { return (want(Kind::Ints), ints_); }
  const std::vector<double>& as_floats() const { return (want(Kind::Floats), floats_); }
  const std::vector<AttrValue>& as_list() const { return (want(Kind::List), list_); }
  std::uint32_t as_tensor() const { return (want(Kind::Tensor), static_cast<std::uint32_t>(i_)); }

 private:
  friend class detail::GraphBlobParser;
  friend class Attrs;
  void want(Kind k) const {
    if (kind_ != k) throw BlobError(std::string("attribute is ") + kind_name(kind_) + ", not " + kind_name(k));
  }

  Kind kind_ = Kind::None;
  std::int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::vector<std::int64_t> ints_;
  std::vector<double> floats_;
  std::vector<AttrValue> list_;
};

// The attributes of a node or part, by key (ascending, unique).
class Attrs {
 public:
  using Item = std::pair<std::string, AttrValue>;

  std::size_t size() const { return items_.size(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

  const AttrValue* find(std::string_view key) const {
    std::size_t lo = 0, hi = items_.size();
    while (lo < hi) {  // keys are sorted
      const std::size_t mid = lo + (hi - lo) / 2;
      if (items_[mid].first < key) lo = mid + 1; else hi = mid;
    }
    return lo < items_.size() && items_[lo].first == key ? &items_[lo].second : nullptr;
  }
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // The value of key, or BlobError("<owner>: attribute 'key' is missing").
  const AttrValue& at(std::string_view key) const {
    const AttrValue* v = find(key);
    if (v == nullptr) fail(key, "is missing");
    return *v;
  }
  std::int64_t integer(std::string_view key) const { return typed(key, [](const AttrValue& v) { return v.as_int(); }); }
  std::int64_t integer(std::string_view key, std::int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double number(std::string_view key) const { return typed(key, [](const AttrValue& v) { return v.as_float(); }); }
  double number(std::string_view key, double fallback) const { return has(key) ? number(key) : fallback; }
  bool boolean(std::string_view key) const { return typed(key, [](const AttrValue& v) { return v.as_bool(); }); }
  bool boolean(std::string_view key, bool fallback) const { return has(key) ? boolean(key) : fallback; }
  const std::string& string(std::string_view key) const {
    return typed(key, [](const AttrValue& v) -> const std::string& { return v.as_string(); });
  }
  // The ints of key; exactly n of them unless n is npos.
  const std::vector<std::int64_t>& ints(std::string_view key, std::size_t n = npos) const {
    const auto& v = typed(key, [](const AttrValue& a) -> const std::vector<std::int64_t>& { return a.as_ints(); });
    if (n != npos && v.size() != n) fail(key, "has " + std::to_string(v.size()) + " ints, expected " + std::to_string(n));
    return v;
  }
  const std::vector<double>& floats(std::string_view key, std::size_t n = npos) const {
    const auto& v = typed(key, [](const AttrValue& a) -> const std::vector<double>& { return a.as_floats(); });
    if (n != npos && v.size() != n) fail(key, "has " + std::to_string(v.size()) + " floats, expected " + std::to_string(n));
    return v;
  }

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  // BlobError("blob offset N: <owner>: attribute 'key' <what>").
  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw BlobError(offset_, owner_ + ": attribute '" + std::string(key) + "' " + what);
  }

 private:
  friend class detail::GraphBlobParser;
  template <class F>
  auto typed(std::string_view key, F get) const -> decltype(get(std::declval<const AttrValue&>())) {
    const AttrValue& v = at(key);
    try {
      return get(v);
    } catch (const BlobError& e) {
      fail(key, e.what());
    }
  }

  std::vector<Item> items_;
  std::string owner_;
  std::size_t offset_ = 0;
};

struct QuantInfo {
  std::int32_t axis = -1;  // -1: per tensor (one scale and zero point)
  std::vector<float> scale;
  std::vector<std::int32_t> zero_point;
};

struct GraphTensor {
  enum Flags : std::uint8_t { CONSTANT = 1, QUANTIZED = 2, INTERNAL = 4 };

  std::string name;
  TensorSpec spec;
  std::uint8_t flags = 0;
  QuantInfo quant;                     // when quantized()
  const std::uint8_t* data = nullptr;  // constants: spec's bytes, inside the blob
  std::size_t nbytes = 0;              // elements x dtype size

  bool constant() const { return (flags & CONSTANT) != 0; }
  bool quantized() const { return (flags & QUANTIZED) != 0; }
  // An intermediate inside one composite: only that composite's parts use it.
  bool internal() const { return (flags & INTERNAL) != 0; }
};

// One node of a composite's body.
struct GraphPart {
  std::string label;  // the pattern's label, or "" when it gave none
  std::string op;     // the IR op
  Attrs attrs;
  std::vector<std::uint32_t> inputs, outputs;
};

struct GraphNode {
  enum Kind : std::uint8_t { OP = 0, COMPOSITE = 1 };

  std::string name;
  Kind kind = OP;
  std::string kernel;  // the backend's kernel name
  std::string source;  // the IR op or composite name it came from
  std::vector<std::uint32_t> inputs, outputs;
  Attrs attrs;
  std::vector<GraphPart> parts;                                      // composites: the body, producers first
  std::vector<std::pair<std::string, std::uint32_t>> value_labels;  // composites: label -> tensor id
  std::size_t offset = 0;                                            // of the node's record in the blob

  // The part the pattern labelled label, or nullptr.
  const GraphPart* part(std::string_view label) const {
    for (const GraphPart& p : parts) {
      if (!label.empty() && p.label == label) return &p;
    }
    return nullptr;
  }
  // The tensor id of the value labelled label, or -1.
  std::int64_t value(std::string_view label) const {
    for (const auto& [l, id] : value_labels) {
      if (l == label) return id;
    }
    return -1;
  }
  // BlobError("blob offset N: node 'name' (kernel): what").
  [[noreturn]] void fail(const std::string& what) const {
    throw BlobError(offset, "node '" + name + "' (" + kernel + "): " + what);
  }
};

class GraphBlob {
 public:
  static constexpr std::uint32_t kVersion = 1;
  static constexpr std::size_t kMaxAlignment = 4096;

  // Parses the whole of blob (its offset must be 0; it ends at its end).
  static GraphBlob parse(BlobReader& blob, const GraphBlobSpec& spec);
  static GraphBlob parse(const std::uint8_t* data, std::size_t size, const GraphBlobSpec& spec) {
    BlobReader r(data, size);
    return parse(r, spec);
  }

  const std::string& kind() const { return kind_; }
  std::uint32_t kind_version() const { return kind_version_; }
  std::size_t alignment() const { return alignment_; }
  const std::vector<GraphTensor>& tensors() const { return tensors_; }
  const GraphTensor& tensor(std::uint32_t id) const { return tensors_.at(id); }
  const std::vector<std::uint32_t>& inputs() const { return inputs_; }
  const std::vector<std::uint32_t>& outputs() const { return outputs_; }
  const std::vector<GraphNode>& nodes() const { return nodes_; }
  // The node that writes tensor `id`, or null (a graph input, a constant).
  const GraphNode* producer(std::uint32_t id) const {
    return id < producer_.size() && producer_[id] >= 0 ? &nodes_[static_cast<std::size_t>(producer_[id])] : nullptr;
  }

  // How many node inputs read tensor `id` (a node reading it twice counts twice), and the
  // node that does when that is one, else null.
  std::size_t reader_count(std::uint32_t id) const { return id < readers_.size() ? readers_[id] : 0; }
  const GraphNode* only_reader(std::uint32_t id) const {
    return reader_count(id) == 1 ? &nodes_[static_cast<std::size_t>(last_reader_[id])] : nullptr;
  }
  // Whether tensor `id` is one of the graph's outputs.
  bool is_output(std::uint32_t id) const { return std::find(outputs_.begin(), outputs_.end(), id) != outputs_.end(); }

  // Specs of the graph inputs and outputs, for accel_sdk::check_tensors in run().
  std::vector<TensorSpec> input_specs() const { return specs(inputs_); }
  std::vector<TensorSpec> output_specs() const { return specs(outputs_); }

 private:
  friend class detail::GraphBlobParser;
  std::vector<TensorSpec> specs(const std::vector<std::uint32_t>& ids) const {
    std::vector<TensorSpec> out;
    out.reserve(ids.size());
    for (std::uint32_t id : ids) out.push_back(tensors_[id].spec);
    return out;
  }

  std::string kind_;
  std::uint32_t kind_version_ = 0;
  std::size_t alignment_ = 1;
  std::vector<GraphTensor> tensors_;
  std::vector<std::uint32_t> inputs_, outputs_;
  std::vector<GraphNode> nodes_;
  std::vector<std::int64_t> producer_;  // tensor id -> index in nodes_, -1 for none
  std::vector<std::size_t> readers_;    // tensor id -> node inputs reading it
  std::vector<std::int64_t> last_reader_;  // tensor id -> index in nodes_ of the last node reading it, -1 for none
};

namespace detail {

// Reads the tables of one graph blob into g (GraphBlob::parse drives it).
class GraphBlobParser {
 public:
  GraphBlobParser(BlobReader& r, const GraphLimits& limits, GraphBlob& g, const std::uint8_t* const_base)
      : r_(r), lim_(limits), g_(g), const_base_(const_base) {}

  void tensors(std::size_t const_size) {
    const std::uint32_t n = r_.read_count(7, "tensor count", lim_.max_tensors);  // name length, dtype, rank, flags
    g_.tensors_.resize(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      GraphTensor& t = g_.tensors_[i];
      const std::size_t at = r_.offset();
      const std::string what = "tensor " + std::to_string(i);
      t.name = r_.read_string(lim_.max_string, "tensor name");
      t.spec.dtype = r_.read_in_range<std::uint8_t>(0, ACCEL_BOOL, "dtype");
      const std::uint8_t rank = r_.read_in_range<std::uint8_t>(0, ACCEL_MAX_RANK, "rank");
      std::int64_t dims[ACCEL_MAX_RANK] = {};
      std::uint64_t elements = 1;
      for (std::uint8_t d = 0; d < rank; ++d) {
        dims[d] = r_.read_in_range<std::int64_t>(0, static_cast<std::int64_t>(lim_.max_elements), "dimension");
        const auto dim = static_cast<std::uint64_t>(dims[d]);
        if (dim != 0 && elements > lim_.max_elements / dim) {
          r_.fail_at(at, what + " '" + t.name + "' has more than " + std::to_string(lim_.max_elements) + " elements");
        }
        elements *= dim;
      }
      t.spec.shape = Shape(dims, rank);
      t.nbytes = checked_mul(static_cast<std::size_t>(elements), dtype_size(t.spec.dtype), "tensor size");
      t.flags = r_.read_in_range<std::uint8_t>(0, 7, "tensor flags");
      if (t.constant() && t.internal()) r_.fail_at(at, what + " '" + t.name + "' is both constant and internal");
      if (t.quantized()) quant(t, what);
      if (t.constant()) {
        const std::size_t off_at = r_.offset();
        const std::uint64_t offset = r_.read<std::uint64_t>("constant offset");
        const std::uint64_t nbytes = r_.read<std::uint64_t>("constant size");
        if (nbytes != t.nbytes) {
          r_.fail_at(off_at, what + " '" + t.name + "' (" + t.spec.describe() + ") needs " + std::to_string(t.nbytes) +
                                 " bytes, its constant has " + std::to_string(nbytes));
        }
        if (offset % g_.alignment_ != 0 || offset > const_size || nbytes > const_size - offset) {
          r_.fail_at(off_at, what + " '" + t.name + "': constant at " + std::to_string(offset) + " (+" +
                                 std::to_string(nbytes) + " bytes) is not an aligned range of the " +
                                 std::to_string(const_size) + "-byte constant section");
        }
        t.data = const_base_ + offset;
      }
    }
  }

  std::vector<std::uint32_t> graph_ids(const char* what) {
    const std::size_t at = r_.offset();
    std::vector<std::uint32_t> ids = r_.read_counted_array<std::uint32_t>(what, lim_.max_ids);
    for (std::uint32_t id : ids) {
      const GraphTensor& t = tensor_at(id, at, what);
      if (t.constant() || t.internal()) r_.fail_at(at, std::string(what) + " " + std::to_string(id) + " is a " +
                                                           (t.constant() ? "constant" : "composite's internal tensor"));
      if (state_[id] == LISTED) r_.fail_at(at, std::string(what) + " " + std::to_string(id) + " is listed twice");
      state_[id] = LISTED;
    }
    return ids;
  }

  void graph() {
    state_.assign(g_.tensors_.size(), UNDEFINED);
    g_.inputs_ = graph_ids("graph input");
    for (auto& s : state_) s = UNDEFINED;
    g_.outputs_ = graph_ids("graph output");
    for (std::uint32_t id : g_.inputs_) {
      if (state_[id] == LISTED) r_.fail("graph output " + std::to_string(id) + " is also a graph input");
    }
    for (std::size_t t = 0; t < state_.size(); ++t) state_[t] = g_.tensors_[t].constant() ? DEFINED : UNDEFINED;
    for (std::uint32_t id : g_.inputs_) state_[id] = DEFINED;
    part_writer_.assign(g_.tensors_.size(), 0);

    const std::uint32_t n = r_.read_count(33, "node count", lim_.max_nodes);  // the fields of a node without content
    g_.nodes_.resize(n);
    for (std::uint32_t i = 0; i < n; ++i) node(g_.nodes_[i], i);
    g_.producer_.assign(g_.tensors_.size(), -1);
    g_.readers_.assign(g_.tensors_.size(), 0);
    g_.last_reader_.assign(g_.tensors_.size(), -1);
    for (std::uint32_t i = 0; i < n; ++i) {
      for (std::uint32_t id : g_.nodes_[i].outputs) g_.producer_[id] = i;
      for (std::uint32_t id : g_.nodes_[i].inputs) {
        ++g_.readers_[id];
        g_.last_reader_[id] = i;
      }
    }
    for (std::uint32_t id : g_.outputs_) {
      if (state_[id] != DEFINED) r_.fail("graph output " + std::to_string(id) + " is never written");
    }
  }

 private:
  enum State : std::uint8_t { UNDEFINED, DEFINED, PENDING, LISTED };

  void quant(GraphTensor& t, const std::string& what) {
    const std::size_t at = r_.offset();
    t.quant.axis = r_.read<std::int32_t>("quantization axis");
    if (t.quant.axis < -1 || t.quant.axis >= t.spec.shape.rank()) {
      r_.fail_at(at, what + " '" + t.name + "': quantization axis " + std::to_string(t.quant.axis) + " out of range for rank " +
                         std::to_string(t.spec.shape.rank()));
    }
    const std::uint64_t want = t.quant.axis < 0 ? 1 : static_cast<std::uint64_t>(t.spec.shape[t.quant.axis]);
    const std::size_t n_at = r_.offset();
    const std::uint32_t n = r_.read_count(8, "scale count");  // a scale and a zero point each
    if (n != want) {
      r_.fail_at(n_at, what + " '" + t.name + "': " + std::to_string(n) + " quantization scales, expected " + std::to_string(want));
    }
    t.quant.scale = r_.read_array<float>(n, "scales");
    for (float s : t.quant.scale) {
      if (!(std::isfinite(s) && s > 0)) r_.fail_at(n_at, what + " '" + t.name + "': a quantization scale is not finite and > 0");
    }
    t.quant.zero_point = r_.read_array<std::int32_t>(n, "zero points");
  }

  const GraphTensor& tensor_at(std::uint32_t id, std::size_t at, const char* what) {
    if (id >= g_.tensors_.size()) {
      r_.fail_at(at, std::string(what) + " id " + std::to_string(id) + " out of range (" + std::to_string(g_.tensors_.size()) +
                         " tensors)");
    }
    return g_.tensors_[id];
  }

  std::vector<std::uint32_t> ids(const char* what) {
    const std::size_t at = r_.offset();
    std::vector<std::uint32_t> out = r_.read_counted_array<std::uint32_t>(what, lim_.max_ids);
    for (std::uint32_t id : out) tensor_at(id, at, what);
    return out;
  }

  std::string name(const char* what, bool allow_empty = true) {
    const std::size_t at = r_.offset();
    std::string s = r_.read_string(lim_.max_string, what);
    if (!allow_empty && s.empty()) r_.fail_at(at, std::string(what) + " is empty");
    return s;
  }

  void node(GraphNode& n, std::uint32_t index) {
    n.offset = r_.offset();
    const std::string where = "node " + std::to_string(index);
    n.name = name("node name");
    n.kind = static_cast<GraphNode::Kind>(r_.read_in_range<std::uint8_t>(GraphNode::OP, GraphNode::COMPOSITE, "node kind"));
    n.kernel = name("kernel name", false);
    n.source = name("source op", false);
    const std::string who = where + " (" + n.kernel + ")";
    n.inputs = ids("node input");
    n.outputs = ids("node output");
    for (std::uint32_t id : n.inputs) {
      if (g_.tensors_[id].internal()) n.fail("reads tensor " + std::to_string(id) + ", a composite's internal tensor");
      if (state_[id] != DEFINED) n.fail("reads tensor " + std::to_string(id) + " before it is written");
    }
    for (std::uint32_t id : n.outputs) {
      const GraphTensor& t = g_.tensors_[id];
      if (t.constant() || t.internal()) n.fail("writes tensor " + std::to_string(id) + ", a " + (t.constant() ? "constant" : "composite's internal tensor"));
      if (state_[id] != UNDEFINED) n.fail("writes tensor " + std::to_string(id) + ", which is already defined");
      state_[id] = PENDING;
    }
    n.attrs = attrs(who);
    const std::uint32_t n_parts = r_.read_count(20, "part count", lim_.max_parts);
    if (n.kind == GraphNode::OP && n_parts != 0) n.fail("an op has no parts");
    n.parts.resize(n_parts);
    const std::uint32_t stamp = index + 1;
    for (std::uint32_t p = 0; p < n_parts; ++p) part(n, n.parts[p], p, stamp);
    if (n_parts != 0) {
      for (std::uint32_t id : n.outputs) {
        if (part_writer_[id] != stamp) n.fail("output tensor " + std::to_string(id) + " is written by none of its parts");
      }
    }
    const std::uint32_t n_labels = r_.read_count(8, "value label count", lim_.max_labels);
    if (n.kind == GraphNode::OP && n_labels != 0) n.fail("an op has no labels");
    n.value_labels.reserve(n_labels);
    for (std::uint32_t l = 0; l < n_labels; ++l) {
      const std::size_t at = r_.offset();
      std::string label = name("value label", false);
      const std::uint32_t id = r_.read<std::uint32_t>("labelled tensor id");
      tensor_at(id, at, "labelled tensor");
      if (n.part(label) != nullptr || n.value(label) >= 0) r_.fail_at(at, who + ": label '" + label + "' is used twice");
      n.value_labels.emplace_back(std::move(label), id);
    }
    for (std::uint32_t id : n.outputs) state_[id] = DEFINED;
  }

  void part(GraphNode& n, GraphPart& p, std::uint32_t index, std::uint32_t stamp) {
    const std::size_t at = r_.offset();
    const std::string who = "node '" + n.name + "' part " + std::to_string(index);
    p.label = name("part label");
    if (!p.label.empty()) {
      for (std::uint32_t q = 0; q < index; ++q) {
        if (n.parts[q].label == p.label) r_.fail_at(at, who + ": label '" + p.label + "' is used twice");
      }
    }
    p.op = name("part op", false);
    p.attrs = attrs(who + " (" + p.op + ")");
    p.inputs = ids("part input");
    p.outputs = ids("part output");
    for (std::uint32_t id : p.inputs) {
      if (!(state_[id] == DEFINED || part_writer_[id] == stamp)) {
        r_.fail_at(at, who + " (" + p.op + ") reads tensor " + std::to_string(id) + " before it is written");
      }
    }
    for (std::uint32_t id : p.outputs) {
      const GraphTensor& t = g_.tensors_[id];
      const bool ok = part_writer_[id] == 0 && ((t.internal() && state_[id] == UNDEFINED) || state_[id] == PENDING);
      if (!ok) {
        r_.fail_at(at, who + " (" + p.op + ") writes tensor " + std::to_string(id) +
                           ", which is not an unwritten output or internal tensor of its composite");
      }
      part_writer_[id] = stamp;
    }
  }

  Attrs attrs(const std::string& owner) {
    Attrs a;
    a.owner_ = owner;
    a.offset_ = r_.offset();
    const std::uint32_t n = r_.read_count(5, "attribute count", lim_.max_attrs);  // key length, tag
    a.items_.resize(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::size_t at = r_.offset();
      a.items_[i].first = name("attribute name", false);
      if (i > 0 && !(a.items_[i - 1].first < a.items_[i].first)) {
        r_.fail_at(at, owner + ": attribute '" + a.items_[i].first + "' is out of order or repeated");
      }
      value(a.items_[i].second, 1);
    }
    return a;
  }

  void value(AttrValue& v, std::uint32_t depth) {
    using K = AttrValue::Kind;
    v.kind_ = static_cast<K>(r_.read_in_range<std::uint8_t>(0, static_cast<std::uint8_t>(K::Tensor), "attribute tag"));
    switch (v.kind_) {
      case K::None: break;
      case K::Bool: v.i_ = r_.read_in_range<std::uint8_t>(0, 1, "bool"); break;
      case K::Int: v.i_ = r_.read<std::int64_t>("int"); break;
      case K::Float: v.f_ = r_.read<double>("float"); break;
      case K::String: v.s_ = r_.read_string(lim_.max_string, "string attribute"); break;
      case K::Ints: v.ints_ = r_.read_counted_array<std::int64_t>("ints", lim_.max_list); break;
      case K::Floats: v.floats_ = r_.read_counted_array<double>("floats", lim_.max_list); break;
      case K::List: {
        const std::size_t at = r_.offset();
        if (depth > lim_.max_depth) r_.fail_at(at, "list attribute nested deeper than " + std::to_string(lim_.max_depth));
        const std::uint32_t n = r_.read_count(1, "list", lim_.max_list);
        v.list_.resize(n);
        for (AttrValue& x : v.list_) value(x, depth + 1);
        break;
      }
      case K::Tensor: {
        const std::size_t at = r_.offset();
        const std::uint32_t id = r_.read<std::uint32_t>("tensor attribute");
        if (!tensor_at(id, at, "tensor attribute").constant()) r_.fail_at(at, "tensor attribute " + std::to_string(id) + " is not a constant");
        v.i_ = id;
        break;
      }
    }
  }

 private:
  BlobReader& r_;
  const GraphLimits& lim_;
  GraphBlob& g_;
  const std::uint8_t* const_base_;
  std::vector<std::uint8_t> state_;
  std::vector<std::uint32_t> part_writer_;  // index + 1 of the node whose part wrote the tensor
};

}  // namespace detail

inline GraphBlob GraphBlob::parse(BlobReader& blob, const GraphBlobSpec& spec) {
  if (blob.offset() != 0) blob.fail("a graph blob is read from its first byte");
  GraphBlob g;
  blob.expect_magic("AGRB");
  blob.expect_version(kVersion, kVersion);
  const std::size_t flags_at = blob.offset();
  if (blob.read<std::uint32_t>("flags") != 0) blob.fail_at(flags_at, "flags must be 0 in format version 1");
  const std::size_t kind_at = blob.offset();
  g.kind_ = blob.read_string(64, "kind");
  if (g.kind_ != spec.kind) blob.fail_at(kind_at, "a '" + g.kind_ + "' graph blob, this runtime reads '" + spec.kind + "'");
  const std::size_t kv_at = blob.offset();
  g.kind_version_ = blob.read<std::uint32_t>("kind version");
  if (g.kind_version_ < spec.oldest_kind_version || g.kind_version_ > spec.newest_kind_version) {
    blob.fail_at(kv_at, spec.kind + " version " + std::to_string(g.kind_version_) + " is not supported (this runtime reads " +
                            std::to_string(spec.oldest_kind_version) + ".." + std::to_string(spec.newest_kind_version) + ")");
  }
  const std::size_t align_at = blob.offset();
  const std::uint32_t alignment = blob.read<std::uint32_t>("alignment");
  if (alignment == 0 || alignment > kMaxAlignment || (alignment & (alignment - 1)) != 0) {
    blob.fail_at(align_at, "alignment " + std::to_string(alignment) + " is not a power of two in [1, 4096]");
  }
  g.alignment_ = alignment;
  const std::size_t section_at = blob.offset();
  const std::uint64_t const_offset = blob.read<std::uint64_t>("constants offset");
  const std::uint64_t const_size = blob.read<std::uint64_t>("constants size");
  if (const_offset >= blob.offset() && const_size <= std::numeric_limits<std::uint64_t>::max() - const_offset &&
      const_offset + const_size > blob.size()) {  // a truncated blob: the section runs past its end
    blob.fail_at(section_at, "constant section at " + std::to_string(const_offset) + " (+" + std::to_string(const_size) +
                                 " bytes): needs " + std::to_string(const_offset + const_size - blob.offset()) +
                                 " bytes, " + std::to_string(blob.remaining()) + " left");
  }
  if (const_offset % alignment != 0 || const_offset < blob.offset() || const_offset > blob.size() ||
      const_size != blob.size() - const_offset) {
    blob.fail_at(section_at, "constant section at " + std::to_string(const_offset) + " (+" + std::to_string(const_size) +
                                 " bytes) is not an aligned section ending the " + std::to_string(blob.size()) + "-byte blob");
  }
  if (const_offset > spec.limits.max_table_bytes) {
    blob.fail_at(section_at, "the tables take " + std::to_string(const_offset) + " bytes, more than the limit " +
                                 std::to_string(spec.limits.max_table_bytes));
  }
  // the tables are read through a reader that ends where the constant section begins
  BlobReader tables(blob.data(), static_cast<std::size_t>(const_offset));
  tables.skip(blob.offset(), "header");
  detail::GraphBlobParser p(tables, spec.limits, g, blob.data() + const_offset);
  p.tensors(static_cast<std::size_t>(const_size));
  p.graph();
  tables.align(alignment, "padding before the constant section");
  tables.expect_end();
  blob.skip(blob.remaining(), "graph blob");
  return g;
}

}  // namespace accel_sdk

#endif  // ACCEL_SDK_GRAPH_BLOB_HPP

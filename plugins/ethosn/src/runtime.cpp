// The ethosn runtime: loads a blob (format in README.md) and runs it on the CPU,
// float32, NHWC activations.
//
// create() validates the whole blob before anything runs: the tensor table,
// every id, each op's arity and the shapes its attributes imply, the order
// (an op reads only tensors written before it). run() is const, so one loaded
// blob may run on several threads at once: intermediates live in a per-call
// arena, constants and packed weights were copied in create().
#include <accel_sdk/blob_reader.hpp>
#include <accel_sdk/geometry.hpp>
#include <accel_sdk/runtime.hpp>
#include <accel_sdk/tensor.hpp>
#include <accel_sdk/thread_pool.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

using accel_sdk::BlobReader;
using accel_sdk::Shape;
using accel_sdk::TensorSpec;
using accel_sdk::TensorView;
using accel_sdk::geometry::Window2d;  // kh kw sh sw dh dw pt pl pb pr: the blob's window order

constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kMaxTensors = 1u << 20;
constexpr std::uint32_t kMaxOps = 1u << 20;
constexpr std::int64_t kMaxDim = std::int64_t{1} << 32;
constexpr std::size_t kMaxElements = std::size_t{1} << 40;
constexpr std::int64_t kMaxWindow = 1 << 16;  // kernel sizes, strides, dilations, paddings
constexpr std::uint32_t kNoTensor = 0xFFFFFFFFu;
constexpr std::size_t kConstantAlign = 64;  // serializer.py: CONSTANT_ALIGN

enum Opcode : std::uint8_t { RELU = 0, ADD = 1, MAX_POOL2D = 2, CONV2D = 3 };
enum Kind : std::uint8_t { ACTIVATION = 0, CONSTANT = 1 };

struct Tensor {
  TensorSpec spec;
  Kind kind = ACTIVATION;
  std::vector<float> data;      // constants
  std::size_t arena_offset = 0;  // intermediates (in floats)
};

struct Op {
  Opcode code = RELU;
  std::uint32_t x = 0, y = 0;
  std::uint32_t b = kNoTensor;  // add: second operand; conv2d: bias (or kNoTensor)
  Window2d win;
  bool relu = false;            // conv2d
  std::vector<float> weights;   // conv2d: packed [KH][KW][I][O]
};

class EthosnRuntime {
 public:
  static std::unique_ptr<EthosnRuntime> create(BlobReader& blob) {
    auto rt = std::make_unique<EthosnRuntime>();
    blob.expect_magic("ETHO");
    blob.expect_version(kVersion, kVersion);
    rt->read_tensors(blob);
    rt->inputs_ = rt->read_ids(blob, "graph input");
    rt->outputs_ = rt->read_ids(blob, "graph output");
    rt->read_ops(blob);
    blob.expect_end();
    rt->plan();
    return rt;
  }

  void run(const std::vector<TensorView>& inputs, std::vector<TensorView>& outputs) const {
    accel_sdk::check_tensors("input", inputs, in_specs_);
    accel_sdk::check_tensors("output", outputs, out_specs_);
    std::vector<float> arena(arena_floats_);
    std::vector<float*> ptr(tensors_.size(), nullptr);
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      ptr[t] = tensors_[t].kind == CONSTANT ? const_cast<float*>(tensors_[t].data.data())
                                            : arena.data() + tensors_[t].arena_offset;
    }
    for (std::size_t i = 0; i < inputs_.size(); ++i) ptr[inputs_[i]] = inputs[i].data_as<float>();
    for (std::size_t i = 0; i < outputs_.size(); ++i) ptr[outputs_[i]] = outputs[i].data_as<float>();
    for (const Op& op : ops_) execute(op, ptr);
  }

 private:
  const Shape& shape(std::uint32_t id) const { return tensors_[id].spec.shape; }

  void read_tensors(BlobReader& blob) {
    const std::uint32_t n = blob.read_count(3, "tensor count", kMaxTensors);
    tensors_.resize(n);
    for (Tensor& t : tensors_) {
      const std::size_t at = blob.offset();
      t.spec.dtype = blob.read<std::uint8_t>("dtype");
      if (t.spec.dtype != ACCEL_FLOAT32) blob.fail_at(at, "dtype code " + std::to_string(t.spec.dtype) + ", this runtime reads float32 (0) only");
      const auto rank = blob.read_in_range<std::uint8_t>(0, ACCEL_MAX_RANK, "rank");
      std::int64_t dims[ACCEL_MAX_RANK] = {};
      for (std::uint8_t d = 0; d < rank; ++d) dims[d] = blob.read_in_range<std::int64_t>(0, kMaxDim, "dimension");
      t.spec.shape = Shape(dims, rank);
      if (t.spec.shape.elements() > kMaxElements) blob.fail("tensor " + t.spec.describe() + " has more than 2^40 elements");
      t.kind = static_cast<Kind>(blob.read_in_range<std::uint8_t>(ACTIVATION, CONSTANT, "tensor kind"));
      if (t.kind == CONSTANT) {
        const std::size_t bytes = accel_sdk::checked_mul(t.spec.shape.elements(), sizeof(float), "constant");
        std::size_t size = 0;
        const std::size_t at = blob.offset();
        const std::uint8_t* p = blob.read_constant(kConstantAlign, &size, "constant", bytes);
        if (size != bytes) blob.fail_at(at, "constant " + t.spec.describe() + " has " + std::to_string(size) + " bytes");
        t.data.resize(t.spec.shape.elements());
        if (bytes != 0) std::memcpy(t.data.data(), p, bytes);  // little-endian float32, as the host's
      }
    }
  }

  std::vector<std::uint32_t> read_ids(BlobReader& blob, const char* what) {
    std::vector<std::uint32_t> ids = blob.read_counted_array<std::uint32_t>(what, static_cast<std::uint32_t>(tensors_.size()));
    std::vector<bool> seen(tensors_.size(), false);
    for (std::uint32_t id : ids) {
      if (id >= tensors_.size()) blob.fail(std::string(what) + " id " + std::to_string(id) + " out of range");
      if (tensors_[id].kind != ACTIVATION) blob.fail(std::string(what) + " " + std::to_string(id) + " is a constant");
      if (seen[id]) blob.fail(std::string(what) + " " + std::to_string(id) + " listed twice");
      seen[id] = true;
    }
    return ids;
  }

  // An id of a tensor the op may read (defined) or write (not yet defined, an activation).
  std::uint32_t read_id(BlobReader& blob, const std::vector<bool>& defined, bool write, const char* what) const {
    const std::size_t at = blob.offset();
    const auto id = blob.read<std::uint32_t>(what);
    if (id >= tensors_.size()) blob.fail_at(at, std::string(what) + " id " + std::to_string(id) + " out of range");
    if (write && (defined[id] || tensors_[id].kind != ACTIVATION)) {
      blob.fail_at(at, std::string(what) + " " + std::to_string(id) + " is written twice, or is an input or a constant");
    }
    if (!write && !defined[id]) blob.fail_at(at, std::string(what) + " " + std::to_string(id) + " is read before it is written");
    return id;
  }

  // Ten i64 in [0, 2^16]; geometry.hpp checks the rest (positive kernel, strides, dilation; padding vs window).
  static Window2d read_window(BlobReader& blob) {
    std::int64_t v[10];
    for (std::int64_t& x : v) x = blob.read_in_range<std::int64_t>(0, kMaxWindow, "window attribute");
    return Window2d{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]};
  }

  void read_ops(BlobReader& blob) {
    std::vector<bool> defined(tensors_.size(), false);
    for (std::size_t t = 0; t < tensors_.size(); ++t) defined[t] = tensors_[t].kind == CONSTANT;
    for (std::uint32_t id : inputs_) defined[id] = true;
    const std::uint32_t n = blob.read_count(9, "op count", kMaxOps);
    ops_.resize(n);
    for (Op& op : ops_) {
      const std::size_t at = blob.offset();
      op.code = static_cast<Opcode>(blob.read_in_range<std::uint8_t>(RELU, CONV2D, "opcode"));
      op.x = read_id(blob, defined, false, "op input");
      const bool conv = op.code == CONV2D;
      if (op.code == ADD || conv) op.b = read_id(blob, defined, false, conv ? "weight" : "op input");
      std::uint32_t bias = kNoTensor;
      if (conv && blob.read_in_range<std::uint8_t>(0, 1, "has bias") == 1) bias = read_id(blob, defined, false, "bias");
      if (op.code == MAX_POOL2D || conv) op.win = read_window(blob);
      const bool flag = (op.code == MAX_POOL2D || conv) && blob.read_in_range<std::uint8_t>(0, 1, "flag") == 1;
      op.y = read_id(blob, defined, true, "op output");
      defined[op.y] = true;
      check_shapes(blob, at, op, bias, flag);
    }
    for (std::uint32_t id : outputs_) {
      if (!defined[id]) blob.fail("graph output " + std::to_string(id) + " is never written");
    }
  }

  void check_shapes(BlobReader& blob, std::size_t at, Op& op, std::uint32_t bias, bool flag) {
    const Shape& x = shape(op.x);
    const Shape& y = shape(op.y);
    auto need = [&](bool ok, const std::string& what) {
      if (!ok) blob.fail_at(at, "op of opcode " + std::to_string(op.code) + ": " + what);
    };
    switch (op.code) {
      case RELU:
        need(x == y, "output shape " + y.str() + " differs from the input's " + x.str());
        break;
      case ADD:
        need(x == y && shape(op.b) == y, "add needs three tensors of one shape");
        break;
      case MAX_POOL2D:
      case CONV2D: {
        need(x.rank() == 4, "input must be 4-D (NHWC)");
        std::int64_t channels = x[3], oh = 0, ow = 0;
        try {  // output size as accel computes it; a window that does not fit is refused
          if (op.code == CONV2D) {
            const auto g = accel_sdk::geometry::conv2d(x[1], x[2], op.win);
            oh = g.oh, ow = g.ow;
          } else {
            const auto g = accel_sdk::geometry::pool2d(x[1], x[2], op.win, flag);
            oh = g.oh, ow = g.ow;
          }
        } catch (const accel_sdk::geometry::GeometryError& e) {
          need(false, e.what());
        }
        if (op.code == CONV2D) {
          op.relu = flag;
          const Shape& k = shape(op.b);
          need(tensors_[op.b].kind == CONSTANT && k.rank() == 4 && k[1] == op.win.kh && k[2] == op.win.kw && k[3] == x[3],
               "weight must be a constant OHWI [O, kh, kw, C]");
          channels = k[0];
          need(bias == kNoTensor || (tensors_[bias].kind == CONSTANT && shape(bias) == Shape{channels}),
               "bias must be a constant of the output channels");
          pack_weights(op, tensors_[op.b], bias == kNoTensor ? nullptr : &tensors_[bias]);
        }
        const Shape want{x[0], oh, ow, channels};
        need(y == want, "output shape " + y.str() + " does not follow from the window (" + want.str() + ")");
        break;
      }
    }
  }

  // Weights [O][KH][KW][I] -> [KH][KW][I][O] (the inner loop runs over output channels),
  // followed by the O bias values (zeros without bias).
  static void pack_weights(Op& op, const Tensor& w, const Tensor* bias) {
    const Shape& s = w.spec.shape;
    const std::size_t o = s[0], kh = s[1], kw = s[2], c = s[3];
    op.weights.assign(w.data.size() + o, 0.0f);
    for (std::size_t oc = 0; oc < o; ++oc)
      for (std::size_t r = 0; r < kh; ++r)
        for (std::size_t q = 0; q < kw; ++q)
          for (std::size_t i = 0; i < c; ++i) op.weights[((r * kw + q) * c + i) * o + oc] = w.data[((oc * kh + r) * kw + q) * c + i];
    if (bias != nullptr) std::copy(bias->data.begin(), bias->data.end(), op.weights.begin() + w.data.size());
  }

  // Intermediates: one arena per run, each tensor at a 64-byte aligned offset.
  void plan() {
    std::vector<bool> external(tensors_.size(), false);
    for (std::uint32_t id : inputs_) external[id] = true;
    for (std::uint32_t id : outputs_) external[id] = true;
    std::size_t offset = 0;
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      if (tensors_[t].kind == CONSTANT || external[t]) continue;
      tensors_[t].arena_offset = offset;
      offset = accel_sdk::checked_add(offset, (tensors_[t].spec.shape.elements() + 15) / 16 * 16, "arena");
    }
    arena_floats_ = offset;
    for (std::uint32_t id : inputs_) in_specs_.push_back(tensors_[id].spec);
    for (std::uint32_t id : outputs_) out_specs_.push_back(tensors_[id].spec);
  }

  void execute(const Op& op, const std::vector<float*>& ptr) const {
    const float* x = ptr[op.x];
    float* y = ptr[op.y];
    const std::size_t n = shape(op.y).elements();
    switch (op.code) {
      case RELU:
        for (std::size_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];  // NaN stays NaN, as in numpy
        break;
      case ADD: {
        const float* b = ptr[op.b];
        for (std::size_t i = 0; i < n; ++i) y[i] = x[i] + b[i];
        break;
      }
      case MAX_POOL2D:
        max_pool(op, shape(op.x), shape(op.y), x, y);
        break;
      case CONV2D:
        conv2d(op, shape(op.x), shape(op.y), x, y);
        break;
    }
  }

  static void max_pool(const Op& op, const Shape& xs, const Shape& ys, const float* x, float* y) {
    const Window2d& w = op.win;
    const std::int64_t H = xs[1], W = xs[2], C = xs[3], OH = ys[1], OW = ys[2];
    for (std::int64_t b = 0; b < ys[0]; ++b) {
      for (std::int64_t oh = 0; oh < OH; ++oh) {
        for (std::int64_t ow = 0; ow < OW; ++ow) {
          float* out = y + ((b * OH + oh) * OW + ow) * C;
          std::fill(out, out + C, -std::numeric_limits<float>::infinity());  // padding never wins
          for (std::int64_t r = 0; r < w.kh; ++r) {
            const std::int64_t h = oh * w.sh - w.pt + r * w.dh;
            if (h < 0 || h >= H) continue;
            for (std::int64_t q = 0; q < w.kw; ++q) {
              const std::int64_t v = ow * w.sw - w.pl + q * w.dw;
              if (v < 0 || v >= W) continue;
              const float* in = x + ((b * H + h) * W + v) * C;
              for (std::int64_t c = 0; c < C; ++c) out[c] = (in[c] > out[c] || in[c] != in[c]) ? in[c] : out[c];  // NaN wins
            }
          }
        }
      }
    }
  }

  static void conv2d(const Op& op, const Shape& xs, const Shape& ys, const float* x, float* y) {
    const Window2d& g = op.win;
    const std::int64_t H = xs[1], W = xs[2], C = xs[3], OH = ys[1], OW = ys[2], O = ys[3];
    const float* wp = op.weights.data();
    const float* bias = wp + g.kh * g.kw * C * O;
    auto row = [&](std::size_t idx) {  // one output row of one image
      const std::int64_t b = static_cast<std::int64_t>(idx) / OH, oh = static_cast<std::int64_t>(idx) % OH;
      for (std::int64_t ow = 0; ow < OW; ++ow) {
        float* out = y + ((b * OH + oh) * OW + ow) * O;
        std::copy(bias, bias + O, out);
        for (std::int64_t r = 0; r < g.kh; ++r) {
          const std::int64_t h = oh * g.sh - g.pt + r * g.dh;
          if (h < 0 || h >= H) continue;
          for (std::int64_t q = 0; q < g.kw; ++q) {
            const std::int64_t v = ow * g.sw - g.pl + q * g.dw;
            if (v < 0 || v >= W) continue;
            const float* in = x + ((b * H + h) * W + v) * C;
            const float* wt = wp + (r * g.kw + q) * C * O;
            for (std::int64_t i = 0; i < C; ++i) {
              const float xv = in[i];
              const float* wr = wt + i * O;
              for (std::int64_t o = 0; o < O; ++o) out[o] += xv * wr[o];
            }
          }
        }
        if (op.relu) {
          for (std::int64_t o = 0; o < O; ++o) out[o] = out[o] < 0.0f ? 0.0f : out[o];
        }
      }
    };
    const std::size_t rows = static_cast<std::size_t>(ys[0] * OH);
    const double macs = static_cast<double>(ys.elements()) * static_cast<double>(g.kh * g.kw * C);
    if (macs < (1 << 18)) {
      for (std::size_t i = 0; i < rows; ++i) row(i);
    } else {
      accel_sdk::parallel_for(rows, row);
    }
  }

  std::vector<Tensor> tensors_;
  std::vector<std::uint32_t> inputs_, outputs_;
  std::vector<Op> ops_;
  std::vector<TensorSpec> in_specs_, out_specs_;
  std::size_t arena_floats_ = 0;
};

}  // namespace

ACCEL_SDK_RUNTIME_MODULE(_runtime, "ethosn", EthosnRuntime)

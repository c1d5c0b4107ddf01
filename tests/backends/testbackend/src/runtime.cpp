// The testbackend runtime: parses a blob (format in README.md) and runs it
// on the CPU, NHWC, float32 (plus qnn.requantize on 8/32-bit integers).
//
// create() validates everything before anything runs: the tensor table, every
// id, the arity and shapes of every op, the order (an op reads only tensors
// defined before it). run() is const: intermediates live in a per-call arena.
#include <accel_sdk/blob_reader.hpp>
#include <accel_sdk/geometry.hpp>
#include <accel_sdk/quant.hpp>
#include <accel_sdk/runtime.hpp>
#include <accel_sdk/tensor.hpp>
#include <accel_sdk/thread_pool.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using accel_sdk::BlobError;
using accel_sdk::BlobReader;
using accel_sdk::Shape;
using accel_sdk::TensorSpec;
using accel_sdk::TensorView;

constexpr std::uint32_t kVersion = 2;
constexpr std::size_t kConstantAlign = 64;  // serializer.py: CONSTANT_ALIGN
constexpr std::uint32_t kMaxTensors = 1u << 20;
constexpr std::uint32_t kMaxOps = 1u << 20;
constexpr std::int64_t kMaxDim = std::int64_t{1} << 32;
constexpr std::size_t kMaxElements = std::size_t{1} << 40;  // as accel.ir.MAX_ELEMENTS
constexpr std::int64_t kMaxWindow = 1 << 16;  // kernel sizes, strides, paddings, dilations

enum Opcode : std::uint8_t { MAX_POOL2D, AVG_POOL2D, RELU, ADD, MAXIMUM, CLIP, RESHAPE, CONV2D, REQUANTIZE, N_OPCODES };

const char* const kOpNames[N_OPCODES] = {"max_pool2d", "avg_pool2d", "relu", "add", "maximum",
                                         "clip", "reshape", "conv2d", "requantize"};

enum Kind : std::uint8_t { ACTIVATION = 0, CONSTANT = 1 };

struct Tensor {
  TensorSpec spec;
  Kind kind = ACTIVATION;
  std::vector<std::uint8_t> data;  // constants only
  std::size_t arena_offset = 0;    // intermediates only
};

// Window geometry of a pool or a convolution along H and W (accel_sdk/geometry.hpp computes its output size).
using Window = accel_sdk::geometry::Window2d;

struct Op {
  Opcode code = RELU;
  std::vector<std::uint32_t> in, out;
  Window win;
  bool flag = false;  // avg_pool2d: count_include_pad; conv2d: relu
  float lo = 0, hi = 0;  // clip
  accel_sdk::quant::Requantizer requant;
  std::vector<float> packed;  // conv2d: weights as [KH][KW][I][O]
};

class TestRuntime {
 public:
  static std::unique_ptr<TestRuntime> create(BlobReader& blob, const accel_sdk::RuntimeOptions& options) {
    auto rt = std::make_unique<TestRuntime>();
    rt->threads_ = options.threads;
    blob.expect_magic("ATBK");
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
    std::unique_ptr<std::uint8_t[]> arena(arena_size_ ? new std::uint8_t[arena_size_] : nullptr);
    std::vector<void*> ptr(tensors_.size(), nullptr);
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      if (tensors_[t].kind == CONSTANT) {
        ptr[t] = const_cast<std::uint8_t*>(tensors_[t].data.data());
      } else {
        ptr[t] = arena.get() + tensors_[t].arena_offset;
      }
    }
    for (std::size_t i = 0; i < inputs_.size(); ++i) ptr[inputs_[i]] = inputs[i].data();
    for (std::size_t i = 0; i < outputs_.size(); ++i) ptr[outputs_[i]] = outputs[i].data();
    for (const Op& op : ops_) execute(op, ptr);
  }

  int threads() const { return threads_; }

 private:
  const TensorSpec& spec(std::uint32_t id) const { return tensors_[id].spec; }

  void read_tensors(BlobReader& blob) {
    const std::uint32_t n = blob.read_count(3, "tensor count", kMaxTensors);
    tensors_.resize(n);
    for (auto& t : tensors_) {
      t.spec.dtype = blob.read_in_range<std::uint8_t>(0, ACCEL_BOOL, "dtype");
      const std::uint8_t rank = blob.read_in_range<std::uint8_t>(0, ACCEL_MAX_RANK, "rank");
      std::int64_t dims[ACCEL_MAX_RANK] = {};
      for (std::uint8_t d = 0; d < rank; ++d) dims[d] = blob.read_in_range<std::int64_t>(0, kMaxDim, "dimension");
      t.spec.shape = Shape(dims, rank);
      if (t.spec.shape.elements() > kMaxElements) blob.fail("tensor " + t.spec.describe() + " has more than 2^40 elements");
      t.kind = static_cast<Kind>(blob.read_in_range<std::uint8_t>(ACTIVATION, CONSTANT, "tensor kind"));
      // element count * size: each dim < 2^32 and rank <= 8 could still overflow; refuse it here
      const std::size_t bytes = accel_sdk::checked_mul(t.spec.shape.elements(), accel_sdk::dtype_size(t.spec.dtype), "tensor");
      if (t.kind == CONSTANT) {
        const std::size_t at = blob.offset();
        std::size_t size = 0;
        const std::uint8_t* p = blob.read_constant(kConstantAlign, &size, "constant", bytes);
        if (size != bytes) blob.fail_at(at, "constant of " + t.spec.describe() + " has " + std::to_string(size) + " bytes");
        t.data.assign(p, p + bytes);
      }
    }
  }

  std::vector<std::uint32_t> read_ids(BlobReader& blob, const char* what) {
    std::vector<std::uint32_t> ids = blob.read_counted_array<std::uint32_t>(what);
    std::vector<bool> seen(tensors_.size(), false);
    for (std::uint32_t id : ids) {
      if (id >= tensors_.size()) blob.fail(std::string(what) + " id " + std::to_string(id) + " out of range");
      if (tensors_[id].kind != ACTIVATION) blob.fail(std::string(what) + " " + std::to_string(id) + " is a constant");
      if (seen[id]) blob.fail(std::string(what) + " " + std::to_string(id) + " listed twice");
      seen[id] = true;
    }
    return ids;
  }

  void read_ops(BlobReader& blob) {
    std::vector<bool> defined(tensors_.size(), false);
    for (std::size_t t = 0; t < tensors_.size(); ++t) defined[t] = tensors_[t].kind == CONSTANT;
    for (std::uint32_t id : inputs_) defined[id] = true;
    for (std::uint32_t id : outputs_) {
      if (defined[id]) blob.fail("graph output " + std::to_string(id) + " is also a graph input");
    }
    const std::uint32_t n = blob.read_count(4, "op count", kMaxOps);
    ops_.resize(n);
    for (Op& op : ops_) {
      const std::size_t at = blob.offset();
      op.code = static_cast<Opcode>(blob.read_in_range<std::uint8_t>(0, N_OPCODES - 1, "opcode"));
      op.in = read_op_ids(blob, "op input");
      op.out = read_op_ids(blob, "op output");
      const std::vector<std::int64_t> ints = blob.read_array<std::int64_t>(blob.read<std::uint8_t>("int count"), "ints");
      const std::vector<float> floats = blob.read_array<float>(blob.read<std::uint8_t>("float count"), "floats");
      for (std::uint32_t id : op.in) {
        if (!defined[id]) blob.fail_at(at, std::string(kOpNames[op.code]) + " reads tensor " + std::to_string(id) + " before it is written");
      }
      for (std::uint32_t id : op.out) {
        if (defined[id]) blob.fail_at(at, std::string(kOpNames[op.code]) + " writes tensor " + std::to_string(id) + ", which is already defined");
        defined[id] = true;
      }
      try {
        check_op(op, ints, floats);
      } catch (const std::exception& e) {
        blob.fail_at(at, std::string(kOpNames[op.code]) + ": " + e.what());
      }
    }
    for (std::uint32_t id : outputs_) {
      if (!defined[id]) blob.fail("graph output " + std::to_string(id) + " is never written");
    }
  }

  std::vector<std::uint32_t> read_op_ids(BlobReader& blob, const char* what) {
    const std::uint8_t n = blob.read<std::uint8_t>(what);
    std::vector<std::uint32_t> ids = blob.read_array<std::uint32_t>(n, what);
    for (std::uint32_t id : ids) {
      if (id >= tensors_.size()) blob.fail(std::string(what) + " id " + std::to_string(id) + " out of range");
    }
    return ids;
  }

  // Arity, attributes, dtypes and shapes of one op (std::invalid_argument when wrong).
  void check_op(Op& op, const std::vector<std::int64_t>& ints, const std::vector<float>& floats) {
    static const std::size_t arity[N_OPCODES][2] = {{1, 1}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, {1, 1}, {1, 1}, {2, 3}, {1, 1}};
    static const std::size_t n_ints[N_OPCODES] = {9, 10, 0, 0, 0, 0, 0, 9, 2};
    static const std::size_t n_floats[N_OPCODES] = {0, 0, 0, 0, 0, 2, 0, 0, 2};
    if (op.in.size() < arity[op.code][0] || op.in.size() > arity[op.code][1] || op.out.size() != 1) {
      fail("wrong number of inputs or outputs");
    }
    if (ints.size() != n_ints[op.code] || floats.size() != n_floats[op.code]) fail("wrong number of attributes");
    const TensorSpec& x = spec(op.in[0]);
    const TensorSpec& y = spec(op.out[0]);
    const bool is_float = x.dtype == ACCEL_FLOAT32 && y.dtype == ACCEL_FLOAT32;
    switch (op.code) {
      case MAX_POOL2D:
      case AVG_POOL2D: {
        if (!is_float || x.shape.rank() != 4) fail("needs float32 NHWC tensors");
        op.win = read_window(ints, /*pool=*/true);
        const bool ceil = flag(ints[8]);
        if (op.code == AVG_POOL2D) op.flag = flag(ints[9]);
        const auto g = accel_sdk::geometry::pool2d(x.shape[1], x.shape[2], op.win, ceil);  // GeometryError if it does not fit
        const Shape want{x.shape[0], g.oh, g.ow, x.shape[3]};
        if (y.shape != want) fail("output shape " + y.shape.str() + " does not match the window (" + want.str() + ")");
        break;
      }
      case RELU:
      case CLIP:
        if (!is_float || x.shape != y.shape) fail("needs float32 input and output of one shape");
        if (op.code == CLIP) {
          op.lo = floats[0];
          op.hi = floats[1];
          if (!(op.lo <= op.hi)) fail("a_min must be <= a_max");
        }
        break;
      case ADD:
      case MAXIMUM: {
        const TensorSpec& b = spec(op.in[1]);
        if (!is_float || b.dtype != ACCEL_FLOAT32 || x.shape != y.shape || b.shape != y.shape) {
          fail("needs float32 inputs and output of one shape");
        }
        break;
      }
      case RESHAPE:
        if (x.dtype != y.dtype || x.shape.elements() != y.shape.elements()) fail("needs one dtype and element count");
        break;
      case CONV2D: {
        const TensorSpec& w = spec(op.in[1]);
        if (!is_float || w.dtype != ACCEL_FLOAT32 || x.shape.rank() != 4 || w.shape.rank() != 4) {
          fail("needs float32 NHWC data and OHWI weights");
        }
        if (tensors_[op.in[1]].kind != CONSTANT) fail("weights must be a constant");
        const std::int64_t o = w.shape[0], kh = w.shape[1], kw = w.shape[2], c = w.shape[3];
        if (c != x.shape[3]) fail("weights have " + std::to_string(c) + " input channels, data has " + std::to_string(x.shape[3]));
        if (o == 0 || kh == 0 || kw == 0) fail("empty weights");
        if (op.in.size() == 3) {
          const TensorSpec& b = spec(op.in[2]);
          if (tensors_[op.in[2]].kind != CONSTANT || b.dtype != ACCEL_FLOAT32 || b.shape != Shape{o}) {
            fail("bias must be a float32 constant of shape [" + std::to_string(o) + "]");
          }
        }
        op.win = read_window(ints, /*pool=*/false);
        op.win.kh = kh;
        op.win.kw = kw;
        op.flag = flag(ints[8]);
        const auto g = accel_sdk::geometry::conv2d(x.shape[1], x.shape[2], op.win);  // GeometryError if it does not fit
        const Shape want{x.shape[0], g.oh, g.ow, o};
        if (y.shape != want) fail("output shape " + y.shape.str() + " does not match the convolution (" + want.str() + ")");
        pack_weights(op, tensors_[op.in[1]]);
        break;
      }
      case REQUANTIZE: {
        const bool in_ok = x.dtype == ACCEL_UINT8 || x.dtype == ACCEL_INT8 || x.dtype == ACCEL_INT32;
        if (!in_ok || (y.dtype != ACCEL_UINT8 && y.dtype != ACCEL_INT8) || x.shape != y.shape) {
          fail("needs a uint8/int8/int32 input and a uint8/int8 output of one shape");
        }
        const std::int64_t lo = y.dtype == ACCEL_UINT8 ? 0 : -128, hi = y.dtype == ACCEL_UINT8 ? 255 : 127;
        op.requant = accel_sdk::quant::Requantizer(floats[0], ints[0], floats[1], ints[1], lo, hi);
        break;
      }
      default:
        fail("unknown opcode");
    }
  }

  [[noreturn]] static void fail(const std::string& what) { throw std::invalid_argument(what); }

  static bool flag(std::int64_t v) {
    if (v != 0 && v != 1) fail("a flag must be 0 or 1");
    return v == 1;
  }

  // pool: kh kw sh sw pt pl pb pr (dilation 1); conv: sh sw pt pl pb pr dh dw.
  static Window read_window(const std::vector<std::int64_t>& v, bool pool) {
    for (std::size_t i = 0; i < 8; ++i) {
      if (v[i] < 0 || v[i] > kMaxWindow) fail("window attribute out of range");
    }
    Window w;
    if (pool) {
      w.kh = v[0], w.kw = v[1], w.sh = v[2], w.sw = v[3], w.pt = v[4], w.pl = v[5], w.pb = v[6], w.pr = v[7];
      if (w.kh < 1 || w.kw < 1) fail("pool size must be positive");
    } else {
      w.sh = v[0], w.sw = v[1], w.pt = v[2], w.pl = v[3], w.pb = v[4], w.pr = v[5], w.dh = v[6], w.dw = v[7];
      if (w.dh < 1 || w.dw < 1) fail("dilation must be positive");
    }
    if (w.sh < 1 || w.sw < 1) fail("strides must be positive");
    return w;
  }

  static void pack_weights(Op& op, const Tensor& w) {
    const Shape& s = w.spec.shape;
    const std::size_t o = s[0], kh = s[1], kw = s[2], c = s[3];
    std::vector<float> src(w.spec.shape.elements());
    std::memcpy(src.data(), w.data.data(), w.data.size());
    op.packed.resize(src.size());
    for (std::size_t oc = 0; oc < o; ++oc)
      for (std::size_t r = 0; r < kh; ++r)
        for (std::size_t q = 0; q < kw; ++q)
          for (std::size_t i = 0; i < c; ++i) op.packed[((r * kw + q) * c + i) * o + oc] = src[((oc * kh + r) * kw + q) * c + i];
  }

  void plan() {
    std::vector<bool> external(tensors_.size(), false);
    for (std::uint32_t id : inputs_) external[id] = true;
    for (std::uint32_t id : outputs_) external[id] = true;
    std::size_t offset = 0;
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      if (tensors_[t].kind == CONSTANT || external[t]) continue;
      tensors_[t].arena_offset = offset;
      const std::size_t bytes = tensors_[t].spec.shape.elements() * accel_sdk::dtype_size(tensors_[t].spec.dtype);
      offset = accel_sdk::checked_add(offset, (bytes + 63) / 64 * 64, "scratch arena");
    }
    arena_size_ = offset;
    for (std::uint32_t id : inputs_) in_specs_.push_back(spec(id));
    for (std::uint32_t id : outputs_) out_specs_.push_back(spec(id));
  }

  void execute(const Op& op, const std::vector<void*>& ptr) const {
    const TensorSpec& xs = spec(op.in[0]);
    const TensorSpec& ys = spec(op.out[0]);
    void* y = ptr[op.out[0]];
    const void* x = ptr[op.in[0]];
    const std::size_t n = ys.shape.elements();
    switch (op.code) {
      case MAX_POOL2D:
      case AVG_POOL2D:
        pool(op, xs.shape, ys.shape, static_cast<const float*>(x), static_cast<float*>(y));
        break;
      case RELU: {
        const float* a = static_cast<const float*>(x);
        float* out = static_cast<float*>(y);
        for (std::size_t i = 0; i < n; ++i) out[i] = a[i] < 0.0f ? 0.0f : a[i];  // NaN stays NaN
        break;
      }
      case CLIP: {
        const float* a = static_cast<const float*>(x);
        float* out = static_cast<float*>(y);
        for (std::size_t i = 0; i < n; ++i) out[i] = a[i] < op.lo ? op.lo : (a[i] > op.hi ? op.hi : a[i]);
        break;
      }
      case ADD:
      case MAXIMUM: {
        const float* a = static_cast<const float*>(x);
        const float* b = static_cast<const float*>(ptr[op.in[1]]);
        float* out = static_cast<float*>(y);
        if (op.code == ADD) {
          for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
        } else {
          for (std::size_t i = 0; i < n; ++i) out[i] = (a[i] >= b[i] || a[i] != a[i]) ? a[i] : b[i];  // numpy maximum
        }
        break;
      }
      case RESHAPE:
        if (x != y) std::memmove(y, x, n * accel_sdk::dtype_size(ys.dtype));
        break;
      case CONV2D:
        conv2d(op, xs.shape, ys.shape, static_cast<const float*>(x),
               op.in.size() == 3 ? static_cast<const float*>(ptr[op.in[2]]) : nullptr, static_cast<float*>(y));
        break;
      case REQUANTIZE:
        requantize(op, xs.dtype, ys.dtype, x, y, n);
        break;
      default:
        throw std::logic_error("unknown opcode");
    }
  }

  static void pool(const Op& op, const Shape& xs, const Shape& ys, const float* x, float* y) {
    const Window& w = op.win;
    const std::int64_t H = xs[1], W = xs[2], C = xs[3], OH = ys[1], OW = ys[2];
    const bool is_max = op.code == MAX_POOL2D;
    for (std::int64_t b = 0; b < ys[0]; ++b) {
      for (std::int64_t oh = 0; oh < OH; ++oh) {
        const std::int64_t h0 = oh * w.sh - w.pt;  // window rows h0 .. h0 + kh - 1 (input coordinates)
        for (std::int64_t ow = 0; ow < OW; ++ow) {
          const std::int64_t w0 = ow * w.sw - w.pl;
          float* out = y + ((b * OH + oh) * OW + ow) * C;
          for (std::int64_t c = 0; c < C; ++c) out[c] = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
          for (std::int64_t h = std::max<std::int64_t>(h0, 0); h < std::min(h0 + w.kh, H); ++h) {
            for (std::int64_t v = std::max<std::int64_t>(w0, 0); v < std::min(w0 + w.kw, W); ++v) {
              const float* in = x + ((b * H + h) * W + v) * C;
              if (is_max) {
                for (std::int64_t c = 0; c < C; ++c) out[c] = (in[c] > out[c] || in[c] != in[c]) ? in[c] : out[c];
              } else {
                for (std::int64_t c = 0; c < C; ++c) out[c] += in[c];
              }
            }
          }
          if (!is_max) {
            // taps counted: inside the padded input (count_include_pad) or inside the input
            const std::int64_t lo_h = op.flag ? -w.pt : 0, hi_h = op.flag ? H + w.pb : H;
            const std::int64_t lo_w = op.flag ? -w.pl : 0, hi_w = op.flag ? W + w.pr : W;
            const std::int64_t ch = std::min(h0 + w.kh, hi_h) - std::max(h0, lo_h);
            const std::int64_t cw = std::min(w0 + w.kw, hi_w) - std::max(w0, lo_w);
            const float count = static_cast<float>(std::max<std::int64_t>(ch * cw, 1));
            for (std::int64_t c = 0; c < C; ++c) out[c] /= count;
          }
        }
      }
    }
  }

  void conv2d(const Op& op, const Shape& xs, const Shape& ys, const float* x, const float* bias, float* y) const {
    const Window& g = op.win;
    const std::int64_t H = xs[1], W = xs[2], C = xs[3], OH = ys[1], OW = ys[2], O = ys[3];
    const float* wp = op.packed.data();
    auto row = [&](std::size_t idx) {
      const std::int64_t b = static_cast<std::int64_t>(idx) / OH, oh = static_cast<std::int64_t>(idx) % OH;
      for (std::int64_t ow = 0; ow < OW; ++ow) {
        float* out = y + ((b * OH + oh) * OW + ow) * O;
        for (std::int64_t o = 0; o < O; ++o) out[o] = bias ? bias[o] : 0.0f;
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
        if (op.flag) {
          for (std::int64_t o = 0; o < O; ++o) out[o] = out[o] < 0.0f ? 0.0f : out[o];
        }
      }
    };
    const std::size_t rows = static_cast<std::size_t>(ys[0] * OH);
    const double macs = static_cast<double>(ys.elements()) * static_cast<double>(g.kh * g.kw * C);
    if (macs < 1 << 18 || threads_ == 1) {
      for (std::size_t i = 0; i < rows; ++i) row(i);
    } else {
      accel_sdk::parallel_for(rows, row);
    }
  }

  static void requantize(const Op& op, std::int32_t in_dtype, std::int32_t out_dtype, const void* x, void* y, std::size_t n) {
    auto to = [&](auto* out) {
      switch (in_dtype) {
        case ACCEL_UINT8: op.requant.apply(static_cast<const std::uint8_t*>(x), out, n); break;
        case ACCEL_INT8: op.requant.apply(static_cast<const std::int8_t*>(x), out, n); break;
        default: op.requant.apply(static_cast<const std::int32_t*>(x), out, n); break;
      }
    };
    if (out_dtype == ACCEL_UINT8) {
      to(static_cast<std::uint8_t*>(y));
    } else {
      to(static_cast<std::int8_t*>(y));
    }
  }

  std::vector<Tensor> tensors_;
  std::vector<std::uint32_t> inputs_, outputs_;
  std::vector<Op> ops_;
  std::vector<TensorSpec> in_specs_, out_specs_;
  std::size_t arena_size_ = 0;
  int threads_ = 1;
};

}  // namespace

ACCEL_SDK_RUNTIME_MODULE(_runtime, "testbackend", TestRuntime)

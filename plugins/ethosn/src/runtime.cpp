// The ethosn runtime: validates a command stream once, then executes it.
//
// create() reads the whole stream (format in docs/backends/ethosn.md) through the sdk's
// bounds-checked BlobReader and checks everything before anything runs: every tensor's
// dtype, rank, dimensions and place (arena offset + size within the arena; input and
// output positions each used once), every constant's dtype and size, and every
// command's ids (a command reads only tensors written before it, writes each
// tensor once, never an input), parameter count and the shapes its parameters imply.
// Sizes are computed with checked arithmetic. Weights are packed once here.
//
// run() is const and thread-safe: each run borrows an arena from the handle's pool
// (accel_sdk::ArenaPool: the stream's planned intermediates, then one scratch region the
// commands take in turn) and a oneDNN Call (the handle's thread count and a stream of
// its own); outputs go straight into the caller's buffers. Commands are accel-sdk
// kernels (accel_sdk/graph_runtime.hpp's Kernel interface) driven by this stream rather
// than by a graph blob. Convolutions and fully connected layers run through oneDNN's
// int8 primitives (accel_sdk/int_ops.hpp: exact on every CPU) and are requantized by the
// sdk's vectorized requantizer, band by band while the accumulators are in cache; max
// pooling is the sdk's onednn::Pool; the rest (lookup tables, quantized add, average
// pooling and mean with their rounding, byte moves) is ours.
#include <accel_sdk/arena.hpp>
#include <accel_sdk/blob_reader.hpp>
#include <accel_sdk/float_ops.hpp>
#include <accel_sdk/geometry.hpp>
#include <accel_sdk/graph_runtime.hpp>
#include <accel_sdk/int_ops.hpp>
#include <accel_sdk/onednn.hpp>
#include <accel_sdk/pool.hpp>
#include <accel_sdk/quant.hpp>
#include <accel_sdk/requantize.hpp>
#include <accel_sdk/runtime.hpp>
#include <accel_sdk/tensor.hpp>
#include <accel_sdk/threads.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
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
namespace dnn = accel_sdk::onednn;
namespace q = accel_sdk::quant;

constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kMaxTensors = 1u << 20;
constexpr std::uint32_t kMaxCommands = 1u << 20;
constexpr std::uint32_t kMaxConstants = 1u << 20;
constexpr std::int64_t kMaxDim = std::int64_t{1} << 31;
constexpr std::size_t kMaxElements = std::size_t{1} << 40;
constexpr std::uint64_t kMaxArena = std::uint64_t{1} << 40;
constexpr std::size_t kAlign = 64;
// The on-chip SRAM a stream was compiled for, in KiB: what EthosnOptions allows (a power of two up to 64 MiB).
constexpr std::uint32_t kMaxSramKib = 64 * 1024;

enum Kind : std::uint8_t { INPUT = 0, OUTPUT = 1, ARENA = 2 };
// QUANTIZE, DEQUANTIZE and TRANSPOSE are the conversions at a stream's edges (float32 data in or out),
// which the runtime does on the CPU around the NPU's commands; every other command is 8-bit.
enum Opcode : std::uint8_t {
  CONV = 1, FC = 2, MAXPOOL = 3, AVGPOOL = 4, MEAN = 5, LUT = 6, ADD = 7, GATHER = 8, CONCAT = 9,
  QUANTIZE = 10, DEQUANTIZE = 11, TRANSPOSE = 12
};
constexpr int kOpcodes = 13;

struct Tensor {
  TensorSpec spec;
  Kind kind = ARENA;
  std::uint64_t slot = 0;
  std::size_t bytes = 0;
};

struct Constant {
  std::int32_t dtype = 0;
  std::size_t elements = 0;
  std::vector<std::uint8_t> data;
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(data.data());
  }
};

// One command, validated and prepared at create: an accel-sdk kernel, so its run gets the
// tensors by id, its scratch_bytes from the run's arena and the run's onednn::Call. make()
// sets its ins / outs from the stream; the constructors check the tensors behind them.
using Command = accel_sdk::Kernel<dnn::Call>;
using Exec = Command::Exec;

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

std::int64_t dim(const Tensor& t, int axis) { return t.spec.shape[axis]; }

// (rows, channels) of an NHWC-ish tensor: channels = last dimension.
std::size_t channels_of(const Tensor& t) {
  const int r = static_cast<int>(t.spec.shape.rank());
  return r == 0 ? 1 : static_cast<std::size_t>(t.spec.shape[r - 1]);
}

bool is_8bit(const Tensor& t) { return t.spec.dtype == ACCEL_UINT8 || t.spec.dtype == ACCEL_INT8; }

void need_4d_batch1(const Tensor& t, const char* what) {
  if (t.spec.shape.rank() != 4 || t.spec.shape[0] != 1) bad(std::string(what) + " must be a 4-D NHWC tensor of batch 1, got " + t.spec.describe());
}

void need_params(const std::vector<std::int32_t>& p, std::size_t n, const char* what) {
  if (p.size() != n) bad(std::string(what) + ": " + std::to_string(p.size()) + " parameters, expected " + std::to_string(n));
}

void need_range(std::int64_t v, std::int64_t lo, std::int64_t hi, const char* what) {
  if (v < lo || v > hi) bad(std::string(what) + "=" + std::to_string(v) + ", must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// The output-stage requantize of a pooled / averaged int32: [flag, z_in, m, shift, z_out, lo, hi].
struct Narrow {
  bool requant = false;
  std::int32_t z_in = 0, m = 0, shift = 0, z_out = 0, lo = 0, hi = 0;
  static Narrow read(const std::int32_t* p, const Tensor& out) {
    Narrow n;
    need_range(p[0], 0, 1, "requantize flag");
    n.requant = p[0] != 0;
    n.z_in = p[1];
    n.m = p[2];
    n.shift = p[3];
    n.z_out = p[4];
    n.lo = p[5];
    n.hi = p[6];
    const std::int32_t dlo = out.spec.dtype == ACCEL_UINT8 ? 0 : -128, dhi = out.spec.dtype == ACCEL_UINT8 ? 255 : 127;
    need_range(n.lo, dlo, dhi, "output minimum");
    need_range(n.hi, n.lo, dhi, "output maximum");
    if (n.requant) {
      if (!q::valid_multiplier(n.m, n.shift)) bad("invalid fixed-point multiplier");
      need_range(n.z_out, dlo, dhi, "output zero point");
    }
    return n;
  }
  std::int32_t operator()(std::int64_t v) const {
    if (requant) v = static_cast<std::int64_t>(q::mbqm(q::sat32(v - z_in), m, shift)) + z_out;
    return static_cast<std::int32_t>(std::min<std::int64_t>(std::max<std::int64_t>(v, lo), hi));
  }
};

template <class T>
void store(std::uint8_t* base, std::size_t i, std::int32_t v) {
  reinterpret_cast<T*>(base)[i] = static_cast<T>(v);
}

// -- LUT: out[i] = table[channel(i)][bits(in[i])] ---------------------------------------------
class LutCommand final : public Command {
 public:
  LutCommand(const Tensor& tx, const Tensor& ty, const Constant& table, bool per_channel)
      : n_(tx.spec.shape.elements()), channels_(per_channel ? channels_of(tx) : 1), table_(table.as<std::uint8_t>()) {
    if (!is_8bit(tx) || !is_8bit(ty)) bad("lut: input and output must be uint8 or int8");
    if (tx.spec.shape != ty.spec.shape) bad("lut: input " + tx.spec.describe() + " and output " + ty.spec.describe() + " differ in shape");
    if (channels_ == 0) bad("lut: a per-channel table for a tensor without channels");
    if (table.dtype != ACCEL_UINT8 || table.elements != channels_ * 256) {
      bad("lut: table of " + std::to_string(table.elements) + " bytes, expected " + std::to_string(channels_ * 256));
    }
  }
  void run(Exec& e) const override {
    const std::uint8_t* in = e.in<std::uint8_t>(0);
    std::uint8_t* out = e.out<std::uint8_t>(0);
    if (channels_ == 1) {
      for (std::size_t i = 0; i < n_; ++i) out[i] = table_[in[i]];
      return;
    }
    const std::size_t rows = n_ / channels_;
    for (std::size_t r = 0; r < rows; ++r) {
      const std::uint8_t* ri = in + r * channels_;
      std::uint8_t* ro = out + r * channels_;
      for (std::size_t c = 0; c < channels_; ++c) ro[c] = table_[c * 256 + ri[c]];
    }
  }

 private:
  std::size_t n_, channels_;
  const std::uint8_t* table_;
};

// -- GATHER: rows of row_len bytes, each from starts[r] of the input or filled ----------------
class GatherCommand final : public Command {
 public:
  GatherCommand(const Tensor& tx, const Tensor& ty, const Constant& starts, std::int64_t row_len, std::int64_t fill)
      : fill_(static_cast<std::uint8_t>(fill)), starts_(starts.as<std::int32_t>()) {
    if (tx.spec.dtype != ty.spec.dtype || !is_8bit(tx)) bad("gather: input and output must have one 8-bit dtype");
    need_range(fill, 0, 255, "fill byte");
    need_range(row_len, 1, static_cast<std::int64_t>(ty.bytes == 0 ? 1 : ty.bytes), "row length");
    row_ = static_cast<std::size_t>(row_len);
    if (ty.bytes % row_ != 0) bad("gather: output of " + std::to_string(ty.bytes) + " bytes is not whole rows of " + std::to_string(row_));
    rows_ = ty.bytes / row_;
    if (starts.dtype != ACCEL_INT32 || starts.elements != rows_) bad("gather: " + std::to_string(starts.elements) + " row starts for " + std::to_string(rows_) + " rows");
    for (std::size_t r = 0; r < rows_; ++r) {
      const std::int64_t s = starts_[r];
      if (s == -1) continue;
      if (s < 0 || static_cast<std::uint64_t>(s) + row_ > tx.bytes) bad("gather: row " + std::to_string(r) + " reads past the input");
    }
  }
  void run(Exec& e) const override {
    const std::uint8_t* in = e.in<std::uint8_t>(0);
    std::uint8_t* out = e.out<std::uint8_t>(0);
    for (std::size_t r = 0; r < rows_; ++r) {
      const std::int32_t s = starts_[r];
      if (s < 0) {
        std::memset(out + r * row_, fill_, row_);
      } else {
        std::memcpy(out + r * row_, in + s, row_);
      }
    }
  }

 private:
  std::uint8_t fill_;
  const std::int32_t* starts_;
  std::size_t row_ = 1, rows_ = 0;
};

// -- CONCAT: out[outer][sum inner] from each input's [outer][inner_k] --------------------------
class ConcatCommand final : public Command {
 public:
  ConcatCommand(const std::vector<const Tensor*>& txs, const Tensor& ty, const std::vector<std::int32_t>& p) {
    if (p.size() != txs.size() + 1) bad("concat: expected " + std::to_string(txs.size() + 1) + " parameters");
    need_range(p[0], 1, std::numeric_limits<std::int32_t>::max(), "outer");
    outer_ = static_cast<std::size_t>(p[0]);
    std::size_t total = 0;
    for (std::size_t k = 0; k < txs.size(); ++k) {
      need_range(p[k + 1], 0, std::numeric_limits<std::int32_t>::max(), "inner");
      const std::size_t inner = static_cast<std::size_t>(p[k + 1]);
      if (txs[k]->spec.dtype != ty.spec.dtype || !is_8bit(ty)) bad("concat: inputs and output must have one 8-bit dtype");
      if (accel_sdk::checked_mul(outer_, inner, "concat input") != txs[k]->bytes) bad("concat: input " + std::to_string(k) + " is not outer x inner bytes");
      inner_.push_back(inner);
      total = accel_sdk::checked_add(total, inner, "concat");
    }
    if (accel_sdk::checked_mul(outer_, total, "concat output") != ty.bytes) bad("concat: output is not outer x total inner bytes");
    total_ = total;
  }
  void run(Exec& e) const override {
    std::uint8_t* out = e.out<std::uint8_t>(0);
    std::size_t col = 0;
    for (std::size_t k = 0; k < inner_.size(); ++k) {
      const std::uint8_t* in = e.in<std::uint8_t>(k);
      const std::size_t inner = inner_[k];
      for (std::size_t o = 0; o < outer_; ++o) std::memcpy(out + o * total_ + col, in + o * inner, inner);
      col += inner;
    }
  }

 private:
  std::size_t outer_ = 0, total_ = 0;
  std::vector<std::size_t> inner_;
};

// -- ADD: qnn.add of two same-shape 8-bit tensors (accel.quant's definition) -------------------
class AddCommand final : public Command {
 public:
  AddCommand(const Tensor& ta, const Tensor& tb, const Tensor& ty, const std::vector<std::int32_t>& p, int threads)
      : n_(ty.spec.shape.elements()), unsigned_(ty.spec.dtype == ACCEL_UINT8) {
    // a large add in ranges on accel-sdk's pool (whose caller does not wait for a sleeping worker)
    shares_ = static_cast<std::size_t>(accel_sdk::threads_for(static_cast<double>(n_), threads, accel_sdk::kSmallLookup));
    need_params(p, 11, "add");
    if (ta.spec.shape != ty.spec.shape || tb.spec.shape != ty.spec.shape) bad("add: inputs and output must have one shape");
    if (ta.spec.dtype != ty.spec.dtype || tb.spec.dtype != ty.spec.dtype || !is_8bit(ty)) bad("add: inputs and output must have one 8-bit dtype");
    za_ = p[0], zb_ = p[1];
    ma_ = {p[2], p[3]};
    mb_ = {p[4], p[5]};
    mo_ = {p[6], p[7]};
    zo_ = p[8], lo_ = p[9], hi_ = p[10];
    for (const q::Multiplier& m : {ma_, mb_, mo_}) {
      if (!q::valid_multiplier(m.m, m.shift)) bad("add: invalid fixed-point multiplier");
    }
    const std::int32_t dlo = unsigned_ ? 0 : -128, dhi = unsigned_ ? 255 : 127;
    need_range(za_, dlo, dhi, "zero point");
    need_range(zb_, dlo, dhi, "zero point");
    need_range(zo_, dlo, dhi, "zero point");
    need_range(lo_, dlo, dhi, "output minimum");
    need_range(hi_, lo_, dhi, "output maximum");
    // the inputs rescaled with 20 bits of headroom, as the serializer's multipliers expect
    const q::Multiplier m[3] = {ma_, mb_, mo_};
    const std::int64_t z[3] = {za_, zb_, zo_};
    table_ = q::AddTable(!unsigned_, m, z, 20, lo_, hi_);
  }
  void run(Exec& e) const override {
    const std::uint8_t *a = e.in<std::uint8_t>(0), *b = e.in<std::uint8_t>(1);
    std::uint8_t* y = e.out<std::uint8_t>(0);
    accel_sdk::parallel_ranges(n_, shares_, [&](std::size_t i0, std::size_t i1) { table_.run(a + i0, b + i0, y + i0, i1 - i0); });
  }

 private:
  std::size_t n_, shares_ = 1;
  bool unsigned_;
  std::int32_t za_ = 0, zb_ = 0, zo_ = 0, lo_ = 0, hi_ = 0;
  q::Multiplier ma_, mb_, mo_;
  q::AddTable table_;
};

// -- MEAN over H, W of a widened tensor, rounded half away from zero, then narrowed ---------------
class MeanCommand final : public Command {
 public:
  MeanCommand(const Tensor& tx, const Tensor& ty, const Constant& widen, const std::vector<std::int32_t>& p)
      : widen_(widen.as<std::int32_t>()) {
    need_params(p, 7, "mean");
    need_4d_batch1(tx, "mean input");
    need_4d_batch1(ty, "mean output");
    if (!is_8bit(tx) || !is_8bit(ty)) bad("mean: input and output must be uint8 or int8");
    if (dim(ty, 1) != 1 || dim(ty, 2) != 1 || dim(ty, 3) != dim(tx, 3)) bad("mean: output must be 1x1 with the input's channels");
    if (widen.dtype != ACCEL_INT32 || widen.elements != 256) bad("mean: the widening table must hold 256 int32");
    c_ = static_cast<std::size_t>(dim(tx, 3));
    n_ = static_cast<std::size_t>(dim(tx, 1) * dim(tx, 2));
    if (n_ == 0 || n_ > (std::size_t{1} << 31)) bad("mean: window of " + std::to_string(n_) + " elements");
    narrow_ = Narrow::read(p.data(), ty);
    out_unsigned_ = ty.spec.dtype == ACCEL_UINT8;
    in_signed_ = tx.spec.dtype == ACCEL_INT8;
    // The serializer's widening is affine in the input value (x - z, scaled): then a channel's sum is
    // n * widen(0) + step * (sum of the inputs), and the inputs sum in int32 in a loop the compiler
    // vectorizes, where looking each byte up cost 25 us on MobileNetV2's 7x7x1280 (one table load
    // and one 64-bit add a byte). Up to 2^23 positions (255 * 2^23 < 2^31).
    affine_ = n_ <= (std::size_t{1} << 23) && q::affine_byte_table(widen_, in_signed_, base_, step_);
    scratch_bytes = c_ * (sizeof(std::int64_t) + sizeof(std::int32_t));  // the channel sums, then int32 ones
  }
  void run(Exec& e) const override {
    const std::uint8_t* in = e.in<std::uint8_t>(0);
    std::uint8_t* out = e.out<std::uint8_t>(0);
    std::int64_t* sum = reinterpret_cast<std::int64_t*>(e.scratch);
    if (affine_) {
      // int32 sums of the values, then sum = n * base + step * that
      std::int32_t* acc = reinterpret_cast<std::int32_t*>(e.scratch + c_ * sizeof(std::int64_t));
      std::fill(acc, acc + c_, 0);
      if (in_signed_) {
        const std::int8_t* x = reinterpret_cast<const std::int8_t*>(in);
        for (std::size_t i = 0; i < n_; ++i) {
          for (std::size_t c = 0; c < c_; ++c) acc[c] += x[i * c_ + c];
        }
      } else {
        for (std::size_t i = 0; i < n_; ++i) {
          for (std::size_t c = 0; c < c_; ++c) acc[c] += in[i * c_ + c];
        }
      }
      const std::int64_t nb = static_cast<std::int64_t>(n_) * base_;
      for (std::size_t c = 0; c < c_; ++c) sum[c] = nb + step_ * acc[c];
    } else {
      std::fill(sum, sum + c_, 0);
      for (std::size_t i = 0; i < n_; ++i) {
        const std::uint8_t* row = in + i * c_;
        for (std::size_t c = 0; c < c_; ++c) sum[c] += widen_[row[c]];
      }
    }
    const std::int64_t n = static_cast<std::int64_t>(n_);
    for (std::size_t c = 0; c < c_; ++c) {
      // the int32 mean (it fits: a mean of int32 values)
      const std::int32_t v = narrow_(q::div_round_away(sum[c], n));
      if (out_unsigned_) store<std::uint8_t>(out, c, v); else store<std::int8_t>(out, c, v);
    }
  }

 private:
  const std::int32_t* widen_;
  std::size_t c_ = 0, n_ = 0;
  Narrow narrow_;
  bool out_unsigned_ = true, in_signed_ = false, affine_ = false;
  std::int64_t base_ = 0, step_ = 0;
};

// -- AVGPOOL: window sums of the widened values / counts[oh][ow], rounded half away, narrowed -----
class AvgPoolCommand final : public Command {
 public:
  AvgPoolCommand(const Tensor& tx, const Tensor& ty, const Constant& widen, const Constant& counts, const std::vector<std::int32_t>& p,
                 int threads)
      : widen_(widen.as<std::int32_t>()), counts_(counts.as<std::int32_t>()) {
    need_params(p, 13, "avgpool");
    need_4d_batch1(tx, "avgpool input");
    need_4d_batch1(ty, "avgpool output");
    if (!is_8bit(tx) || !is_8bit(ty)) bad("avgpool: input and output must be uint8 or int8");
    kh_ = p[0], kw_ = p[1], sh_ = p[2], sw_ = p[3], pt_ = p[4], pl_ = p[5];
    need_range(kh_, 1, 1 << 16, "kernel");
    need_range(kw_, 1, 1 << 16, "kernel");
    need_range(sh_, 1, 1 << 16, "stride");
    need_range(sw_, 1, 1 << 16, "stride");
    need_range(pt_, 0, 1 << 16, "padding");
    need_range(pl_, 0, 1 << 16, "padding");
    h_ = dim(tx, 1), w_ = dim(tx, 2), c_ = dim(tx, 3), oh_ = dim(ty, 1), ow_ = dim(ty, 2);
    if (dim(ty, 3) != c_) bad("avgpool: output channels differ from the input's");
    if (widen.dtype != ACCEL_INT32 || widen.elements != 256) bad("avgpool: the widening table must hold 256 int32");
    if (counts.dtype != ACCEL_INT32 || counts.elements != static_cast<std::size_t>(oh_ * ow_)) bad("avgpool: counts must hold one int32 per output position");
    for (std::size_t i = 0; i < counts.elements; ++i) need_range(counts_[i], 1, 1 << 30, "window count");
    // every window must start within reach of the input (no overflow: all below 2^31 * 2^16)
    if ((oh_ - 1) * sh_ - pt_ >= h_ + kh_ || (ow_ - 1) * sw_ - pl_ >= w_ + kw_) bad("avgpool: windows past the input");
    narrow_ = Narrow::read(p.data() + 6, ty);
    out_unsigned_ = ty.spec.dtype == ACCEL_UINT8;
    // bands of output rows on the handle's threads (one for a small pool), each with its channel sums in the scratch
    const double work = static_cast<double>(oh_) * static_cast<double>(ow_ * c_) * static_cast<double>(kh_ * kw_);
    bands_ = std::min<std::size_t>(static_cast<std::size_t>(accel_sdk::threads_for(work, threads)), static_cast<std::size_t>(std::max<std::int64_t>(oh_, 1)));
    sums_bytes_ = accel_sdk::align_up(static_cast<std::size_t>(c_) * sizeof(std::int64_t));
    scratch_bytes = bands_ * sums_bytes_;
  }
  void run(Exec& e) const override {
    const std::uint8_t* in = e.in<std::uint8_t>(0);
    std::uint8_t* out = e.out<std::uint8_t>(0);
    const std::size_t oh = static_cast<std::size_t>(oh_);
    dnn::parallel(bands_, [&](std::size_t band) {
      std::int64_t* sum = reinterpret_cast<std::int64_t*>(e.scratch + band * sums_bytes_);
      for (std::size_t oy = oh * band / bands_; oy < oh * (band + 1) / bands_; ++oy) row(in, out, sum, oy);
    });
  }

 private:
  // Output row oy; sum: c_ int64.
  void row(const std::uint8_t* in, std::uint8_t* out, std::int64_t* sum, std::size_t oy) const {
    const std::size_t c = static_cast<std::size_t>(c_);
    for (std::int64_t ox = 0; ox < ow_; ++ox) {
      std::fill(sum, sum + c, 0);
      const std::int64_t y0 = static_cast<std::int64_t>(oy) * sh_ - pt_, x0 = ox * sw_ - pl_;
      for (std::int64_t ky = std::max<std::int64_t>(0, -y0); ky < kh_ && y0 + ky < h_; ++ky) {
        for (std::int64_t kx = std::max<std::int64_t>(0, -x0); kx < kw_ && x0 + kx < w_; ++kx) {
          const std::uint8_t* px = in + ((y0 + ky) * w_ + (x0 + kx)) * c_;
          for (std::size_t ch = 0; ch < c; ++ch) sum[ch] += widen_[px[ch]];
        }
      }
      const std::int64_t n = counts_[oy * ow_ + ox];
      const std::size_t base = (oy * ow_ + ox) * c;
      for (std::size_t ch = 0; ch < c; ++ch) {
        const std::int32_t v = narrow_(q::div_round_away(sum[ch], n));
        if (out_unsigned_) store<std::uint8_t>(out, base + ch, v); else store<std::int8_t>(out, base + ch, v);
      }
    }
  }

  const std::int32_t* widen_;
  const std::int32_t* counts_;
  std::int64_t kh_ = 1, kw_ = 1, sh_ = 1, sw_ = 1, pt_ = 0, pl_ = 0, h_ = 0, w_ = 0, c_ = 0, oh_ = 0, ow_ = 0;
  Narrow narrow_;
  bool out_unsigned_ = true;
  std::size_t bands_ = 1, sums_bytes_ = 0;
};

// -- MAXPOOL: accel-sdk's onednn::Pool (padding never wins) ------------------------------------
// On the handle's threads, or one for a small pool (oneDNN partitions a primitive's work for the count
// it is created with, so it is created and run under the same count); its scratchpad is the run's.
class MaxPoolCommand final : public Command {
 public:
  MaxPoolCommand(const Tensor& tx, const Tensor& ty, const std::vector<std::int32_t>& p, int threads) {
    need_params(p, 8, "maxpool");
    need_4d_batch1(tx, "maxpool input");
    need_4d_batch1(ty, "maxpool output");
    if (tx.spec.dtype != ty.spec.dtype || !is_8bit(tx)) bad("maxpool: input and output must have one 8-bit dtype");
    accel_sdk::geometry::Window2d win;
    win.kh = p[0], win.kw = p[1], win.sh = p[2], win.sw = p[3], win.pt = p[4], win.pl = p[5], win.pb = p[6], win.pr = p[7];
    for (int i = 0; i < 8; ++i) need_range(p[i], i < 4 ? 1 : 0, 1 << 16, "window");
    if (win.pt >= win.kh || win.pl >= win.kw) bad("maxpool: padding must be smaller than the window");
    const auto g = accel_sdk::geometry::conv2d(dim(tx, 1), dim(tx, 2), win);
    if (g.oh != dim(ty, 1) || g.ow != dim(ty, 2) || dim(ty, 3) != dim(tx, 3)) bad("maxpool: output shape " + ty.spec.describe() + " does not follow from the window");
    dnn::PoolSpec spec;
    spec.kind = dnn::PoolSpec::Kind::max;
    spec.strides = {win.sh, win.sw};
    spec.kernel = {win.kh, win.kw};
    spec.pad_begin = {win.pt, win.pl};
    spec.pad_end = {win.pb, win.pr};  // the bottom/right padding oneDNN needs for these outputs (ceil mode)
    const auto dt = dnn::data_type(tx.spec.dtype);
    const double work = static_cast<double>(ty.spec.shape.elements()) * static_cast<double>(win.kh * win.kw);
    threads_ = accel_sdk::threads_for(work, threads);
    dnn::ThreadScope scope(threads_);
    pool_ = dnn::Pool(spec, dnnl::memory::desc({1, dim(tx, 3), dim(tx, 1), dim(tx, 2)}, dt, dnnl::memory::format_tag::nhwc),
                      dnnl::memory::desc({1, dim(ty, 3), dim(ty, 1), dim(ty, 2)}, dt, dnnl::memory::format_tag::nhwc));
    scratch_bytes = pool_.scratch_bytes();
  }
  void run(Exec& e) const override {
    dnn::ThreadScope scope(threads_);
    pool_.execute(e.call.stream(), e.in(0), e.out(0), e.scratch);
  }

 private:
  int threads_ = 1;
  dnn::Pool pool_;
};


// -- CONV / FC: oneDNN int8 accumulation (exact on every CPU) + the sdk's banded requantize ---------
// conv params: [kh, kw, sh, sw, pt, pl, pb, pr, groups, in_zp, out_zp, act_min, act_max]; fc params: the last four.
// constants: weights int8 (conv OHWI, fc OI), bias int32[O], multiplier int32[O], shift int32[O].
class LinearCommand final : public Command {
 public:
  LinearCommand(const dnn::IntConvSpec& spec, const Tensor& ty, const Constant& bias, const Constant& mult, const Constant& shift,
                std::int32_t out_zp, std::int32_t lo, std::int32_t hi, int threads) {
    const std::size_t oc = static_cast<std::size_t>(spec.shape.out_channels);
    for (const Constant* c : {&bias, &mult, &shift}) {
      if (c->dtype != ACCEL_INT32 || c->elements != oc) bad("bias, multipliers and shifts must be " + std::to_string(oc) + " int32 each");
    }
    const bool u8 = ty.spec.dtype == ACCEL_UINT8;
    need_range(out_zp, u8 ? 0 : -128, u8 ? 255 : 127, "output zero point");
    need_range(lo, u8 ? 0 : -128, u8 ? 255 : 127, "output minimum");
    need_range(hi, lo, u8 ? 255 : 127, "output maximum");
    std::vector<q::Multiplier> ms(oc);
    for (std::size_t c = 0; c < oc; ++c) {
      ms[c] = q::Multiplier{mult.as<std::int32_t>()[c], shift.as<std::int32_t>()[c]};
      if (!q::valid_multiplier(ms[c].m, ms[c].shift)) bad("channel " + std::to_string(c) + ": invalid fixed-point multiplier");
    }
    std::vector<std::int32_t> b(bias.as<std::int32_t>(), bias.as<std::int32_t>() + oc);
    q::ChannelRequantizer rq(oc, ms, out_zp, lo, hi, b, 0);
    // The sdk cuts a large layer into bands of output rows (single-thread oneDNN convolutions, each band
    // requantized while its accumulators are in cache) spread over one OpenMP team of the handle's threads.
    // A window whose padding alone fills whole output rows (pt or pb >= kh) cannot be cut into bands (a band
    // would read no input row): such rare layers run whole, on one thread.
    // A small layer runs on one thread (accel-sdk's banded_work below kSmallBandedLayer).
    const auto& win = spec.shape.window;
    const bool bandable = win.pt < win.kh && win.pb < win.kh;
    const int team = bandable ? accel_sdk::threads_for(dnn::banded_work(spec.shape), threads, accel_sdk::kSmallBandedLayer) : 1;
    op_ = std::make_unique<dnn::IntConvRequantize>(spec, std::move(rq), ty.spec.dtype, team, bandable ? 0 : -1);
  }
  void run(Exec& e) const override { op_->run(e.in(0), e.out(0)); }

 private:
  std::unique_ptr<dnn::IntConvRequantize> op_;
};

void need_zero_point(std::int64_t zp, const Tensor& t, const char* what) {
  const bool u8 = t.spec.dtype == ACCEL_UINT8;
  need_range(zp, u8 ? 0 : -128, u8 ? 255 : 127, what);
}

std::unique_ptr<Command> make_conv(const Tensor& tx, const Tensor& ty, const Constant& w, const Constant& bias, const Constant& mult,
                                   const Constant& shift, const std::vector<std::int32_t>& p, int threads) {
  need_params(p, 13, "conv");
  need_4d_batch1(tx, "conv input");
  need_4d_batch1(ty, "conv output");
  if (!is_8bit(tx) || !is_8bit(ty)) bad("conv: input and output must be uint8 or int8");
  for (int i = 0; i < 9; ++i) need_range(p[i], (i < 4 || i == 8) ? 1 : 0, 1 << 16, "conv window");
  dnn::IntConvSpec spec;
  spec.shape.batch = 1;
  spec.shape.in_h = dim(tx, 1);
  spec.shape.in_w = dim(tx, 2);
  spec.shape.in_channels = dim(tx, 3);
  spec.shape.out_channels = dim(ty, 3);
  spec.shape.groups = p[8];
  auto& win = spec.shape.window;
  win.kh = p[0], win.kw = p[1], win.sh = p[2], win.sw = p[3], win.pt = p[4], win.pl = p[5], win.pb = p[6], win.pr = p[7];
  spec.shape.validate();
  if (spec.shape.out_h() != dim(ty, 1) || spec.shape.out_w() != dim(ty, 2)) bad("conv: output " + ty.spec.describe() + " does not follow from the window");
  using accel_sdk::checked_mul;
  const std::size_t wcount = checked_mul(checked_mul(static_cast<std::size_t>(spec.shape.out_channels), static_cast<std::size_t>(win.kh * win.kw), "weights"),
                                         static_cast<std::size_t>(spec.shape.in_channels / spec.shape.groups), "weights");
  if (w.dtype != ACCEL_INT8 || w.elements != wcount) bad("conv: weights must be " + std::to_string(wcount) + " int8 (OHWI)");
  need_zero_point(p[9], tx, "input zero point");
  spec.data_dtype = tx.spec.dtype;
  spec.data_zero_point = p[9];
  spec.weight_dtype = ACCEL_INT8;
  spec.weights = w.data.data();
  spec.weight_layout = dnn::WeightLayout::ohwi;
  return std::make_unique<LinearCommand>(spec, ty, bias, mult, shift, p[10], p[11], p[12], threads);
}

std::unique_ptr<Command> make_fc(const Tensor& tx, const Tensor& ty, const Constant& w, const Constant& bias, const Constant& mult,
                                 const Constant& shift, const std::vector<std::int32_t>& p, int threads) {
  need_params(p, 4, "fc");
  if (tx.spec.shape.rank() != 2 || ty.spec.shape.rank() != 2 || dim(tx, 0) != dim(ty, 0)) bad("fc: input and output must be [M, K] and [M, N]");
  if (!is_8bit(tx) || !is_8bit(ty)) bad("fc: input and output must be uint8 or int8");
  const std::int64_t m = dim(tx, 0), k = dim(tx, 1), n = dim(ty, 1);
  if (m < 1 || k < 1 || n < 1) bad("fc: empty tensors");
  if (w.dtype != ACCEL_INT8 || w.elements != accel_sdk::checked_mul(static_cast<std::size_t>(n), static_cast<std::size_t>(k), "weights")) bad("fc: weights must be N x K int8");
  need_zero_point(p[0], tx, "input zero point");
  const dnn::IntConvSpec spec = dnn::dense_spec(m, k, n, tx.spec.dtype, p[0], ACCEL_INT8, w.data.data());
  return std::make_unique<LinearCommand>(spec, ty, bias, mult, shift, p[1], p[2], p[3], threads);
}

// -- the conversions at a stream's edges, on the CPU -----------------------------------------

float scale_of(std::int32_t bits, const char* what) {
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  if (!(scale > 0.f) || !std::isfinite(scale)) bad(std::string(what) + ": the scale must be finite and > 0");
  return scale;
}

void need_same_shape(const Tensor& x, const Tensor& y, const char* what) {
  if (x.spec.shape != y.spec.shape) bad(std::string(what) + ": input " + x.spec.describe() + " and output " + y.spec.describe() + " differ in shape");
}

// quantize: float32 to uint8/int8 per tensor, [scale's float32 bits, zero point] (accel-sdk's
// quant::Quantizer: accel.quant's definition bit for bit).
class QuantizeCommand final : public Command {
 public:
  QuantizeCommand(const Tensor& x, const Tensor& y, const std::vector<std::int32_t>& p) : n_(static_cast<std::size_t>(x.spec.shape.elements())) {
    need_params(p, 2, "quantize");
    if (x.spec.dtype != ACCEL_FLOAT32 || !is_8bit(y)) bad("quantize: float32 in, uint8 or int8 out");
    need_same_shape(x, y, "quantize");
    const std::int64_t lo = y.spec.dtype == ACCEL_UINT8 ? 0 : -128;
    need_range(p[1], lo, lo + 255, "quantize zero point");
    q_ = q::Quantizer(scale_of(p[0], "quantize"), p[1], lo, lo + 255);
  }
  void run(Exec& e) const override { q_.run(e.in<float>(0), e.out<std::uint8_t>(0), n_); }

 private:
  std::size_t n_;
  q::Quantizer q_;
};

// dequantize: uint8/int8 to float32 per tensor, [scale's float32 bits, zero point]: float32(q - z) * s.
class DequantizeCommand final : public Command {
 public:
  DequantizeCommand(const Tensor& x, const Tensor& y, const std::vector<std::int32_t>& p)
      : n_(static_cast<std::size_t>(x.spec.shape.elements())), signed_(x.spec.dtype == ACCEL_INT8) {
    need_params(p, 2, "dequantize");
    if (!is_8bit(x) || y.spec.dtype != ACCEL_FLOAT32) bad("dequantize: uint8 or int8 in, float32 out");
    need_same_shape(x, y, "dequantize");
    const std::int64_t lo = signed_ ? -128 : 0;
    need_range(p[1], lo, lo + 255, "dequantize zero point");
    scale_ = scale_of(p[0], "dequantize");
    zero_ = p[1];
  }
  void run(Exec& e) const override {
    if (signed_) {
      q::dequantize(e.in<std::int8_t>(0), e.out<float>(0), n_, scale_, zero_);
    } else {
      q::dequantize(e.in<std::uint8_t>(0), e.out<float>(0), n_, scale_, zero_);
    }
  }

 private:
  std::size_t n_;
  bool signed_;
  float scale_ = 1.f;
  std::int32_t zero_ = 0;
};

// transpose: [axes...] (output axis i is input axis axes[i]), one dtype, rank <= 4: one oneDNN reorder.
class TransposeCommand final : public Command {
 public:
  TransposeCommand(const Tensor& x, const Tensor& y, const std::vector<std::int32_t>& p) {
    const int r = static_cast<int>(x.spec.shape.rank());
    if (x.spec.dtype != y.spec.dtype) bad("transpose: input and output dtypes differ");
    if (r < 1 || static_cast<int>(y.spec.shape.rank()) != r) bad("transpose: input and output ranks differ, or rank 0");
    need_params(p, static_cast<std::size_t>(r), "transpose");
    std::vector<int> axes(p.begin(), p.end());
    std::vector<bool> seen(static_cast<std::size_t>(r), false);
    std::vector<std::int64_t> dims(static_cast<std::size_t>(r));
    for (int i = 0; i < r; ++i) {
      need_range(axes[static_cast<std::size_t>(i)], 0, r - 1, "transpose axis");
      if (seen[static_cast<std::size_t>(axes[static_cast<std::size_t>(i)])]) bad("transpose: the axes are not a permutation");
      seen[static_cast<std::size_t>(axes[static_cast<std::size_t>(i)])] = true;
      if (y.spec.shape[i] != x.spec.shape[axes[static_cast<std::size_t>(i)]]) bad("transpose: output " + y.spec.describe() + " is not the input " + x.spec.describe() + " permuted");
      dims[static_cast<std::size_t>(i)] = x.spec.shape[i];
    }
    if (x.spec.shape.elements() == 0) bad("transpose: empty tensor");
    permute_ = dnn::Permute(dims.data(), r, axes.data(), x.spec.dtype);
  }
  void run(Exec& e) const override { permute_.run(e.in<std::uint8_t>(0), e.out<std::uint8_t>(0)); }

 private:
  dnn::Permute permute_;
};

class EthosnRuntime {
 public:
  static std::string kernel_library() { return dnn::Call::library(); }
  static std::unique_ptr<EthosnRuntime> create(BlobReader& blob, const accel_sdk::RuntimeOptions& options) {
    auto rt = std::make_unique<EthosnRuntime>();
    rt->threads_ = options.threads;
    {
      dnn::ThreadScope scope(rt->threads_);  // oneDNN primitives are created for the count they run with
      rt->parse(blob);
    }
    rt->plan();
    const char* prof = std::getenv("ETHOSN_PROFILE");
    if (prof != nullptr && *prof != '\0' && *prof != '0') {
      rt->profile_.reset(new std::atomic<std::uint64_t>[kOpcodes]);
      for (int k = 0; k < kOpcodes; ++k) rt->profile_[k] = 0;
    }
    return rt;
  }

  int threads() const { return threads_; }

  void run(const std::vector<TensorView>& inputs, std::vector<TensorView>& outputs) const {
    accel_sdk::check_tensors("input", inputs, in_specs_);
    accel_sdk::check_tensors("output", outputs, out_specs_);
    dnn::Call call(threads_);
    const accel_sdk::ArenaPool::Lease arena = pool_->take();
    std::vector<void*> ptr(tensors_.size());
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      const Tensor& tensor = tensors_[t];
      if (tensor.kind == ARENA) ptr[t] = arena.data() + tensor.slot;
      else if (tensor.kind == INPUT) ptr[t] = inputs[tensor.slot].data();
      else ptr[t] = outputs[tensor.slot].data();
    }
    std::uint8_t* scratch = arena.data() + scratch_at_;
    for (std::size_t i = 0; i < commands_.size(); ++i) {
      const Command& cmd = *commands_[i];
      Exec e{ptr.data(), scratch, call, cmd.ins, cmd.outs};
      if (!profile_) {
        cmd.run(e);
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      cmd.run(e);
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
      profile_[opcodes_[i]].fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
    }
    call.finish();
  }

  // ETHOSN_PROFILE=1: time spent per command kind, printed to stderr when the stream is unloaded.
  ~EthosnRuntime() {
    if (!profile_) return;
    static const char* names[kOpcodes] = {"",    "conv", "fc",     "maxpool",  "avgpool",    "mean",     "lut",
                                          "add", "gather", "concat", "quantize", "dequantize", "transpose"};
    std::string line = "ethosn profile (ms):";
    for (int k = 1; k < kOpcodes; ++k) {
      const std::uint64_t ns = profile_[k].load();
      if (ns) line += std::string(" ") + names[k] + "=" + std::to_string(ns / 1000000.0);
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }

 private:
  void parse(BlobReader& blob) {
    blob.expect_magic("ETHN");
    blob.expect_version(kVersion, kVersion);
    blob.read_in_range<std::uint8_t>(1, 8, "tops");
    blob.read_in_range<std::uint8_t>(2, 4, "ple_ratio");
    const std::size_t sram_at = blob.offset();
    const auto sram = blob.read_in_range<std::uint32_t>(1, kMaxSramKib, "sram KiB");
    if ((sram & (sram - 1)) != 0) blob.fail_at(sram_at, "sram KiB=" + std::to_string(sram) + ", must be a power of two");
    arena_ = blob.read_in_range<std::uint64_t>(0, kMaxArena, "arena bytes");
    const std::uint32_t n_in = blob.read_in_range<std::uint32_t>(0, 1u << 16, "input count");
    const std::uint32_t n_out = blob.read_in_range<std::uint32_t>(1, 1u << 16, "output count");
    read_tensors(blob, n_in, n_out);
    read_constants(blob);
    read_commands(blob);
    blob.expect_end();
  }

  void read_tensors(BlobReader& blob, std::uint32_t n_in, std::uint32_t n_out) {
    const std::uint32_t n = blob.read_count(11, "tensor count", kMaxTensors);
    tensors_.resize(n);
    std::vector<int> in_seen(n_in, -1), out_seen(n_out, -1);
    for (std::uint32_t i = 0; i < n; ++i) {
      Tensor& t = tensors_[i];
      const std::size_t at = blob.offset();
      t.spec.dtype = blob.read<std::uint8_t>("dtype");
      if (t.spec.dtype != ACCEL_UINT8 && t.spec.dtype != ACCEL_INT8 && t.spec.dtype != ACCEL_FLOAT32) {
        blob.fail_at(at, "tensor " + std::to_string(i) + ": dtype code " + std::to_string(t.spec.dtype) + ", must be uint8, int8 or float32");
      }
      const auto rank = blob.read_in_range<std::uint8_t>(0, 4, "rank");
      std::int64_t dims[ACCEL_MAX_RANK] = {};
      for (std::uint8_t d = 0; d < rank; ++d) dims[d] = blob.read_in_range<std::uint32_t>(0, static_cast<std::uint32_t>(kMaxDim - 1), "dimension");
      t.spec.shape = Shape(dims, rank);
      if (t.spec.shape.elements() > kMaxElements) blob.fail("tensor " + t.spec.describe() + " has more than 2^40 elements");
      t.bytes = accel_sdk::checked_mul(static_cast<std::size_t>(t.spec.shape.elements()), t.spec.dtype == ACCEL_FLOAT32 ? 4 : 1, "tensor");
      const std::size_t kat = blob.offset();
      t.kind = static_cast<Kind>(blob.read_in_range<std::uint8_t>(INPUT, ARENA, "tensor kind"));
      t.slot = blob.read<std::uint64_t>("slot");
      if (t.kind == ARENA) {
        if (t.slot > arena_ || t.bytes > arena_ - t.slot) blob.fail_at(kat, "tensor " + std::to_string(i) + " (" + std::to_string(t.bytes) + " bytes at " + std::to_string(t.slot) + ") lies outside the arena of " + std::to_string(arena_) + " bytes");
      } else {
        std::vector<int>& seen = t.kind == INPUT ? in_seen : out_seen;
        if (t.slot >= seen.size()) blob.fail_at(kat, "tensor " + std::to_string(i) + ": position " + std::to_string(t.slot) + " out of range");
        if (seen[t.slot] >= 0) blob.fail_at(kat, "tensor " + std::to_string(i) + ": position " + std::to_string(t.slot) + " used twice");
        seen[t.slot] = static_cast<int>(i);
      }
    }
    for (std::uint32_t k = 0; k < n_in; ++k) {
      if (in_seen[k] < 0) blob.fail("input " + std::to_string(k) + " has no tensor");
      in_specs_.push_back(tensors_[in_seen[k]].spec);
    }
    for (std::uint32_t k = 0; k < n_out; ++k) {
      if (out_seen[k] < 0) blob.fail("output " + std::to_string(k) + " has no tensor");
      out_specs_.push_back(tensors_[out_seen[k]].spec);
    }
  }

  void read_constants(BlobReader& blob) {
    const std::uint32_t n = blob.read_count(17, "constant count", kMaxConstants);
    constants_.resize(n);
    for (Constant& c : constants_) {
      const std::size_t at = blob.offset();
      c.dtype = blob.read<std::uint8_t>("constant dtype");
      std::size_t esize = 0;
      switch (c.dtype) {
        case ACCEL_UINT8: case ACCEL_INT8: esize = 1; break;
        case ACCEL_INT32: esize = 4; break;
        default: blob.fail_at(at, "constant dtype code " + std::to_string(c.dtype) + ", must be uint8, int8 or int32");
      }
      const auto elements = blob.read_in_range<std::uint64_t>(0, kMaxElements, "constant elements");
      c.elements = static_cast<std::size_t>(elements);
      const std::size_t bytes = accel_sdk::checked_mul(c.elements, esize, "constant");
      std::size_t size = 0;
      const std::size_t cat = blob.offset();
      const std::uint8_t* p = blob.read_constant(kAlign, &size, "constant", bytes);
      if (size != bytes) blob.fail_at(cat, "constant of " + std::to_string(c.elements) + " elements has " + std::to_string(size) + " bytes");
      c.data.assign(p, p + size);
    }
  }

  const Constant& constant(BlobReader& blob, const std::vector<std::uint32_t>& ids, std::size_t k, std::size_t at) const {
    if (ids[k] >= constants_.size()) blob.fail_at(at, "constant id " + std::to_string(ids[k]) + " out of range");
    return constants_[ids[k]];
  }

  void read_commands(BlobReader& blob) {
    const std::uint32_t n = blob.read_count(17, "command count", kMaxCommands);
    std::vector<bool> defined(tensors_.size(), false), written(tensors_.size(), false);
    for (std::size_t t = 0; t < tensors_.size(); ++t) defined[t] = tensors_[t].kind == INPUT;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::size_t at = blob.offset();
      const auto op = blob.read_in_range<std::uint8_t>(CONV, TRANSPOSE, "opcode");
      const auto ins = blob.read_counted_array<std::uint32_t>("command inputs", 1u << 16);
      const auto outs = blob.read_counted_array<std::uint32_t>("command outputs", 1u << 16);
      const auto consts = blob.read_counted_array<std::uint32_t>("command constants", 16);
      const auto params = blob.read_counted_array<std::int32_t>("command params", 1u << 10);
      const std::string where = "command " + std::to_string(i) + " (opcode " + std::to_string(op) + ")";
      for (std::uint32_t id : ins) {
        if (id >= tensors_.size()) blob.fail_at(at, where + ": input id " + std::to_string(id) + " out of range");
        if (!defined[id]) blob.fail_at(at, where + ": reads tensor " + std::to_string(id) + " before it is written");
      }
      for (std::uint32_t id : outs) {
        if (id >= tensors_.size()) blob.fail_at(at, where + ": output id " + std::to_string(id) + " out of range");
        if (written[id] || tensors_[id].kind == INPUT) blob.fail_at(at, where + ": writes tensor " + std::to_string(id) + " twice, or an input");
        for (std::uint32_t other : ins) {
          if (other == id) blob.fail_at(at, where + ": reads and writes tensor " + std::to_string(id));
        }
        written[id] = true;
      }
      for (std::uint32_t c : consts) {
        if (c >= constants_.size()) blob.fail_at(at, where + ": constant id " + std::to_string(c) + " out of range");
      }
      try {
        commands_.push_back(make(op, ins, outs, consts, params));
        commands_.back()->ins = ins;
        commands_.back()->outs = outs;
        opcodes_.push_back(op);
      } catch (const accel_sdk::BlobError&) {
        throw;
      } catch (const std::exception& e) {
        blob.fail_at(at, where + ": " + e.what());
      }
      for (std::uint32_t id : outs) defined[id] = true;
    }
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      if (tensors_[t].kind == OUTPUT && !written[t]) blob.fail("output tensor " + std::to_string(t) + " is never written");
    }
  }

  // The arena a run borrows: the stream's planned intermediates, then the scratch of whichever command runs
  // (they run one at a time, so one region, as large as the largest command's).
  void plan() {
    std::size_t scratch = 0;
    for (const auto& cmd : commands_) scratch = std::max(scratch, cmd->scratch_bytes);
    scratch_at_ = accel_sdk::align_up(static_cast<std::size_t>(arena_));
    pool_ = std::make_unique<accel_sdk::ArenaPool>(scratch_at_ + accel_sdk::align_up(scratch));
  }

  // A command's ins / outs are the stream's (set by read_commands); constants and threads are bound here.
  std::unique_ptr<Command> make(std::uint8_t op, const std::vector<std::uint32_t>& ins, const std::vector<std::uint32_t>& outs,
                                const std::vector<std::uint32_t>& consts, const std::vector<std::int32_t>& p) const {
    const int threads = threads_;
    auto arity = [&](std::size_t ni, std::size_t no, std::size_t nc, const char* what) {
      if (ins.size() != ni || outs.size() != no || consts.size() != nc) {
        bad(std::string(what) + ": " + std::to_string(ins.size()) + " inputs, " + std::to_string(outs.size()) + " outputs, " + std::to_string(consts.size()) +
            " constants; expected " + std::to_string(ni) + ", " + std::to_string(no) + ", " + std::to_string(nc));
      }
    };
    auto T = [&](std::uint32_t id) -> const Tensor& { return tensors_[id]; };
    auto C = [&](std::size_t k) -> const Constant& { return constants_[consts[k]]; };
    if (op < QUANTIZE) {  // the NPU's commands: 8-bit tensors only
      for (const auto* ids : {&ins, &outs}) {
        for (std::uint32_t id : *ids) {
          if (!is_8bit(T(id))) bad("tensor " + std::to_string(id) + " is " + T(id).spec.describe() + ": only an edge conversion reads or writes float32");
        }
      }
    }
    switch (op) {
      case QUANTIZE:
        arity(1, 1, 0, "quantize");
        return std::make_unique<QuantizeCommand>(T(ins[0]), T(outs[0]), p);
      case DEQUANTIZE:
        arity(1, 1, 0, "dequantize");
        return std::make_unique<DequantizeCommand>(T(ins[0]), T(outs[0]), p);
      case TRANSPOSE:
        arity(1, 1, 0, "transpose");
        return std::make_unique<TransposeCommand>(T(ins[0]), T(outs[0]), p);
      case LUT:
        arity(1, 1, 1, "lut");
        need_params(p, 1, "lut");
        need_range(p[0], 0, 1, "per-channel flag");
        return std::make_unique<LutCommand>(T(ins[0]), T(outs[0]), C(0), p[0] != 0);
      case GATHER:
        arity(1, 1, 1, "gather");
        need_params(p, 2, "gather");
        return std::make_unique<GatherCommand>(T(ins[0]), T(outs[0]), C(0), p[0], p[1]);
      case CONCAT: {
        if (ins.empty() || outs.size() != 1 || !consts.empty()) bad("concat: needs inputs, one output and no constants");
        std::vector<const Tensor*> txs;
        for (std::uint32_t id : ins) txs.push_back(&T(id));
        return std::make_unique<ConcatCommand>(txs, T(outs[0]), p);
      }
      case ADD:
        arity(2, 1, 0, "add");
        return std::make_unique<AddCommand>(T(ins[0]), T(ins[1]), T(outs[0]), p, threads);
      case MEAN:
        arity(1, 1, 1, "mean");
        return std::make_unique<MeanCommand>(T(ins[0]), T(outs[0]), C(0), p);
      case AVGPOOL:
        arity(1, 1, 2, "avgpool");
        return std::make_unique<AvgPoolCommand>(T(ins[0]), T(outs[0]), C(0), C(1), p, threads);
      case MAXPOOL:
        arity(1, 1, 0, "maxpool");
        return std::make_unique<MaxPoolCommand>(T(ins[0]), T(outs[0]), p, threads);
      case CONV:
        arity(1, 1, 4, "conv");
        return make_conv(T(ins[0]), T(outs[0]), C(0), C(1), C(2), C(3), p, threads);
      case FC:
        arity(1, 1, 4, "fc");
        return make_fc(T(ins[0]), T(outs[0]), C(0), C(1), C(2), C(3), p, threads);
      default:
        bad("unknown opcode " + std::to_string(op));
    }
  }

  std::vector<Tensor> tensors_;
  std::vector<Constant> constants_;
  std::vector<std::unique_ptr<Command>> commands_;
  std::vector<std::uint8_t> opcodes_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> profile_;
  std::vector<TensorSpec> in_specs_, out_specs_;
  std::uint64_t arena_ = 0;
  std::size_t scratch_at_ = 0;
  std::unique_ptr<accel_sdk::ArenaPool> pool_;
  int threads_ = 1;
};

}  // namespace

ACCEL_SDK_RUNTIME_MODULE(_runtime, "ethosn", EthosnRuntime)

// accel_sdk/int_ops.hpp: exact quantized convolutions and dense layers through oneDNN.
//
//   IntConv            uint8/int8 NHWC data (zero point z_x) x int8/uint8 weights (zero
//                      points per tensor or per output channel) -> int32 accumulators
//                      sum (x - z_x)(w - z_w), as the core's qnn.conv2d computes them:
//                      padding contributes 0; groups (depthwise too), stride, dilation, batch.
//   dense_spec(...)    qnn.dense ([M, K] x [N, K] -> [M, N]) as an IntConv spec (1x1 over 1 x M).
//   IntConvRequantize  IntConv followed by quant::ChannelRequantizer -> uint8/int8 NHWC, a
//                      band of output rows at a time while its accumulators are in cache.
//
// Exactness. Weights are centred once at create (w - z_w, in [-255, 255]), split into
// parts and packed; the parts are computed as one convolution with parts x channels
// outputs and summed in int32 (the requantizer sums them as it reads them). Two limits
// shape the parts:
//  - without VNNI (AVX2, AVX512_CORE) oneDNN's u8 x s8 kernels add pairs of products in
//    16 bits with saturation: there every weight of a part has |w| <= 64, so a pair stays
//    within 2 * 255 * 64 = 32640 (two parts for any int8 weight); with VNNI, and for
//    depthwise convolutions (32-bit products on every ISA), a part's weights only have
//    to be int8;
//  - oneDNN's AVX2 int8 kernel hands the int32 result through float32 on the way out
//    (measured off by one past 2^24), and so do the VNNI kernels when they apply a
//    source zero point: there every part keeps 255 * sum|w| <= 2^24 per channel, so
//    channels with a larger sum (e.g. 3x3x512 taps averaging |w| > 14) take one more
//    part. With VNNI and z_x = 0 (data after a ReLU, mostly) the int32 result is exact at
//    any size (tested past 2^27), so int8 weights run in one part there.
// int8 data is shifted to uint8 (x + 128, z_x + 128) on the way in, so oneDNN always runs
// u8 x s8; z_x is oneDNN's run-time source zero point, which also makes padding count as
// z_x. Accumulators must fit int32: create refuses a channel whose 255 * sum |w - z_w|
// exceeds 2^31 - 1 (about 66,000 taps of |w| = 128).
//
// Paths. The above is the int8 path. The f32 path runs oneDNN's float32 convolution on
// x - z_x (converted per band, padding 0) and w - z_w, and converts its output to int32
// in place: exact when max|x - z_x| * sum|w - z_w| <= 2^24 for every output channel
// (max|x - z_x| = max(z_x, 255 - z_x) on the uint8 scale), since every product and every
// partial sum, in any order, is then an integer a float32 holds exactly. create picks
// the f32 path (spec.path == automatic) when it is exact and the int8 weights would run
// in two or more parts in a dense convolution with a window larger than 1x1, the case
// where it measured faster (docs/sdk.md); path() and impl() tell which path runs.
//
// Threads (`threads` <= 0: every core). IntConv computes the whole tensor with one
// oneDNN convolution on that many threads. IntConvRequantize does so for small layers
// and then requantizes; a large layer is cut into bands of output rows, and `threads`
// workers (onednn::parallel: an OpenMP team under accel_link_onednn) each take bands: a
// single-thread oneDNN convolution of the band, then its requantization while the band
// is in the core's cache. run() is const and may be called
// from several threads at once.
#ifndef ACCEL_SDK_INT_OPS_HPP
#define ACCEL_SDK_INT_OPS_HPP

#include <accel_sdk/onednn.hpp>
#include <accel_sdk/requantize.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace accel_sdk {
namespace onednn {

// How IntConv computes: `automatic` picks per layer (see the header comment); the others
// force a path (benchmarks, tests), `f32` only where it is exact (else create throws).
enum class IntConvPath { automatic, int8, f32 };

struct IntConvSpec {
  ConvShape shape;
  std::int32_t data_dtype = ACCEL_UINT8;  // ACCEL_UINT8 or ACCEL_INT8
  std::int32_t data_zero_point = 0;
  std::int32_t weight_dtype = ACCEL_INT8;  // ACCEL_INT8 or ACCEL_UINT8
  const void* weights = nullptr;           // shape.weight_count() elements in weight_layout
  WeightLayout weight_layout = WeightLayout::ohwi;
  std::vector<std::int32_t> weight_zero_points{0};  // 1 or out_channels
  IntConvPath path = IntConvPath::automatic;
};

// qnn.dense as a convolution: data [M, K], weights [N, K] (layout "OI").
inline IntConvSpec dense_spec(std::int64_t m, std::int64_t k, std::int64_t n, std::int32_t data_dtype,
                              std::int32_t data_zero_point, std::int32_t weight_dtype, const void* weights,
                              std::vector<std::int32_t> weight_zero_points = {0}) {
  IntConvSpec s;
  s.shape.in_h = 1;
  s.shape.in_w = m;
  s.shape.in_channels = k;
  s.shape.out_channels = n;
  s.data_dtype = data_dtype;
  s.data_zero_point = data_zero_point;
  s.weight_dtype = weight_dtype;
  s.weights = weights;
  s.weight_layout = WeightLayout::oihw;
  s.weight_zero_points = std::move(weight_zero_points);
  return s;
}

namespace detail {

// Weights as create packs them for one path.
struct PackedWeights {
  std::vector<std::int8_t> s8;  // the int8 path's parts
  std::vector<float> f32;       // the f32 path's centred weights
};

// One oneDNN convolution: a band of output rows of one image, or the whole batch.
struct IntBand {
  dnnl::convolution_forward prim;
  dnnl::memory::desc src_md, dst_md, scratch_md;
  std::shared_ptr<dnnl::memory> weights;
  ConvShape::Band rows;
  std::string impl;
};

// out[i] = in[i] - z as float (exact).
inline void centre_u8(const std::uint8_t* in, std::int32_t z, float* out, std::size_t n) {
  const float zf = static_cast<float>(z);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]) - zf;
}

// The n floats stored at p (integers below 2^24 in magnitude) as int32, in place.
inline void floats_to_int32(std::int32_t* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, p + i, sizeof f);
    p[i] = static_cast<std::int32_t>(f);
  }
}

inline void to_unsigned(const std::int8_t* in, std::uint8_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint8_t>(static_cast<std::uint8_t>(in[i]) ^ 0x80u);
}

}  // namespace detail

class IntConv {
 public:
  // Validates the spec (onednn::Error naming the problem) and packs the weights.
  // band_rows > 0 prepares single-thread convolutions of bands of that many output rows
  // (what IntConvRequantize uses); 0, one convolution of the whole tensor on `threads`.
  IntConv(const IntConvSpec& spec, int threads, std::int64_t band_rows = 0)
      : s_(spec.shape), threads_(resolve_threads(threads)) {
    s_.validate();
    check(spec);
    signed_data_ = spec.data_dtype == ACCEL_INT8;
    zx_ = spec.data_zero_point + (signed_data_ ? 128 : 0);
    const detail::PackedWeights packed = pack_weights(spec);
    const std::int64_t OH = s_.out_h();
    band_rows_ = band_rows <= 0 ? OH : std::min(band_rows, OH);
    ThreadScope scope(band_rows > 0 ? 1 : threads_);
    guard(f32_ ? "int8 convolution create (f32 path)" : "int8 convolution create", [&] {
      const std::int64_t G = s_.groups, P = static_cast<std::int64_t>(parts_);
      const dnnl::memory::dims wdims =
          G > 1 ? dnnl::memory::dims{G, P * s_.out_per_group(), s_.in_per_group(), s_.window.kh, s_.window.kw}
                : dnnl::memory::dims{P * s_.out_channels, s_.in_channels, s_.window.kh, s_.window.kw};
      const dnnl::memory::desc user_md(wdims, f32_ ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::s8,
                                       G > 1 ? dnnl::memory::format_tag::goihw : dnnl::memory::format_tag::oihw);
      for (std::int64_t r0 = 0; r0 < OH; r0 += band_rows_) {
        add_band(r0, std::min(OH, r0 + band_rows_), band_rows <= 0, user_md, packed);
      }
    });
  }

  const ConvShape& shape() const { return s_; }
  int threads() const { return threads_; }
  // Weight parts per output channel in run()'s output (1 with VNNI for int8 weights).
  std::size_t parts() const { return gather_ ? 1 : parts_; }
  // run()'s output: rows() = batch x out_h x out_w rows of acc_width() = parts() x out_channels int32.
  std::size_t rows() const { return static_cast<std::size_t>(s_.batch * s_.out_h() * s_.out_w()); }
  std::size_t acc_width() const { return parts() * static_cast<std::size_t>(s_.out_channels); }
  std::int64_t band_rows() const { return band_rows_; }
  std::size_t band_count() const { return band_of_.size(); }
  // oneDNN's implementation of the first band, e.g. "brg:avx2".
  std::string impl() const {
    return bands_.front().impl;
  }
  // The path create chose: "f32" (oneDNN's f32 convolution, exact for this layer) or "int8".
  const char* path() const { return f32_ ? "f32" : "int8"; }
  // sum_k (w_ck - z_w) of each output channel c over its taps (what a data zero point would
  // take from every output of c without padding).
  const std::vector<std::int64_t>& weight_sums() const { return weight_sums_; }

  // Rows [row0, row0 + n) of an output of run(), for quant::ChannelRequantizer::run.
  quant::AccBlock block(const std::int32_t* acc, std::size_t row0, std::size_t n) const {
    quant::AccBlock b;
    b.data = acc + row0 * acc_width();
    b.rows = n;
    b.row_stride = acc_width();
    b.parts = parts();
    b.part_stride = static_cast<std::size_t>(s_.out_channels);
    return b;
  }

  // data: batch x in_h x in_w x in_channels (the spec's dtype); acc: rows() x acc_width(),
  // part p of channel c in column p * out_channels + c (sum the parts, or let block() do).
  void run(const void* data, std::int32_t* acc) const {
    ThreadScope scope(threads_);
    std::vector<std::uint8_t> shifted;
    const std::uint8_t* src = unsigned_data(data, shifted);
    if (whole_) {
      Stream stream;
      std::vector<std::int32_t> tmp;
      execute(stream, bands_.front(), src, acc, rows(), tmp);
      return;
    }
    for_each_band([&](std::int64_t n, std::size_t band, std::vector<std::int32_t>& tmp) {
      run_band(src, n, band, acc + band_offset(n, band) * acc_width(), tmp);
    });
  }

  // --- band by band (IntConvRequantize) ---

  // The data as uint8: the caller's buffer, or x + 128 in `buf` for int8 data.
  const std::uint8_t* unsigned_data(const void* data, std::vector<std::uint8_t>& buf) const {
    if (!signed_data_) return static_cast<const std::uint8_t*>(data);
    const std::size_t n = static_cast<std::size_t>(s_.batch * s_.in_h * s_.in_w * s_.in_channels);
    buf.resize(n);
    detail::to_unsigned(static_cast<const std::int8_t*>(data), buf.data(), n);
    return buf.data();
  }
  // First output row (in rows()) of band `band` of image n, and its number of rows.
  std::size_t band_offset(std::int64_t n, std::size_t band) const {
    return static_cast<std::size_t>((n * s_.out_h() + static_cast<std::int64_t>(band) * band_rows_) * s_.out_w());
  }
  std::size_t band_size(std::size_t band) const {
    return static_cast<std::size_t>(bands_[band_of_[band]].rows.out_rows * s_.out_w());
  }
  // Output rows of band `band` of image n into acc (band_size() rows of acc_width()), on
  // this thread (create the IntConv with band_rows > 0 and call it under ThreadScope(1)).
  void run_band(const std::uint8_t* src_u8, std::int64_t n, std::size_t band, std::int32_t* acc,
                std::vector<std::int32_t>& tmp) const {
    const detail::IntBand& b = bands_[band_of_[band]];
    const std::int64_t r0 = static_cast<std::int64_t>(band) * band_rows_;
    const std::int64_t first_in = s_.band(r0, r0 + 1).in_first;
    const std::uint8_t* src = src_u8 + static_cast<std::size_t>(((n * s_.in_h + first_in) * s_.in_w) * s_.in_channels);
    Stream stream;
    execute(stream, b, src, acc, band_size(band), tmp);
  }
  // fn(image, band, scratch) for every band of every image on up to threads() threads, each
  // band a oneDNN call on one thread (ThreadScope(1)), on accel_sdk's pool: the bands in one
  // contiguous share a thread, so that from layer to layer a thread mostly reads the rows it
  // wrote (on a virtual machine whose two CPUs do not share a cache, MobileNetV2 QDQ at 2
  // threads went from 2.12-2.16 to 1.85-1.92 ms against bands handed out one at a time); the
  // caller takes a share too and does not wait for a worker that has not started (it takes
  // that share as well).
  template <class Fn>
  void for_each_band(Fn&& fn) const {
    const std::size_t per_image = band_of_.size();
    const std::size_t tasks = static_cast<std::size_t>(s_.batch) * per_image;
    auto share = [&](std::size_t t0, std::size_t t1) {
      ThreadScope one(1);
      thread_local std::vector<std::int32_t> tmp;  // each thread's own
      for (std::size_t t = t0; t < t1; ++t) fn(static_cast<std::int64_t>(t / per_image), t % per_image, tmp);
    };
    accel_sdk::parallel_ranges(tasks, static_cast<std::size_t>(std::max(1, threads_)), share, 1);
  }

 private:
  void check(const IntConvSpec& spec) const {
    if (spec.data_dtype != ACCEL_UINT8 && spec.data_dtype != ACCEL_INT8) {
      throw Error("int8 convolution: data must be uint8 or int8", dnnl_invalid_arguments);
    }
    if (spec.weight_dtype != ACCEL_UINT8 && spec.weight_dtype != ACCEL_INT8) {
      throw Error("int8 convolution: weights must be int8 or uint8", dnnl_invalid_arguments);
    }
    if (spec.weights == nullptr) throw Error("int8 convolution: no weights", dnnl_invalid_arguments);
    const std::size_t nz = spec.weight_zero_points.size();
    if (nz != 1 && nz != static_cast<std::size_t>(s_.out_channels)) {
      throw Error("int8 convolution: " + std::to_string(nz) + " weight zero points for " +
                      std::to_string(s_.out_channels) + " output channels (need 1 or one per channel)",
                  dnnl_invalid_arguments);
    }
    const std::int32_t lo = spec.data_dtype == ACCEL_UINT8 ? 0 : -128;
    if (spec.data_zero_point < lo || spec.data_zero_point > lo + 255) {
      throw Error("int8 convolution: data zero point " + std::to_string(spec.data_zero_point) +
                      " is outside the data type's range",
                  dnnl_invalid_arguments);
    }
    const std::int32_t wlo = spec.weight_dtype == ACCEL_UINT8 ? 0 : -128;
    for (std::int32_t z : spec.weight_zero_points) {
      if (z < wlo || z > wlo + 255) {
        throw Error("int8 convolution: weight zero point " + std::to_string(z) + " is outside the weight type's range",
                    dnnl_invalid_arguments);
      }
    }
  }

  // Centred weights, picks the path; f32: as goihw/oihw float; int8: split into parts, as
  // goihw/oihw int8 with P x out_per_group outputs per group.
  detail::PackedWeights pack_weights(const IntConvSpec& spec) {
    const std::int64_t G = s_.groups, OC = s_.out_channels, OCg = s_.out_per_group(), ICg = s_.in_per_group();
    const std::int64_t KH = s_.window.kh, KW = s_.window.kw, taps = ICg * KH * KW;
    std::vector<std::int32_t> w(s_.weight_count());
    std::int32_t max_abs = 0;
    std::int64_t max_sum = 0;
    for (std::int64_t o = 0; o < OC; ++o) {
      const auto& zw = spec.weight_zero_points;
      const std::int32_t z = zw[zw.size() == 1 ? 0 : static_cast<std::size_t>(o)];
      std::int64_t sum_abs = 0, sum = 0;
      for (std::int64_t i = 0; i < ICg; ++i) {
        for (std::int64_t y = 0; y < KH; ++y) {
          for (std::int64_t x = 0; x < KW; ++x) {
            const std::size_t from = weight_index(spec.weight_layout, s_, o, i, y, x);
            const std::int32_t raw = spec.weight_dtype == ACCEL_INT8 ? static_cast<const std::int8_t*>(spec.weights)[from]
                                                                     : static_cast<const std::uint8_t*>(spec.weights)[from];
            const std::int32_t c = raw - z, a = c < 0 ? -c : c;
            w[static_cast<std::size_t>(o * taps + (i * KH + y) * KW + x)] = c;
            max_abs = std::max(max_abs, a);
            sum_abs += a;
            sum += c;
          }
        }
      }
      max_sum = std::max(max_sum, sum_abs);
      weight_sums_.push_back(sum);
      if (255 * sum_abs > 2147483647LL) {
        throw Error("int8 convolution: output channel " + std::to_string(o) +
                        " could overflow its int32 accumulator (255 * sum|w - z_w| > 2^31 - 1)",
                    dnnl_invalid_arguments);
      }
    }
    // Pieces of each centred weight go to parts: without VNNI |piece| <= 64, with VNNI an
    // int8. A part also keeps 255 * sum|piece| <= 2^24 per channel where oneDNN passes the
    // int32 result through float32 on the way out (exact up to 2^24): the AVX2 int8
    // kernel always, and the VNNI kernels whenever they apply a post-op, which a source
    // zero point is. With VNNI and z_x = 0 the s32 result is exact at any size (tested
    // past 2^27 on brgconv and brgconv_1x1, AVX2_VNNI and AVX512_CORE_VNNI): no budget.
    // Depthwise kernels multiply in 32 bits (measured exact without VNNI too), and a
    // depthwise convolution with parts would have a channel multiplier, which only
    // oneDNN's reference kernel runs.
    const bool exact = int8_exact() || s_.depthwise();
    const std::int32_t hi = exact ? 127 : 64, lo = exact ? -128 : -64;
    const std::int64_t budget =
        int8_exact() && zx_ == 0 ? std::numeric_limits<std::int64_t>::max() : (std::int64_t{1} << 24) / 255;
    std::vector<std::vector<std::int32_t>> parts;  // parts[p][o * taps + t]
    std::vector<std::vector<std::int64_t>> used;   // used[p][o]: sum|piece| of part p, channel o
    std::vector<std::size_t> taken;                // parts holding a piece of the current tap
    for (std::int64_t o = 0; o < OC; ++o) {
      for (std::int64_t t = 0; t < taps; ++t) {
        std::int32_t rest = w[static_cast<std::size_t>(o * taps + t)];
        taken.clear();
        while (rest != 0) {
          const std::int32_t piece = std::max(lo, std::min(rest, hi));
          const std::int64_t a = piece < 0 ? -piece : piece;
          std::size_t q = 0;
          while (q < parts.size() && (std::find(taken.begin(), taken.end(), q) != taken.end() ||
                                      used[q][static_cast<std::size_t>(o)] + a > budget)) {
            ++q;
          }
          if (q == parts.size()) {
            parts.emplace_back(w.size(), 0);
            used.emplace_back(static_cast<std::size_t>(OC), 0);
          }
          parts[q][static_cast<std::size_t>(o * taps + t)] = piece;
          used[q][static_cast<std::size_t>(o)] += a;
          taken.push_back(q);
          rest -= piece;
        }
      }
    }
    if (parts.empty()) parts.emplace_back(w.size(), 0);
    detail::PackedWeights out;
    f32_ = choose_f32(spec.path, max_sum, parts.size());
    if (f32_) {
      parts_ = 1;
      out.f32.assign(w.begin(), w.end());  // goihw == oihw with O = G x OCg, in order
      return out;
    }
    const std::int64_t P = static_cast<std::int64_t>(parts.size());
    parts_ = parts.size();
    gather_ = P > 1 && G > 1;  // with groups the parts of a channel are not one block apart
    std::vector<std::int8_t>& packed = out.s8;
    packed.resize(static_cast<std::size_t>(P) * w.size());
    for (std::int64_t gi = 0; gi < G; ++gi) {
      for (std::int64_t p = 0; p < P; ++p) {
        for (std::int64_t o = 0; o < OCg; ++o) {
          const std::size_t from = static_cast<std::size_t>((gi * OCg + o) * taps);
          std::int8_t* to = packed.data() + static_cast<std::size_t>(((gi * P + p) * OCg + o) * taps);
          for (std::int64_t t = 0; t < taps; ++t) to[t] = static_cast<std::int8_t>(parts[static_cast<std::size_t>(p)][from + static_cast<std::size_t>(t)]);
        }
      }
    }
    return out;
  }

  // The f32 path is exact when every partial sum of (x - z_x)(w - z_w) is an integer of
  // magnitude <= 2^24: |x - z_x| <= max(z_x, 255 - z_x) (data as uint8) times the largest
  // sum|w - z_w| of a channel bounds them all, in any order of summation.
  bool f32_exact(std::int64_t max_sum) const {
    const std::int64_t xmax = std::max<std::int64_t>(zx_, 255 - zx_);
    return xmax * max_sum <= (std::int64_t{1} << 24);
  }

  // Where the automatic choice takes the f32 path (when exact): for the layers where
  // oneDNN's f32 kernel beat its int8 one with the weights in `parts` parts (measured on
  // AVX2, docs/sdk.md): dense convolutions with a window larger than 1x1 whose int8
  // weights split. With one part (VNNI, depthwise, |w - z_w| <= 64) int8 runs ~2x faster;
  // 1x1 and depthwise layers measured as fast or faster in int8 with two parts.
  static bool prefer_f32(const ConvShape& s, std::size_t parts) {
    return parts > 1 && s.groups == 1 && s.window.kh * s.window.kw > 1;
  }

  bool choose_f32(IntConvPath path, std::int64_t max_sum, std::size_t parts) const {
    if (path == IntConvPath::int8) return false;
    if (path == IntConvPath::f32) {
      if (!f32_exact(max_sum)) {
        throw Error("int8 convolution: the f32 path is not exact for these weights (max|x - z_x| * sum|w - z_w| > 2^24)",
                    dnnl_invalid_arguments);
      }
      return true;
    }
    return prefer_f32(s_, parts) && f32_exact(max_sum);
  }

  // The convolution for output rows [r0, r1) of one image (or the whole batch), shared by
  // every band with the same input rows and padding.
  void add_band(std::int64_t r0, std::int64_t r1, bool whole, const dnnl::memory::desc& user_md,
                const detail::PackedWeights& packed) {
    const auto& win = s_.window;
    const ConvShape::Band rows = s_.band(r0, r1);
    detail::IntBand b;
    b.rows = rows;
    for (std::size_t i = 0; i < bands_.size(); ++i) {
      if (bands_[i].rows.same_geometry(rows)) {
        band_of_.push_back(i);
        return;
      }
    }
    whole_ = whole;
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const std::int64_t N = whole ? s_.batch : 1, P = static_cast<std::int64_t>(parts_);
    const dt src_type = f32_ ? dt::f32 : dt::u8, acc_type = f32_ ? dt::f32 : dt::s32;
    b.src_md = dnnl::memory::desc({N, s_.in_channels, rows.in_rows, s_.in_w}, src_type, tag::nhwc);
    b.dst_md = dnnl::memory::desc({N, P * s_.out_channels, rows.out_rows, s_.out_w()}, acc_type, tag::nhwc);
    const dnnl::memory::desc w_any(user_md.get_dims(), f32_ ? dt::f32 : dt::s8, tag::any);
    dnnl::primitive_attr attr;
    if (zx_ != 0 && !f32_) attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
    // Bands run concurrently on several threads: each call brings its own scratchpad
    // (oneDNN's library-managed one may be shared between threads; its f32 kernels use it).
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::convolution_forward::primitive_desc pd(
        engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, b.src_md, w_any, b.dst_md,
        {win.sh, win.sw}, {win.dh - 1, win.dw - 1}, {rows.pad_t, win.pl}, {rows.pad_b, win.pr}, attr);
    // oneDNN 3.2's jit_int8_1x1 kernel for AVX512_CORE without VNNI returns wrong sums for
    // exactly 5 output pixels and 128 or more output channels (measured: every other count
    // from 1 to 29 is right): take the next implementation there.
    while (N * rows.out_rows * s_.out_w() == 5 && std::string(pd.impl_info_str()) == "jit_int8_1x1:avx512_core" &&
           pd.next_impl()) {
    }
    b.prim = dnnl::convolution_forward(pd);
    b.scratch_md = pd.scratchpad_desc();
    b.impl = std::string(pd.impl_info_str()) + (f32_ ? " (f32 path)" : " (int8 path)");
    for (const auto& o : bands_) {
      if (o.weights->get_desc() == pd.weights_desc()) b.weights = o.weights;
    }
    if (!b.weights) {
      b.weights = std::make_shared<dnnl::memory>(pd.weights_desc(), engine());
      void* from = f32_ ? static_cast<void*>(const_cast<float*>(packed.f32.data()))
                        : static_cast<void*>(const_cast<std::int8_t*>(packed.s8.data()));
      dnnl::memory user(user_md, engine(), from);
      dnnl::stream stream(engine());
      dnnl::reorder(user, *b.weights).execute(stream, user, *b.weights);
      stream.wait();
    }
    band_of_.push_back(bands_.size());
    bands_.push_back(std::move(b));
  }

  // One convolution into acc (`rows` rows of acc_width()), parts gathered when grouped.
  void execute(Stream& stream, const detail::IntBand& b, const std::uint8_t* src, std::int32_t* acc, std::size_t rows,
               std::vector<std::int32_t>& tmp) const {
    if (f32_) {
      execute_f32(stream, b, src, acc, rows);
      return;
    }
    std::int32_t* dst = acc;
    if (gather_) {
      tmp.resize(rows * parts_ * static_cast<std::size_t>(s_.out_channels));
      dst = tmp.data();
    }
    guard("int8 convolution", [&] {
      const dnnl::memory s = thread_memory(kSrcMemory, b.src_md, src);
      const dnnl::memory d = thread_memory(kDstMemory, b.dst_md, dst);
      const dnnl::memory scratch =
          thread_memory(kScratchMemory, b.scratch_md, thread_scratchpad(b.scratch_md.get_size()));
      std::int32_t zp = zx_;
      dnnl::memory z;
      if (zx_ != 0) {
        static const dnnl::memory::desc z_md({1}, dnnl::memory::data_type::s32, dnnl::memory::format_tag::x);
        z = thread_memory(kZeroPointMemory, z_md, &zp);
      }
      onednn::execute(b.prim, stream.get(),
                      {{DNNL_ARG_SRC, &s},
                       {DNNL_ARG_WEIGHTS, b.weights.get()},
                       {DNNL_ARG_DST, &d},
                       {DNNL_ARG_SCRATCHPAD, &scratch},
                       {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zx_ != 0 ? &z : nullptr}});
      stream.get().wait();
    });
    if (gather_) sum_parts(tmp.data(), acc, rows);
  }

  // The f32 path: x - z_x as float, oneDNN's f32 convolution into acc's memory, and the
  // (exact integer) floats converted to int32 in place.
  void execute_f32(Stream& stream, const detail::IntBand& b, const std::uint8_t* src, std::int32_t* acc,
                   std::size_t rows) const {
    thread_local std::vector<float> x;
    const std::size_t n = static_cast<std::size_t>(b.src_md.get_size() / sizeof(float));
    x.resize(n);
    detail::centre_u8(src, zx_, x.data(), n);
    const std::size_t m = rows * static_cast<std::size_t>(s_.out_channels);
    guard("int8 convolution (f32 path)", [&] {
      const dnnl::memory s = thread_memory(kSrcMemory, b.src_md, x.data());
      const dnnl::memory d = thread_memory(kDstMemory, b.dst_md, acc);
      const dnnl::memory scratch =
          thread_memory(kScratchMemory, b.scratch_md, thread_scratchpad(b.scratch_md.get_size()));
      onednn::execute(b.prim, stream.get(),
                      {{DNNL_ARG_SRC, &s}, {DNNL_ARG_WEIGHTS, b.weights.get()}, {DNNL_ARG_DST, &d}, {DNNL_ARG_SCRATCHPAD, &scratch}});
      stream.get().wait();
    });
    detail::floats_to_int32(acc, m);
  }

  // tmp: rows x (G x P x OCg), acc: rows x OC with the P parts summed.
  void sum_parts(const std::int32_t* tmp, std::int32_t* acc, std::size_t rows) const {
    const std::size_t G = static_cast<std::size_t>(s_.groups), OCg = static_cast<std::size_t>(s_.out_per_group());
    const std::size_t P = parts_, OC = G * OCg;
    for (std::size_t r = 0; r < rows; ++r) {
      const std::int32_t* in = tmp + r * P * OC;
      std::int32_t* out = acc + r * OC;
      for (std::size_t gi = 0; gi < G; ++gi) {
        for (std::size_t o = 0; o < OCg; ++o) {
          std::int32_t sum = 0;
          for (std::size_t p = 0; p < P; ++p) sum += in[(gi * P + p) * OCg + o];
          out[gi * OCg + o] = sum;
        }
      }
    }
  }

  ConvShape s_;
  int threads_ = 1;
  bool signed_data_ = false;
  std::int32_t zx_ = 0;
  std::size_t parts_ = 1;
  bool gather_ = false;
  bool whole_ = false;
  bool f32_ = false;
  std::int64_t band_rows_ = 0;
  std::vector<detail::IntBand> bands_;  // distinct convolutions
  std::vector<std::size_t> band_of_;    // band index -> bands_ entry
  std::vector<std::int64_t> weight_sums_;  // per output channel
};

// The work of an int8 layer in dense multiply-accumulates, for threads_for(work, threads,
// kSmallBandedLayer) (a backend's choice of threads for its IntConvRequantize): a depthwise
// one counts each of its multiply-accumulates 8 times, as oneDNN runs them about 8x slower
// (57-74 against 260-870 GFLOP/s, sdk/benchmarks/bench_onednn.py). Then MobileNetV2's depthwise
// layers of 0.25-1M multiply-accumulates (14x14x384, 7x7x960, ...) take both threads, which
// took MobileNetV2 QDQ at 2 threads from 1.38 to 1.31 ms on ethosn (ONNX Runtime 1.03) and from
// 1.79 to 1.60 ms when the VM's second CPU is slow (ONNX Runtime 1.53).
constexpr double kDepthwiseWork = 8;

inline double banded_work(const ConvShape& s) { return s.depthwise() ? kDepthwiseWork * s.macs() : s.macs(); }

// IntConv + ChannelRequantizer: uint8/int8 NHWC outputs, bit-exact with the core's
// qnn.conv2d -> nn.bias_add -> qnn.requantize (bias and fused relu/clip in the requantizer).
class IntConvRequantize {
 public:
  // band_rows: 0 picks (bands of about 256 KiB of accumulators, at least 8 rows, when the
  // layer's exceed 512 KiB, else the whole layer at once), > 0 forces that band height, < 0 the whole layer.
  IntConvRequantize(const IntConvSpec& spec, quant::ChannelRequantizer requantizer, std::int32_t out_dtype,
                    int threads, std::int64_t band_rows = 0)
      : conv_(centred_in_bias(spec), whole_threads(spec, threads, band_rows), pick_band_rows(spec, threads, band_rows)),
        rq_(std::move(requantizer)),
        out_dtype_(out_dtype) {
    if (out_dtype != ACCEL_UINT8 && out_dtype != ACCEL_INT8) {
      throw Error("quantized convolution: the output must be uint8 or int8", dnnl_invalid_arguments);
    }
    if (rq_.channels() != static_cast<std::size_t>(spec.shape.out_channels)) {
      throw Error("quantized convolution: the requantizer has " + std::to_string(rq_.channels()) + " channels, not " +
                      std::to_string(spec.shape.out_channels),
                  dnnl_invalid_arguments);
    }
    if (folds_zero_point(spec)) rq_.add_to_bias(zero_point_terms(spec, conv_.weight_sums()));
  }

  const IntConv& conv() const { return conv_; }
  bool banded() const { return conv_.band_rows() < conv_.shape().out_h() || conv_.band_count() > 1; }

  // data: batch x in_h x in_w x in_channels; out: batch x out_h x out_w x out_channels (out dtype).
  void run(const void* data, void* out) const {
    const std::size_t oc = static_cast<std::size_t>(conv_.shape().out_channels);
    if (!banded()) {
      // the calling thread's accumulators, kept from call to call: a fresh vector a call cost a
      // zero fill and, with glibc, a heap consolidation when it went back to the top chunk
      // (the digits model's ethosn partition, three 8x8 convolutions and a pool: 10.2 -> 9.4 us a run)
      // (a pointer for the workers below: a thread_local named in their lambda would be theirs)
      thread_local std::vector<std::int32_t> mine;
      if (mine.size() < conv_.rows() * conv_.acc_width()) mine.resize(conv_.rows() * conv_.acc_width());
      std::int32_t* const acc = mine.data();
      conv_.run(data, acc);
      const std::size_t rows = conv_.rows();
      const std::size_t chunks = std::min<std::size_t>(static_cast<std::size_t>(conv_.threads()),
                                                       std::max<std::size_t>(1, rows * oc / 16384));
      auto part = [&](std::size_t i) {
        const std::size_t r0 = rows * i / chunks, r1 = rows * (i + 1) / chunks;
        requantize(conv_.block(acc, r0, r1 - r0), out, r0 * oc);
      };
      parallel(chunks, part);
      return;
    }
    ThreadScope scope(conv_.threads());
    std::vector<std::uint8_t> shifted;
    const std::uint8_t* src = conv_.unsigned_data(data, shifted);
    conv_.for_each_band([&](std::int64_t n, std::size_t band, std::vector<std::int32_t>& tmp) {
      thread_local std::vector<std::int32_t> acc;
      const std::size_t rows = conv_.band_size(band);
      acc.resize(rows * conv_.acc_width());
      conv_.run_band(src, n, band, acc.data(), tmp);
      requantize(conv_.block(acc.data(), 0, rows), out, conv_.band_offset(n, band) * oc);
    });
  }

 private:
  // The threads of a layer that runs whole (one output row a image, or band_rows < 0): oneDNN
  // shares it over an OpenMP team, whose wake-up costs more than it saves below kSmallWork
  // multiply-accumulates (MobileNetV2's dense layer, 1280 x 1000: 17 us on one thread, 29 on two).
  static int whole_threads(const IntConvSpec& spec, int threads, std::int64_t band_rows) {
    spec.shape.validate();
    const ConvShape& s = spec.shape;
    if (band_rows == 0 && s.out_h() >= 2) return threads;
    return threads_for(s.macs(), resolve_threads(threads));
  }

  static std::int64_t pick_band_rows(const IntConvSpec& spec, int threads, std::int64_t band_rows) {
    if (band_rows != 0) return band_rows < 0 ? 0 : band_rows;
    spec.shape.validate();
    const std::int64_t oh = spec.shape.out_h(), ow = spec.shape.out_w();
    // two parts when the weights of a dense layer split (an estimate: the exact count is
    // IntConv's); depthwise weights never split
    const bool split = !int8_exact() && !spec.shape.depthwise();
    const std::int64_t row_bytes = ow * spec.shape.out_channels * 4 * (split ? 2 : 1);
    const std::int64_t t = resolve_threads(threads);
    if (oh < 2) return 0;
    if (row_bytes * oh * spec.shape.batch <= (512 << 10)) {
      // on one thread, the whole layer at once; on several, bands too (two a thread), which
      // for_each_band hands out as the threads come, where oneDNN's own split of the layer
      // waits at a barrier for its slowest thread
      return t <= 1 ? 0 : (oh + 2 * t - 1) / (2 * t);
    }
    // about 256 KiB of accumulators per band (half a 512 KiB L2), at least 8 rows: smaller
    // bands cost more in oneDNN calls than they save (measured on MobileNetV2's 1x1 and
    // depthwise layers, docs/sdk.md), and two bands per thread for balance where possible
    std::int64_t rows = std::max<std::int64_t>(8, (256 << 10) / row_bytes);
    const std::int64_t want = 2 * t;
    if (oh / rows < want) rows = std::max<std::int64_t>(2, oh / want);
    return std::min(rows, oh);
  }

  // A 1x1 convolution without padding (a dense layer too) reads no padding, so its data's zero
  // point z_x contributes -z_x * sum_k (w_ck - z_w) to every output of channel c: the requantizer
  // adds that to the bias (int32 wrap-around, as the bias adds) and oneDNN convolves the data as
  // it is, without a run-time source zero point. Its kernels then skip their compensation pass
  // (MobileNetV2's 112x112 16 -> 96 expansion: 385 against 148 us a run when not in bands) and,
  // with VNNI, stay exact at any size in one weight part.
  static bool folds_zero_point(const IntConvSpec& spec) {
    const geometry::Window2d& w = spec.shape.window;
    return w.kh == 1 && w.kw == 1 && w.pt == 0 && w.pl == 0 && w.pb == 0 && w.pr == 0 && spec.path != IntConvPath::f32 &&
           spec.data_zero_point != no_zero_point(spec);
  }

  // The data zero point oneDNN convolves without one at: 0 on the uint8 scale IntConv computes on.
  static std::int32_t no_zero_point(const IntConvSpec& spec) { return spec.data_dtype == ACCEL_INT8 ? -128 : 0; }

  // The spec IntConv computes: the data's zero point taken out when folds_zero_point.
  static IntConvSpec centred_in_bias(const IntConvSpec& spec) {
    IntConvSpec s = spec;
    if (folds_zero_point(spec)) s.data_zero_point = no_zero_point(spec);
    return s;
  }

  // -z_x * sum_k (w_ck - z_w) per output channel c (IntConv's weight sums), wrapped to int32;
  // z_x on the uint8 scale IntConv computes on (int8 data is x + 128 there).
  static std::vector<std::int32_t> zero_point_terms(const IntConvSpec& spec, const std::vector<std::int64_t>& sums) {
    const std::int64_t zx = spec.data_zero_point - no_zero_point(spec);
    std::vector<std::int32_t> terms(sums.size());
    for (std::size_t o = 0; o < sums.size(); ++o) {
      terms[o] = static_cast<std::int32_t>(static_cast<std::uint32_t>(-zx * sums[o]));
    }
    return terms;
  }

  void requantize(const quant::AccBlock& b, void* out, std::size_t at) const {
    const std::size_t oc = static_cast<std::size_t>(conv_.shape().out_channels);
    if (out_dtype_ == ACCEL_UINT8) {
      rq_.run(b, static_cast<std::uint8_t*>(out) + at, oc, quant::best_requantize_isa());
    } else {
      rq_.run(b, static_cast<std::int8_t*>(out) + at, oc, quant::best_requantize_isa());
    }
  }

  IntConv conv_;
  quant::ChannelRequantizer rq_;
  std::int32_t out_dtype_;
};

}  // namespace onednn
}  // namespace accel_sdk

#endif  // ACCEL_SDK_INT_OPS_HPP

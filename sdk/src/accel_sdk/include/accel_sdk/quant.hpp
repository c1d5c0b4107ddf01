// accel_sdk/quant.hpp: the fixed-point requantization of accel.quant, bit for bit.
//
// accel/quant.py is the definition; this is the same arithmetic in C++ so a
// backend runtime matches the reference kernels exactly:
//
//   quantize_multiplier(M):  M = q * 2^e (frexp, q in [0.5, 1));
//                            m = floor(q * 2^31 + 0.5), m == 2^31 -> (2^30, e + 1);
//                            shift = e; shift < -31 -> (0, 0); shift > 31 refused.
//   mbqm(x, m, shift):       p = sat32(x) * m (int64, exact), n = 31 - shift;
//                            sat32((p + 2^(n-1) - [p < 0]) >> n) when n > 0, sat32(p) when n = 0
//                            (one rounding, ties away from zero).
//   requantize(x):           sat_out(z_out + mbqm(sat32(x - z_in), m, shift)),
//                            (m, shift) = quantize_multiplier(double(s_in) / double(s_out))
//                            with s_in, s_out the float32 scales.
//   dequantize(q):           float32(q - z) * s, s the float32 scale (8- and 16-bit q: the
//                            difference is exact in float32, the product rounded once).
#ifndef ACCEL_SDK_QUANT_HPP
#define ACCEL_SDK_QUANT_HPP

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace accel_sdk {
namespace quant {

constexpr std::int64_t kInt32Min = std::numeric_limits<std::int32_t>::min();
constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();

inline std::int32_t sat32(std::int64_t v) {
  return static_cast<std::int32_t>(v < kInt32Min ? kInt32Min : (v > kInt32Max ? kInt32Max : v));
}

// A real multiplier M ~= m * 2^(shift - 31), m in [2^30, 2^31) (or 0), shift in [-31, 31].
struct Multiplier {
  std::int32_t m = 0;
  std::int32_t shift = 0;
};

// Encodes real > 0 exactly as accel.quant.quantize_multiplier does; throws
// std::invalid_argument for a non-finite, non-positive or too large (>= ~2^31) multiplier.
inline Multiplier quantize_multiplier(double real) {
  if (!std::isfinite(real) || !(real > 0.0)) {
    throw std::invalid_argument("a real multiplier must be finite and > 0, got " + std::to_string(real));
  }
  int e = 0;
  const double q = std::frexp(real, &e);
  std::int64_t m = static_cast<std::int64_t>(std::floor(q * 2147483648.0 + 0.5));
  if (m == (std::int64_t{1} << 31)) {
    m = std::int64_t{1} << 30;
    e += 1;
  }
  if (e > 31) throw std::invalid_argument("real multiplier " + std::to_string(real) + " is too large (must be < 2^31)");
  if (e < -31) return Multiplier{0, 0};
  return Multiplier{static_cast<std::int32_t>(m), e};
}

// True when (m, shift) is a multiplier mbqm accepts.
inline bool valid_multiplier(std::int64_t m, std::int64_t shift) {
  return m >= 0 && m <= kInt32Max && shift >= -31 && shift <= 31;
}

// True when (m, shift) is what quantize_multiplier (here and accel.quant's) makes of some real
// multiplier: m in [2^30, 2^31) with shift in [-31, 31], or (0, 0) for one below 2^-32. A blob
// whose serializer encoded its multipliers holds only these; anything else was written by hand.
inline bool canonical_multiplier(std::int64_t m, std::int64_t shift) {
  if (m == 0) return shift == 0;
  return m >= (std::int64_t{1} << 30) && valid_multiplier(m, shift);
}

// sum / n rounded half away from zero, as accel's reference divides integer averages and means
// (n > 0; |sum| < 2^62).
inline std::int64_t div_round_away(std::int64_t sum, std::int64_t n) {
  const std::int64_t mag = (2 * (sum < 0 ? -sum : sum) + n) / (2 * n);
  return sum < 0 ? -mag : mag;
}

// x * m * 2^(shift - 31) rounded once (ties away from zero), saturated to int32.
// Requires valid_multiplier(m, shift).
inline std::int32_t mbqm(std::int64_t x, std::int32_t m, std::int32_t shift) {
  const std::int64_t p = static_cast<std::int64_t>(sat32(x)) * m;  // |p| < 2^62
  const int n = 31 - shift;                                        // 0 .. 62
  if (n == 0) return sat32(p);
  // >> of a negative int64 is an arithmetic shift (guaranteed from C++20, and by every supported compiler before).
  const std::int64_t half = std::int64_t{1} << (n - 1);
  return sat32((p + half - (p < 0 ? 1 : 0)) >> n);
}

// Whether a table of 256 int32 (the result for each byte of an 8-bit input, as a widening
// requantize or cast makes it) is base + step * v of the byte's value v (int8 when is_signed):
// then a sum of n widened values is n * base + step * (the sum of the values). Sets base, step.
inline bool affine_byte_table(const std::int32_t* table, bool is_signed, std::int64_t& base, std::int64_t& step) {
  base = table[0];
  step = static_cast<std::int64_t>(table[1]) - table[0];  // byte 1 is the value 1 either way
  for (int b = 0; b < 256; ++b) {
    const std::int64_t v = is_signed ? static_cast<std::int8_t>(b) : b;
    if (table[b] != base + step * v) return false;
  }
  return true;
}

// requantize for one per-tensor parameter set: input zero point, multiplier,
// output zero point and the output dtype's range [lo, hi].
class Requantizer {
 public:
  Requantizer() = default;

  // From the float32 scales (as stored in accel.ir.QuantParams) and zero points.
  Requantizer(float in_scale, std::int64_t in_zero_point, float out_scale, std::int64_t out_zero_point,
              std::int64_t lo, std::int64_t hi)
      : Requantizer(quantize_multiplier(static_cast<double>(in_scale) / static_cast<double>(out_scale)), in_zero_point,
                    out_zero_point, lo, hi) {}

  Requantizer(Multiplier mult, std::int64_t in_zero_point, std::int64_t out_zero_point, std::int64_t lo,
              std::int64_t hi)
      : mult_(mult), z_in_(in_zero_point), z_out_(out_zero_point), lo_(lo), hi_(hi) {
    if (!valid_multiplier(mult.m, mult.shift)) throw std::invalid_argument("invalid fixed-point multiplier");
    if (lo > hi || lo < kInt32Min || hi > kInt32Max) throw std::invalid_argument("invalid output range");
    if (z_in_ < kInt32Min || z_in_ > kInt32Max || z_out_ < lo || z_out_ > hi) {
      throw std::invalid_argument("zero point outside the dtype's range");
    }
  }

  const Multiplier& multiplier() const { return mult_; }

  std::int64_t operator()(std::int64_t x) const {
    const std::int64_t y = static_cast<std::int64_t>(mbqm(sat32(x - z_in_), mult_.m, mult_.shift)) + z_out_;
    return y < lo_ ? lo_ : (y > hi_ ? hi_ : y);
  }

  // out[i] = requantize(in[i]) for n elements; Out must hold [lo, hi].
  template <class In, class Out>
  void apply(const In* in, Out* out, std::size_t n) const {
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<Out>((*this)(static_cast<std::int64_t>(in[i])));
  }

 private:
  Multiplier mult_;
  std::int64_t z_in_ = 0;
  std::int64_t z_out_ = 0;
  std::int64_t lo_ = 0;
  std::int64_t hi_ = 0;
};

// out[i] = dequantize(in[i]) for n elements of 8- or 16-bit data (accel.quant.Dequantizer).
template <class In>
void dequantize(const In* in, float* out, std::size_t n, float scale, std::int32_t zero_point) {
  static_assert(sizeof(In) <= 2, "the difference q - z is exact in float32 for data of at most 16 bits");
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<std::int32_t>(in[i]) - zero_point) * scale;
}

}  // namespace quant
}  // namespace accel_sdk

#endif  // ACCEL_SDK_QUANT_HPP

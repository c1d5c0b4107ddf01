// accel_sdk/requantize.hpp: int32 accumulators -> uint8/int8, block by block, bit-exact.
//
// ChannelRequantizer applies accel.quant's requantization (quant.hpp, docs/quantization.md)
// to a block of rows x channels of int32 accumulators, as a quantized convolution or
// dense layer leaves them (NHWC: one row per output pixel), with per-tensor or
// per-channel multipliers:
//
//   t      = wrap32(acc_0 + ... + acc_{parts-1} + bias[c])   (nn.bias_add's int32 wrap-around)
//   out    = clamp(z_out + mbqm(sat32(t - z_in), m[c], shift[c]), lo, hi)
//
// acc_p is part p of a split accumulation (accel_sdk/int_ops.hpp splits weights on CPUs
// without VNNI); [lo, hi] is the output dtype's range, narrowed by a fused relu or clip.
// One call handles a whole block; the kernels are chosen at run time (AVX-512 F/DQ/BW,
// AVX2, portable C++), the file needs no special compiler flags, and every kernel gives
// the same bits as quant::mbqm (tested on ties, on +-2^31, at every shift). With AVX-512
// and z_in = 0 (a convolution's or dense layer's accumulators) a block runs in float32,
// 16 channels a step, and the few lanes float32 cannot settle (within 2^-12 of a tie)
// by the definition: 0.14 ns a value against the integer kernels' 0.17 (run_avx512_float).
//
// AddTable: qnn.add of two 8-bit tensors of one shape (accel.quant.quantized_add), the
// definition tabulated once over every pair of bytes; run() evaluates a float64 formula
// where it reproduces all 65,536 entries (checked at create, per kernel), else looks the
// table up 16 (AVX-512) or 8 (AVX2) elements a gather.
//
// Quantizer: float32 -> uint8/int8 per tensor (accel.quant.Quantizer), 16 (AVX-512) or 8
// (AVX2) elements a step.
#ifndef ACCEL_SDK_REQUANTIZE_HPP
#define ACCEL_SDK_REQUANTIZE_HPP

#include <accel_sdk/quant.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ACCEL_SDK_REQUANTIZE_X86 1
#include <immintrin.h>
#endif

namespace accel_sdk {
namespace quant {

// Which kernel runs a block. best_requantize_isa() is the fastest this CPU has; a test may
// ask for a lower one (a higher one than the CPU has is lowered to what it has).
enum class RequantizeIsa { portable = 0, avx2 = 1, avx512 = 2 };

inline RequantizeIsa best_requantize_isa() {
#ifdef ACCEL_SDK_REQUANTIZE_X86
  static const RequantizeIsa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw")) {
      return RequantizeIsa::avx512;
    }
    if (__builtin_cpu_supports("avx2")) return RequantizeIsa::avx2;
    return RequantizeIsa::portable;
  }();
  return best;
#else
  return RequantizeIsa::portable;
#endif
}

inline const char* requantize_isa_name(RequantizeIsa isa) {
  switch (isa) {
    case RequantizeIsa::avx512: return "avx512";
    case RequantizeIsa::avx2: return "avx2";
    default: return "portable";
  }
}

// Where a block of accumulators is: element (row r, channel c, part p) at
// data[r * row_stride + p * part_stride + c] (strides in int32 elements).
struct AccBlock {
  const std::int32_t* data = nullptr;
  std::size_t rows = 0;
  std::size_t row_stride = 0;
  std::size_t parts = 1;
  std::size_t part_stride = 0;
};

namespace detail {

// Per-channel constants, in the form the kernels load: n = 31 - shift, the rounding
// half 2^(n-1) (0 when n = 0) and whether negative products round down by one more.
struct ChannelConsts {
  std::vector<std::int32_t> m;
  std::vector<std::int64_t> half;
  std::vector<std::int64_t> n;
  std::vector<std::int64_t> neg_fix;  // -1 (n > 0) or 0 (n = 0): added when the product is negative
  std::vector<std::int32_t> bias;     // all zero when there is no bias
};

constexpr std::size_t kFastStride = 32;  // int64 constants per 8 channels of run_avx2_fast

struct Scalars {
  std::int32_t z_in = 0;
  std::int32_t z_out = 0;
  std::int64_t lo_rel = 0;  // lo - z_out
  std::int64_t hi_rel = 0;  // hi - z_out
};

inline std::int32_t wrap_add(std::int32_t a, std::int32_t b) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(a) + static_cast<std::uint32_t>(b));
}

// One element, the definition as written (quant::mbqm does the rounding).
inline std::int64_t requantize_one(std::int32_t t, std::size_t c, const ChannelConsts& k, const Scalars& s,
                                   std::int32_t shift) {
  const std::int64_t v = static_cast<std::int64_t>(mbqm(static_cast<std::int64_t>(t) - s.z_in, k.m[c], shift));
  return std::min(std::max(v, s.lo_rel), s.hi_rel) + s.z_out;
}

template <class Out>
void run_portable(const AccBlock& a, std::size_t c0, std::size_t c1, const ChannelConsts& k,
                  const std::vector<std::int32_t>& shifts, const Scalars& s, Out* out, std::size_t out_stride) {
  for (std::size_t r = 0; r < a.rows; ++r) {
    const std::int32_t* row = a.data + r * a.row_stride;
    Out* o = out + r * out_stride;
    for (std::size_t c = c0; c < c1; ++c) {
      std::int32_t t = k.bias[c];
      for (std::size_t p = 0; p < a.parts; ++p) t = wrap_add(t, row[p * a.part_stride + c]);
      o[c] = static_cast<Out>(requantize_one(t, c, k, s, shifts[c]));
    }
  }
}

#ifdef ACCEL_SDK_REQUANTIZE_X86

// Saturating t - z_in: overflow when t and z_in differ in sign and the result's sign is not t's.
__attribute__((target("avx2"))) inline __m256i avx2_sub_sat(__m256i t, __m256i z_in) {
  const __m256i r = _mm256_sub_epi32(t, z_in);
  const __m256i ovf = _mm256_and_si256(_mm256_xor_si256(t, z_in), _mm256_xor_si256(t, r));
  const __m256i sat = _mm256_xor_si256(_mm256_srai_epi32(t, 31), _mm256_set1_epi32(0x7fffffff));
  return _mm256_blendv_epi8(r, sat, _mm256_srai_epi32(ovf, 31));
}

// t = wrap(sum of parts + bias) - z_in saturated, for 8 channels from c.
__attribute__((target("avx2"))) inline __m256i avx2_sum(const std::int32_t* row, const AccBlock& a, std::size_t c,
                                                        const ChannelConsts& k, __m256i z_in, bool has_z_in) {
  __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.bias.data() + c));
  for (std::size_t p = 0; p < a.parts; ++p) {
    t = _mm256_add_epi32(t, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + p * a.part_stride + c)));
  }
  if (has_z_in) t = avx2_sub_sat(t, z_in);
  return t;
}

// 4 int64 products (low 32 bits of each lane times m) rounded, shifted and clamped.
__attribute__((target("avx2"))) inline __m256i avx2_round4(__m256i x, __m256i m, __m256i half, __m256i n,
                                                           __m256i neg_fix, __m256i lo, __m256i hi) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i p = _mm256_mul_epi32(x, m);
  const __m256i p_neg = _mm256_cmpgt_epi64(zero, p);
  const __m256i q = _mm256_add_epi64(_mm256_add_epi64(p, half), _mm256_and_si256(p_neg, neg_fix));
  const __m256i q_neg = _mm256_cmpgt_epi64(zero, q);
  // arithmetic right shift from a logical one: ~(~q >> n) for negative q
  __m256i r = _mm256_xor_si256(_mm256_srlv_epi64(_mm256_xor_si256(q, q_neg), n), q_neg);
  r = _mm256_blendv_epi8(r, hi, _mm256_cmpgt_epi64(r, hi));
  r = _mm256_blendv_epi8(r, lo, _mm256_cmpgt_epi64(lo, r));
  return r;
}

template <class Out>
__attribute__((target("avx2"))) void run_avx2(const AccBlock& a, std::size_t c1, const ChannelConsts& k,
                                              const Scalars& s, bool per_channel, Out* out, std::size_t out_stride) {
  const __m256i z_in = _mm256_set1_epi32(s.z_in);
  const __m256i z_out = _mm256_set1_epi32(s.z_out);
  const __m256i lo = _mm256_set1_epi64x(s.lo_rel);
  const __m256i hi = _mm256_set1_epi64x(s.hi_rel);
  const bool has_z_in = s.z_in != 0;
  // the first byte of every int32, per 128-bit lane
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                                        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  // per-tensor constants, loaded once (per-channel ones are loaded per block below)
  __m256i m_e = _mm256_set1_epi32(k.m[0]), m_o = m_e;
  __m256i h_e = _mm256_set1_epi64x(k.half[0]), h_o = h_e;
  __m256i n_e = _mm256_set1_epi64x(k.n[0]), n_o = n_e;
  __m256i f_e = _mm256_set1_epi64x(k.neg_fix[0]), f_o = f_e;
  for (std::size_t r = 0; r < a.rows; ++r) {
    const std::int32_t* row = a.data + r * a.row_stride;
    Out* o = out + r * out_stride;
    for (std::size_t c = 0; c + 8 <= c1; c += 8) {
      if (per_channel) {
        // even channels c, c+2, .. in the 64-bit lanes of *_e, odd ones in *_o (kept as laid out: [c..c+8) x 2)
        const __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.m.data() + c));
        m_e = m;
        m_o = _mm256_srli_epi64(m, 32);
        h_e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.half.data() + 2 * c));
        h_o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.half.data() + 2 * c + 4));
        n_e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.n.data() + 2 * c));
        n_o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.n.data() + 2 * c + 4));
        f_e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.neg_fix.data() + 2 * c));
        f_o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.neg_fix.data() + 2 * c + 4));
      }
      const __m256i t = avx2_sum(row, a, c, k, z_in, has_z_in);
      const __m256i re = avx2_round4(t, m_e, h_e, n_e, f_e, lo, hi);
      const __m256i ro = avx2_round4(_mm256_srli_epi64(t, 32), m_o, h_o, n_o, f_o, lo, hi);
      __m256i v = _mm256_blend_epi32(re, _mm256_slli_epi64(ro, 32), 0xAA);
      v = _mm256_add_epi32(v, z_out);
      const __m256i b = _mm256_shuffle_epi8(v, pick);
      const __m128i packed = _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(o + c), packed);
    }
  }
}

// The fast kernel. For shift <= 0 (n = 31 - shift >= 31, a multiplier below 1, as a
// convolution's requantization has) the result fits in int32 and is
// sign(x) * ((|x| * 2m + 2^n) >> (n + 1)), which rounds ties away from zero: |x| <= 2^31 and
// 2m < 2^32 are unsigned 32-bit operands of _mm256_mul_epu32 and the biased product stays
// below 2^64, so a logical shift is exact. Odd channels shift by n + 1 - 32 and so land in
// the high halves of their 64-bit lanes. A channel with shift s > 0 and m = 0 or m >= 2^16
// (Up) runs as shift 0 on |x| * 2^s, the same rational number, after capping |x| at
// 2^(31 - s): a capped value gives at least m >= 2^16 in magnitude, saturated by the packs
// exactly as the true, larger, result is.
// Constants per 8 channels (kFastStride int64): 2m of the even channels (low halves), 2m of
// the odd ones, 2^n even, odd, the shift counts n + 1 (even) and n - 31 (odd), then the caps
// and the s as 8 uint32 each, in channel order.
// The block's layout is passed by value: the uint8 stores may alias anything, and values
// held in registers need not be reloaded after each of them.
struct FastLayout {
  const std::int32_t* bias;
  std::size_t parts;
  std::size_t part_stride;
};

template <bool PerChannel, bool Up>
__attribute__((target("avx2"))) inline __m256i avx2_fast8(const std::int32_t* row, FastLayout l, std::size_t c,
                                                          const std::int64_t* f, __m256i z_in, bool has_z_in,
                                                          const __m256i* tensor) {
  __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(l.bias + c));
  for (std::size_t p = 0; p < l.parts; ++p) {
    t = _mm256_add_epi32(t, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + p * l.part_stride + c)));
  }
  if (has_z_in) t = avx2_sub_sat(t, z_in);
  __m256i m_e, m_o, h_e, h_o, n_e, n_o;
  if (PerChannel) {
    f += c / 8 * kFastStride;
    m_e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f));
    m_o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f + 4));
    h_e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f + 8));
    h_o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f + 12));
    n_e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f + 16));
    n_o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f + 20));
  } else {
    m_e = tensor[0], m_o = tensor[1], h_e = tensor[2], h_o = tensor[3], n_e = tensor[4], n_o = tensor[5];
  }
  __m256i ax = _mm256_abs_epi32(t);  // |-2^31| = 2^31 as unsigned
  if (Up) {  // shift s > 0: min(|x|, 2^(31-s)) * 2^s, then shift 0 (cap 2^31 and s = 0 elsewhere)
    const __m256i cap = PerChannel ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f + 24)) : tensor[6];
    const __m256i up = PerChannel ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f + 28)) : tensor[7];
    ax = _mm256_sllv_epi32(_mm256_min_epu32(ax, cap), up);
  }
  const __m256i re = _mm256_srlv_epi64(_mm256_add_epi64(_mm256_mul_epu32(ax, m_e), h_e), n_e);
  const __m256i ro = _mm256_srlv_epi64(_mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(ax, 32), m_o), h_o), n_o);
  return _mm256_sign_epi32(_mm256_blend_epi32(re, ro, 0xAA), t);  // t = 0 gives 0, as it should
}

// z_out + v clamped to [lo, hi] through saturating packs: int16 saturation and the 8-bit one
// keep every value outside the output range outside it, on the same side.
template <class Out>
__attribute__((target("avx2"))) inline __m256i avx2_pack8(__m256i a16, __m256i b16) {
  return std::is_signed<Out>::value ? _mm256_packs_epi16(a16, b16) : _mm256_packus_epi16(a16, b16);
}

template <class Out>
__attribute__((target("avx2"))) inline __m256i avx2_clamp8(__m256i v, __m256i lo, __m256i hi) {
  return std::is_signed<Out>::value ? _mm256_min_epi8(_mm256_max_epi8(v, lo), hi)
                                    : _mm256_min_epu8(_mm256_max_epu8(v, lo), hi);
}

template <class Out, bool PerChannel, bool Up>
__attribute__((target("avx2"))) void run_avx2_fast(const AccBlock& a, std::size_t c0, std::size_t c1,
                                                   const ChannelConsts& k, const std::int64_t* f, const Scalars& s,
                                                   Out* out, std::size_t out_stride) {
  const __m256i z_in = _mm256_set1_epi32(s.z_in);
  const bool has_z_in = s.z_in != 0;
  const __m256i z_out = _mm256_set1_epi16(static_cast<std::int16_t>(s.z_out));
  const auto lo8 = static_cast<char>(s.lo_rel + s.z_out), hi8 = static_cast<char>(s.hi_rel + s.z_out);
  const __m256i lo = _mm256_set1_epi8(lo8), hi = _mm256_set1_epi8(hi8);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256i tensor[8];
  for (int i = 0; i < 8; ++i) tensor[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f + 4 * i));
  const FastLayout l{k.bias.data(), a.parts, a.part_stride};
  const std::int32_t* const data = a.data;
  const std::size_t rows = a.rows, row_stride = a.row_stride;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int32_t* row = data + r * row_stride;
    Out* o = out + r * out_stride;
    std::size_t c = c0;  // c0: a multiple of 8
    for (; c + 32 <= c1; c += 32) {
      const __m256i v0 = avx2_fast8<PerChannel, Up>(row, l, c, f, z_in, has_z_in, tensor);
      const __m256i v1 = avx2_fast8<PerChannel, Up>(row, l, c + 8, f, z_in, has_z_in, tensor);
      const __m256i v2 = avx2_fast8<PerChannel, Up>(row, l, c + 16, f, z_in, has_z_in, tensor);
      const __m256i v3 = avx2_fast8<PerChannel, Up>(row, l, c + 24, f, z_in, has_z_in, tensor);
      const __m256i a16 = _mm256_adds_epi16(_mm256_packs_epi32(v0, v1), z_out);
      const __m256i b16 = _mm256_adds_epi16(_mm256_packs_epi32(v2, v3), z_out);
      const __m256i b = _mm256_permutevar8x32_epi32(avx2_pack8<Out>(a16, b16), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + c), avx2_clamp8<Out>(b, lo, hi));
    }
    for (; c + 8 <= c1; c += 8) {
      const __m256i v = avx2_fast8<PerChannel, Up>(row, l, c, f, z_in, has_z_in, tensor);
      const __m256i a16 = _mm256_adds_epi16(_mm256_packs_epi32(v, v), z_out);
      const __m256i b = avx2_clamp8<Out>(avx2_pack8<Out>(a16, a16), lo, hi);
      const __m128i packed = _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(o + c), packed);
    }
  }
}

// The float kernel (AVX-512F, DQ and BW; accumulators' zero point 0, as a convolution's
// have), 16 channels a step and four rows at a time:
//   y = fma(float(t), M, z_out)   (M = m * 2^(shift - 31) rounded to float32; round to nearest)
//   out = round(clamp(y, lo, hi)) (= clamp(round(y), lo, hi): lo and hi are integers)
// With u = 2^-24, float(t), M and the fma each round once, so |y - (t * M + z_out)| <=
// 3.01u |t * M| + u |z_out|, under 2^-13 wherever the result is not saturated (|t * M| <= 512,
// |z_out| <= 255). A lane whose y lies within 2^-12 of a tie (|y - round(y)| > 0.5 - 2^-12)
// is recomputed by the definition (requantize_one); every other lane rounds as the exact
// value does, ties away from zero or not (about one lane in 2,000 is recomputed). Where t * M
// is past the output range, y is past it too and clamps to the same bound. The constants
// are two loads per 16 channels, so rows run in order through the block.
struct FloatLayout {
  const std::int32_t* bias;
  const float* m;
  std::size_t parts;
  std::size_t part_stride;
};

constexpr int kNear = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// 16 outputs of a row from channel c as int32; bad: the lanes near a tie.
__attribute__((target("avx512f,avx512dq"))) inline __m512i float16(const std::int32_t* row, const FloatLayout& l,
                                                                  std::size_t c, __m512 z_out, __m512 lo, __m512 hi,
                                                                  __mmask16& bad) {
  __m512i t = _mm512_loadu_si512(l.bias + c);
  for (std::size_t p = 0; p < l.parts; ++p) t = _mm512_add_epi32(t, _mm512_loadu_si512(row + p * l.part_stride + c));
  __m512 y = _mm512_fmadd_round_ps(_mm512_cvt_roundepi32_ps(t, kNear), _mm512_loadu_ps(l.m + c), z_out, kNear);
  y = _mm512_min_ps(_mm512_max_ps(y, lo), hi);
  const __m512 frac = _mm512_reduce_ps(y, kNear);  // y - round(y), in [-0.5, 0.5]
  bad = _mm512_cmp_ps_mask(_mm512_abs_ps(frac), _mm512_set1_ps(0.5f - 1.f / 4096), _CMP_GT_OQ);
  return _mm512_cvt_roundps_epi32(y, kNear);
}

// The lanes of `bad` in channels [c, c + 16) of a row, by the definition.
template <class Out>
__attribute__((noinline)) void float16_fix(const std::int32_t* row, const AccBlock& a, std::size_t c, unsigned bad,
                                           const ChannelConsts& k, const std::vector<std::int32_t>& shifts,
                                           const Scalars& s, Out* o) {
  for (; bad != 0; bad &= bad - 1) {
    const std::size_t ch = c + static_cast<std::size_t>(__builtin_ctz(bad));
    std::int32_t t = k.bias[ch];
    for (std::size_t p = 0; p < a.parts; ++p) t = wrap_add(t, row[p * a.part_stride + ch]);
    o[ch] = static_cast<Out>(requantize_one(t, ch, k, s, shifts[ch]));
  }
}

template <class Out>
__attribute__((target("avx512f,avx512dq,avx512bw"))) void run_avx512_float(const AccBlock& a, std::size_t c1,
                                                                           const ChannelConsts& k, const float* m,
                                                                           const std::vector<std::int32_t>& shifts,
                                                                           const Scalars& s, Out* out,
                                                                           std::size_t out_stride) {
  constexpr bool is_signed = std::is_signed<Out>::value;
  const __m512 z_out = _mm512_set1_ps(static_cast<float>(s.z_out));
  const auto lo = static_cast<std::int32_t>(s.lo_rel + s.z_out), hi = static_cast<std::int32_t>(s.hi_rel + s.z_out);
  const __m512 lo_f = _mm512_set1_ps(static_cast<float>(lo)), hi_f = _mm512_set1_ps(static_cast<float>(hi));
  // after the packs, 128-bit lane j holds 4 bytes of each row; this puts row j's 16 in lane j
  const __m512i rows_order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const FloatLayout l{k.bias.data(), m, a.parts, a.part_stride};
  const std::size_t rs = a.row_stride;
  std::size_t r = 0;
  for (; r + 4 <= a.rows; r += 4) {
    const std::int32_t* row = a.data + r * rs;
    Out* o = out + r * out_stride;
    for (std::size_t c = 0; c + 16 <= c1; c += 16) {
      __mmask16 b0, b1, b2, b3;
      const __m512i v0 = float16(row, l, c, z_out, lo_f, hi_f, b0);
      const __m512i v1 = float16(row + rs, l, c, z_out, lo_f, hi_f, b1);
      const __m512i v2 = float16(row + 2 * rs, l, c, z_out, lo_f, hi_f, b2);
      const __m512i v3 = float16(row + 3 * rs, l, c, z_out, lo_f, hi_f, b3);
      const __m512i w01 = _mm512_packs_epi32(v0, v1), w23 = _mm512_packs_epi32(v2, v3);  // in [lo, hi]: exact
      const __m512i b = _mm512_permutexvar_epi32(rows_order, is_signed ? _mm512_packs_epi16(w01, w23)
                                                                       : _mm512_packus_epi16(w01, w23));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + c), _mm512_castsi512_si128(b));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + out_stride + c), _mm512_extracti32x4_epi32(b, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * out_stride + c), _mm512_extracti32x4_epi32(b, 2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 3 * out_stride + c), _mm512_extracti32x4_epi32(b, 3));
      if (__builtin_expect((b0 | b1 | b2 | b3) != 0, 0)) {
        const __mmask16 bad[4] = {b0, b1, b2, b3};
        for (std::size_t j = 0; j < 4; ++j) float16_fix(row + j * rs, a, c, bad[j], k, shifts, s, o + j * out_stride);
      }
    }
  }
  for (; r < a.rows; ++r) {
    const std::int32_t* row = a.data + r * rs;
    Out* o = out + r * out_stride;
    for (std::size_t c = 0; c + 16 <= c1; c += 16) {
      __mmask16 bad;
      const __m512i v = float16(row, l, c, z_out, lo_f, hi_f, bad);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + c), _mm512_cvtepi32_epi8(v));
      if (bad != 0) float16_fix(row, a, c, bad, k, shifts, s, o);
    }
  }
}

template <class Out>
__attribute__((target("avx512f"))) void run_avx512(const AccBlock& a, std::size_t c1, const ChannelConsts& k,
                                                   const Scalars& s, bool per_channel, Out* out,
                                                   std::size_t out_stride) {
  const __m256i z_in = _mm256_set1_epi32(s.z_in);
  const bool has_z_in = s.z_in != 0;
  const __m512i lo = _mm512_set1_epi64(s.lo_rel);
  const __m512i hi = _mm512_set1_epi64(s.hi_rel);
  const __m512i z_out = _mm512_set1_epi64(s.z_out);
  const __m512i zero = _mm512_setzero_si512();
  __m512i m = _mm512_set1_epi64(k.m[0]);
  __m512i half = _mm512_set1_epi64(k.half[0]);
  __m512i n = _mm512_set1_epi64(k.n[0]);
  __m512i fix = _mm512_set1_epi64(k.neg_fix[0]);
  for (std::size_t r = 0; r < a.rows; ++r) {
    const std::int32_t* row = a.data + r * a.row_stride;
    Out* o = out + r * out_stride;
    for (std::size_t c = 0; c + 8 <= c1; c += 8) {
      if (per_channel) {
        m = _mm512_cvtepi32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.m.data() + c)));
        // the AVX2 layout (even lanes, then odd) is undone by a permute
        const __m512i idx = _mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7);
        half = _mm512_permutexvar_epi64(idx, _mm512_loadu_si512(k.half.data() + 2 * c));
        n = _mm512_permutexvar_epi64(idx, _mm512_loadu_si512(k.n.data() + 2 * c));
        fix = _mm512_permutexvar_epi64(idx, _mm512_loadu_si512(k.neg_fix.data() + 2 * c));
      }
      // the int32 sum in 256 bits (avx2_sum's instructions are part of AVX-512F's AVX2 base)
      __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.bias.data() + c));
      for (std::size_t p = 0; p < a.parts; ++p) {
        t = _mm256_add_epi32(t, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + p * a.part_stride + c)));
      }
      __m512i x = _mm512_cvtepi32_epi64(t);
      if (has_z_in) {
        x = _mm512_sub_epi64(x, _mm512_cvtepi32_epi64(z_in));
        x = _mm512_min_epi64(_mm512_max_epi64(x, _mm512_set1_epi64(kInt32Min)), _mm512_set1_epi64(kInt32Max));
      }
      const __m512i p = _mm512_mul_epi32(x, m);
      const __mmask8 p_neg = _mm512_cmplt_epi64_mask(p, zero);
      __m512i q = _mm512_add_epi64(p, half);
      q = _mm512_mask_add_epi64(q, p_neg, q, fix);
      __m512i v = _mm512_srav_epi64(q, n);
      v = _mm512_add_epi64(_mm512_min_epi64(_mm512_max_epi64(v, lo), hi), z_out);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(o + c), _mm512_cvtepi64_epi8(v));
    }
  }
}

#endif  // ACCEL_SDK_REQUANTIZE_X86

}  // namespace detail

class ChannelRequantizer {
 public:
  ChannelRequantizer() = default;

  // channels: the block's width. multipliers: 1 (per-tensor) or `channels` entries.
  // [lo, hi]: the output range (the dtype's, narrowed by a fused relu/clip), holding
  // out_zero_point unless the fused activation cuts it off. bias: empty or `channels`
  // int32 values. in_zero_point: the accumulators' own zero point (0 for conv/dense).
  ChannelRequantizer(std::size_t channels, const std::vector<Multiplier>& multipliers, std::int32_t out_zero_point,
                     std::int32_t lo, std::int32_t hi, const std::vector<std::int32_t>& bias = {},
                     std::int32_t in_zero_point = 0)
      : channels_(channels), per_channel_(multipliers.size() != 1) {
    if (channels == 0) throw std::invalid_argument("requantize: 0 channels");
    if (multipliers.size() != 1 && multipliers.size() != channels) {
      throw std::invalid_argument("requantize: " + std::to_string(multipliers.size()) + " multipliers for " +
                                  std::to_string(channels) + " channels (need 1 or one per channel)");
    }
    if (!bias.empty() && bias.size() != channels) {
      throw std::invalid_argument("requantize: " + std::to_string(bias.size()) + " bias values for " +
                                  std::to_string(channels) + " channels");
    }
    if (lo > hi) throw std::invalid_argument("requantize: empty output range");
    const std::size_t padded = (channels + 7) / 8 * 8;  // the kernels read whole blocks of 8 constants
    k_.m.assign(padded, 0);
    k_.half.assign(2 * padded, 0);
    k_.n.assign(2 * padded, 0);
    k_.neg_fix.assign(2 * padded, 0);
    k_.bias.assign(padded, 0);
    shifts_.assign(channels, 0);
    for (std::size_t c = 0; c < channels; ++c) {
      const Multiplier& mu = multipliers[multipliers.size() == 1 ? 0 : c];
      if (!valid_multiplier(mu.m, mu.shift)) throw std::invalid_argument("requantize: invalid fixed-point multiplier");
      const std::int64_t n = 31 - mu.shift;
      // 64-bit constants of channel c sit at lane c%2==0 ? (c/8)*16 + (c%8)/2 : (c/8)*16 + 4 + (c%8)/2:
      // even channels first, the order _mm256_mul_epi32 sees them in
      const std::size_t at = (c / 8) * 16 + (c % 2 ? 4 : 0) + (c % 8) / 2;
      k_.m[c] = mu.m;
      k_.n[at] = n;
      k_.half[at] = n > 0 ? (std::int64_t{1} << (n - 1)) : 0;
      k_.neg_fix[at] = n > 0 ? -1 : 0;
      shifts_[c] = mu.shift;
      if (!bias.empty()) k_.bias[c] = bias[c];
    }
    // run_avx2_fast's constants, when every channel has shift <= 0, m = 0 or m >= 2^16
    fast_ = std::all_of(multipliers.begin(), multipliers.end(),
                        [](const Multiplier& mu) { return mu.shift <= 0 || mu.m == 0 || mu.m >= (1 << 16); });
    up_ = std::any_of(shifts_.begin(), shifts_.end(), [](std::int32_t sh) { return sh > 0; });
    if (fast_) {
      fk_.assign(padded / 8 * detail::kFastStride, 0);
      for (std::size_t c = 0; c < padded; ++c) {
        const std::size_t src = c < channels ? c : 0;
        const Multiplier& mu = multipliers[multipliers.size() == 1 ? 0 : src];
        const std::int32_t up = std::max(mu.shift, 0);
        const std::int64_t n = 31 - (mu.shift - up);  // 31 .. 62
        std::uint32_t* cap_up = reinterpret_cast<std::uint32_t*>(fk_.data() + c / 8 * detail::kFastStride + 24);
        cap_up[c % 8] = std::uint32_t{1} << (31 - up);
        cap_up[8 + c % 8] = static_cast<std::uint32_t>(up);
        std::int64_t* f = fk_.data() + c / 8 * detail::kFastStride + (c % 8) / 2 + (c % 2 ? 4 : 0);
        f[0] = 2 * static_cast<std::int64_t>(mu.m);
        f[8] = std::int64_t{1} << n;
        f[16] = c % 2 ? n - 31 : n + 1;
      }
    }
    // run_avx512_float's multipliers, one per channel (padded to whole blocks of 16)
    fm_.assign((channels + 15) / 16 * 16, 0.f);
    for (std::size_t c = 0; c < channels; ++c) {
      const Multiplier& mu = multipliers[multipliers.size() == 1 ? 0 : c];
      fm_[c] = static_cast<float>(std::ldexp(static_cast<double>(mu.m), mu.shift - 31));
    }
    s_.z_in = in_zero_point;
    s_.z_out = out_zero_point;
    s_.lo_rel = static_cast<std::int64_t>(lo) - out_zero_point;
    s_.hi_rel = static_cast<std::int64_t>(hi) - out_zero_point;
  }

  // From float32 scales as stored in accel.ir.QuantParams: the accumulators' scales
  // (1 or one per channel: s_data * s_weight[c]) and the output's.
  static ChannelRequantizer from_scales(std::size_t channels, const std::vector<float>& acc_scales, float out_scale,
                                        std::int32_t out_zero_point, std::int32_t lo, std::int32_t hi,
                                        const std::vector<std::int32_t>& bias = {}, std::int32_t in_zero_point = 0) {
    std::vector<Multiplier> ms;
    ms.reserve(acc_scales.size());
    for (float s : acc_scales) ms.push_back(quantize_multiplier(static_cast<double>(s) / static_cast<double>(out_scale)));
    return ChannelRequantizer(channels, ms, out_zero_point, lo, hi, bias, in_zero_point);
  }

  std::size_t channels() const { return channels_; }

  // Adds delta[c] to channel c's bias (int32 wrap-around, as the bias itself is added).
  void add_to_bias(const std::vector<std::int32_t>& delta) {
    if (delta.size() != channels_) throw std::invalid_argument("requantize: a bias change per channel is needed");
    for (std::size_t c = 0; c < channels_; ++c) k_.bias[c] = detail::wrap_add(k_.bias[c], delta[c]);
  }

  // out[r * out_stride + c] for every row r of the block and channel c < channels().
  // Out is std::uint8_t or std::int8_t (or std::int32_t) and must hold [lo, hi].
  template <class Out>
  void run(const AccBlock& acc, Out* out, std::size_t out_stride,
           RequantizeIsa isa = RequantizeIsa::avx512) const {
    static_assert(std::is_integral<Out>::value, "requantize writes integers");
    if (acc.rows == 0) return;
    if (acc.parts == 0) throw std::invalid_argument("requantize: 0 parts");
    std::size_t done = 0;
#ifdef ACCEL_SDK_REQUANTIZE_X86
    if (sizeof(Out) == 1) {
      const RequantizeIsa best = best_requantize_isa();
      if (static_cast<int>(isa) > static_cast<int>(best)) isa = best;
      const std::size_t vec = channels_ / 8 * 8;
      const std::size_t vec16 = channels_ / 16 * 16;
      if (vec16 > 0 && isa == RequantizeIsa::avx512 && s_.z_in == 0) {
        // 16 channels a step in float32, four rows a store; a rest of 8 below
        detail::run_avx512_float(acc, vec16, k_, fm_.data(), shifts_, s_, out, out_stride);
        done = vec16;
      }
      if (vec > done && fast_ && isa != RequantizeIsa::portable) {
        run_fast(acc, done, vec, out, out_stride);
        done = vec;
      } else if (vec > done && isa == RequantizeIsa::avx512) {
        detail::run_avx512(acc, vec, k_, s_, per_channel_, out, out_stride);
        done = vec;
      } else if (vec > done && isa == RequantizeIsa::avx2) {
        detail::run_avx2(acc, vec, k_, s_, per_channel_, out, out_stride);
        done = vec;
      }
    }
#else
    (void)isa;
#endif
    if (done < channels_) detail::run_portable(acc, done, channels_, k_, shifts_, s_, out, out_stride);
  }

  // Convenience for one contiguous block: rows x channels accumulators, `parts` parts side by side in each row.
  template <class Out>
  void run(const std::int32_t* acc, std::size_t rows, Out* out, std::size_t parts = 1,
           RequantizeIsa isa = RequantizeIsa::avx512) const {
    AccBlock b;
    b.data = acc;
    b.rows = rows;
    b.parts = parts;
    b.part_stride = channels_;
    b.row_stride = channels_ * parts;
    run(b, out, channels_, isa);
  }

#ifdef ACCEL_SDK_REQUANTIZE_X86
  // The fast AVX2 kernel on channels [c0, c1) (multiples of 8), instantiated for this
  // requantizer's per-channel and shift kinds.
  template <class Out>
  void run_fast(const AccBlock& acc, std::size_t c0, std::size_t c1, Out* out, std::size_t out_stride) const {
    if (per_channel_ && up_) {
      detail::run_avx2_fast<Out, true, true>(acc, c0, c1, k_, fk_.data(), s_, out, out_stride);
    } else if (per_channel_) {
      detail::run_avx2_fast<Out, true, false>(acc, c0, c1, k_, fk_.data(), s_, out, out_stride);
    } else if (up_) {
      detail::run_avx2_fast<Out, false, true>(acc, c0, c1, k_, fk_.data(), s_, out, out_stride);
    } else {
      detail::run_avx2_fast<Out, false, false>(acc, c0, c1, k_, fk_.data(), s_, out, out_stride);
    }
  }
#endif

 private:
  std::size_t channels_ = 0;
  bool per_channel_ = false;
  bool fast_ = false;               // every shift <= 0, m = 0 or m >= 2^16: run_avx2_fast
  bool up_ = false;                 // some shift > 0
  std::vector<std::int64_t> fk_;    // detail::run_avx2_fast's constants
  std::vector<float> fm_;           // detail::run_avx512_float's multipliers
  detail::ChannelConsts k_;
  std::vector<std::int32_t> shifts_;
  detail::Scalars s_;
};

namespace detail {

// qnn.add as one rounding of real numbers: y = clamp(round((a - za) * ka + (b - zb) * kb + z), lo, hi),
// with ka and kb the products of the definition's multipliers (and 2^left_shift). It departs
// from the definition's three fixed-point roundings only where a sum lies within about 2^-21
// of a tie, and AddTable uses it only after it has given the table's byte for every pair.
struct AddFormula {
  double ka = 0, kb = 0, z = 0, lo = 0, hi = 0;
  std::int32_t za = 0, zb = 0;
  bool is_signed = false;
};

#ifdef ACCEL_SDK_REQUANTIZE_X86
// t[(a[i] << 8) | b[i]] for the first multiple of 16 of n elements; returns how many were done.
__attribute__((target("avx512f"))) inline std::size_t lookup_pairs_avx512(const std::uint8_t* t, const std::uint8_t* a,
                                                                           const std::uint8_t* b, std::uint8_t* y,
                                                                           std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i va = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m512i vb = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    const __m512i g = _mm512_i32gather_epi32(_mm512_or_si512(_mm512_slli_epi32(va, 8), vb), t, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm512_cvtepi32_epi8(g));  // each lane's low byte
  }
  return i;
}

// The same, 8 at a time.
__attribute__((target("avx2"))) inline std::size_t lookup_pairs_avx2(const std::uint8_t* t, const std::uint8_t* a,
                                                                      const std::uint8_t* b, std::uint8_t* y,
                                                                      std::size_t n) {
  std::size_t i = 0;
  const __m256i low = _mm256_set1_epi32(0xff);
  for (; i + 8 <= n; i += 8) {
    const __m256i va = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + i)));
    const __m256i vb = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + i)));
    const __m256i idx = _mm256_or_si256(_mm256_slli_epi32(va, 8), vb);
    const __m256i g = _mm256_and_si256(_mm256_i32gather_epi32(reinterpret_cast<const int*>(t), idx, 1), low);
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256(g, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + i), _mm_packus_epi16(w, w));
  }
  return i;
}

// 8 results of the formula from 8 (a - za) and 8 (b - zb), as int32 in [lo, hi].
__attribute__((target("avx512f"))) inline __m256i add_formula8_avx512(__m256i da, __m256i db, const AddFormula& f) {
  const __m512d sb = _mm512_fmadd_round_pd(_mm512_cvtepi32_pd(db), _mm512_set1_pd(f.kb), _mm512_set1_pd(f.z), kNear);
  __m512d v = _mm512_fmadd_round_pd(_mm512_cvtepi32_pd(da), _mm512_set1_pd(f.ka), sb, kNear);
  v = _mm512_min_pd(_mm512_max_pd(v, _mm512_set1_pd(f.lo)), _mm512_set1_pd(f.hi));
  return _mm512_cvt_roundpd_epi32(v, kNear);
}

// The formula on the first multiple of 16 of n elements (the rounding modes are the
// instructions' own, whatever MXCSR says); returns how many were done.
template <bool Signed>
__attribute__((target("avx512f"))) inline std::size_t add_formula_avx512(const AddFormula& f, const std::uint8_t* a,
                                                                          const std::uint8_t* b, std::uint8_t* y,
                                                                          std::size_t n) {
  const __m512i za = _mm512_set1_epi32(f.za), zb = _mm512_set1_epi32(f.zb);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i ra = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    const __m128i rb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    const __m512i da = _mm512_sub_epi32(Signed ? _mm512_cvtepi8_epi32(ra) : _mm512_cvtepu8_epi32(ra), za);
    const __m512i db = _mm512_sub_epi32(Signed ? _mm512_cvtepi8_epi32(rb) : _mm512_cvtepu8_epi32(rb), zb);
    const __m256i lo = add_formula8_avx512(_mm512_castsi512_si256(da), _mm512_castsi512_si256(db), f);
    const __m256i hi = add_formula8_avx512(_mm512_extracti64x4_epi64(da, 1), _mm512_extracti64x4_epi64(db, 1), f);
    const __m512i r = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm512_cvtepi32_epi8(r));  // in [lo, hi]: the low byte is it
  }
  return i;
}

// 4 results from 4 (a - za) and 4 (b - zb) (FMA's rounding is MXCSR's: AddTable runs this
// only under round to nearest, the mode it was checked in).
__attribute__((target("avx2,fma"))) inline __m128i add_formula4_avx2(__m128i da, __m128i db, const AddFormula& f) {
  const __m256d sb = _mm256_fmadd_pd(_mm256_cvtepi32_pd(db), _mm256_set1_pd(f.kb), _mm256_set1_pd(f.z));
  __m256d v = _mm256_fmadd_pd(_mm256_cvtepi32_pd(da), _mm256_set1_pd(f.ka), sb);
  v = _mm256_min_pd(_mm256_max_pd(v, _mm256_set1_pd(f.lo)), _mm256_set1_pd(f.hi));
  return _mm256_cvtpd_epi32(_mm256_round_pd(v, kNear));
}

template <bool Signed>
__attribute__((target("avx2,fma"))) inline std::size_t add_formula_avx2(const AddFormula& f, const std::uint8_t* a,
                                                                        const std::uint8_t* b, std::uint8_t* y,
                                                                        std::size_t n) {
  const __m256i za = _mm256_set1_epi32(f.za), zb = _mm256_set1_epi32(f.zb);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i ra = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + i));
    const __m128i rb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + i));
    const __m256i da = _mm256_sub_epi32(Signed ? _mm256_cvtepi8_epi32(ra) : _mm256_cvtepu8_epi32(ra), za);
    const __m256i db = _mm256_sub_epi32(Signed ? _mm256_cvtepi8_epi32(rb) : _mm256_cvtepu8_epi32(rb), zb);
    const __m128i lo = add_formula4_avx2(_mm256_castsi256_si128(da), _mm256_castsi256_si128(db), f);
    const __m128i hi = add_formula4_avx2(_mm256_extracti128_si256(da, 1), _mm256_extracti128_si256(db, 1), f);
    const __m128i w = _mm_packs_epi32(lo, hi);  // in [lo, hi]: no saturation
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + i), Signed ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w));
  }
  return i;
}

inline bool rounds_to_nearest() { return (_mm_getcsr() & 0x6000u) == 0; }

// Whether the AVX2 formula kernel can run here (AVX2 and FMA).
inline bool avx2_fma() {
  static const bool yes = best_requantize_isa() >= RequantizeIsa::avx2 && __builtin_cpu_supports("fma");
  return yes;
}
#endif
}  // namespace detail

// qnn.add of two 8-bit tensors of one shape, as accel.quant.quantized_add defines it: each
// input's (x - z) << left_shift rescaled by its multiplier, their sum rescaled by the output's,
// plus the output's zero point, clamped to [lo, hi]. A result depends on the two bytes only, so
// the definition is tabulated once over every pair (64 KiB, indexed by their bit patterns).
// run() evaluates detail::AddFormula instead where create found that kernel to give the
// table's byte for every pair (of the adds ONNX Runtime's quantizer makes in MobileNetV2, 10
// of 10; in ResNet-18, 7 of 8; of random scales, about 19 in 20; scales whose ratios are small
// fractions, as hand-set decimal scales can be, often not): no table to read, which for an
// add that runs once an inference, its table out of cache by then, took MobileNetV2 QDQ's
// ten adds on acl from 275 to 89 us.
// is_signed: the bytes are int8 (else uint8).
class AddTable {
 public:
  AddTable() = default;

  // m: the multipliers of a, b and the sum; z: the zero points of a, b and the output.
  AddTable(bool is_signed, const Multiplier (&m)[3], const std::int64_t (&z)[3], int left_shift, std::int64_t lo,
           std::int64_t hi) {
    for (const Multiplier& k : m) {
      if (!valid_multiplier(k.m, k.shift)) throw std::invalid_argument("invalid fixed-point multiplier");
    }
    if (left_shift < 0 || left_shift > 30) throw std::invalid_argument("left shift outside [0, 30]");
    const std::int64_t dlo = is_signed ? -128 : 0, dhi = is_signed ? 127 : 255;
    if (lo > hi || lo < dlo || hi > dhi) throw std::invalid_argument("invalid output range");
    table_.resize((std::size_t{1} << 16) + 3);  // + 3: a gather reads 4 bytes at the last index
    for (int ia = 0; ia < 256; ++ia) {
      for (int ib = 0; ib < 256; ++ib) {
        const std::int64_t va = is_signed ? static_cast<std::int8_t>(ia) : ia;
        const std::int64_t vb = is_signed ? static_cast<std::int8_t>(ib) : ib;
        const std::int64_t xa = mbqm(sat32((va - z[0]) * (std::int64_t{1} << left_shift)), m[0].m, m[0].shift);
        const std::int64_t xb = mbqm(sat32((vb - z[1]) * (std::int64_t{1} << left_shift)), m[1].m, m[1].shift);
        const std::int64_t y = static_cast<std::int64_t>(mbqm(sat32(xa + xb), m[2].m, m[2].shift)) + z[2];
        // the result's bit pattern (an int8 result as its byte)
        table_[(static_cast<std::size_t>(ia) << 8) | static_cast<std::size_t>(ib)] =
            static_cast<std::uint8_t>(y < lo ? lo : (y > hi ? hi : y));
      }
    }
    auto real = [](const Multiplier& k) { return std::ldexp(static_cast<double>(k.m), k.shift - 31); };
    const double out = std::ldexp(real(m[2]), left_shift);
    f_.ka = real(m[0]) * out;
    f_.kb = real(m[1]) * out;
    f_.z = static_cast<double>(z[2]);
    f_.lo = static_cast<double>(lo);
    f_.hi = static_cast<double>(hi);
    f_.za = static_cast<std::int32_t>(z[0]);
    f_.zb = static_cast<std::int32_t>(z[1]);
    f_.is_signed = is_signed;
#ifdef ACCEL_SDK_REQUANTIZE_X86
    // the formula's kernels on every pair, against the table
    std::vector<std::uint8_t> a(1 << 16), b(1 << 16), y(1 << 16);
    for (std::size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<std::uint8_t>(i >> 8);
      b[i] = static_cast<std::uint8_t>(i);
    }
    for (RequantizeIsa isa : {RequantizeIsa::avx2, RequantizeIsa::avx512}) {
      if (isa > best_requantize_isa() || (isa == RequantizeIsa::avx2 && !(detail::avx2_fma() && detail::rounds_to_nearest()))) {
        continue;
      }
      if (formula(isa, a.data(), b.data(), y.data(), a.size()) != a.size()) continue;
      formula_[static_cast<int>(isa)] = std::equal(y.begin(), y.end(), table_.begin());
    }
#endif
  }

  // Whether run() on this kernel evaluates the formula (else it looks the table up).
  bool uses_formula(RequantizeIsa isa = best_requantize_isa()) const {
    return formula_[static_cast<int>(std::min(isa, best_requantize_isa()))];
  }

  // y[i] = a[i] + b[i] for n bytes (of the dtype the table was made for).
  void run(const void* a, const void* b, void* y, std::size_t n, RequantizeIsa isa = best_requantize_isa()) const {
    const auto* pa = static_cast<const std::uint8_t*>(a);
    const auto* pb = static_cast<const std::uint8_t*>(b);
    auto* py = static_cast<std::uint8_t*>(y);
    const std::uint8_t* t = table_.data();
    std::size_t i = 0;
#ifdef ACCEL_SDK_REQUANTIZE_X86
    isa = std::min(isa, best_requantize_isa());
    if (uses_formula(isa) && (isa == RequantizeIsa::avx512 || detail::rounds_to_nearest())) {
      i = formula(isa, pa, pb, py, n);
      if (i < n) {  // the rest through a whole step of the kernel
        std::uint8_t ta[16] = {}, tb[16] = {}, ty[16];
        std::copy(pa + i, pa + n, ta);
        std::copy(pb + i, pb + n, tb);
        formula(isa, ta, tb, ty, 16);
        std::copy(ty, ty + (n - i), py + i);
      }
      return;
    }
    if (isa == RequantizeIsa::avx512) i = detail::lookup_pairs_avx512(t, pa, pb, py, n);
    if (isa == RequantizeIsa::avx2) i = detail::lookup_pairs_avx2(t, pa, pb, py, n);
#else
    (void)isa;
#endif
    for (; i < n; ++i) py[i] = t[(static_cast<std::size_t>(pa[i]) << 8) | pb[i]];
  }

 private:
#ifdef ACCEL_SDK_REQUANTIZE_X86
  std::size_t formula(RequantizeIsa isa, const std::uint8_t* a, const std::uint8_t* b, std::uint8_t* y,
                      std::size_t n) const {
    if (isa == RequantizeIsa::avx512) {
      return f_.is_signed ? detail::add_formula_avx512<true>(f_, a, b, y, n)
                          : detail::add_formula_avx512<false>(f_, a, b, y, n);
    }
    if (isa == RequantizeIsa::avx2) {
      return f_.is_signed ? detail::add_formula_avx2<true>(f_, a, b, y, n) : detail::add_formula_avx2<false>(f_, a, b, y, n);
    }
    return 0;
  }
#endif

  std::vector<std::uint8_t> table_;
  detail::AddFormula f_;
  bool formula_[3] = {false, false, false};  // per RequantizeIsa
};

namespace detail {

// Quantizer's constants: the float32 scale, the clamp [lo - z, hi - z] (integers, exact in float32)
// and z.
struct QuantizeConsts {
  float scale = 1.f, lo = 0.f, hi = 0.f;
  std::int32_t z = 0;
};

// One element as accel.quant defines it: x / s in float32, rounded half to even, NaN to 0,
// clamped, plus z.
inline std::int32_t quantize_one(float x, const QuantizeConsts& k) {
  float q = std::nearbyint(x / k.scale);  // (the default rounding mode: half to even)
  if (q != q) q = 0.f;
  q = q < k.lo ? k.lo : (q > k.hi ? k.hi : q);
  return static_cast<std::int32_t>(q) + k.z;
}

#ifdef ACCEL_SDK_REQUANTIZE_X86
// The same steps on 16 lanes: the division is IEEE's in every lane, the rounding the same mode,
// NaN lanes zeroed before the clamp, and the clamped integers convert exactly. The low byte of
// each int32 is the uint8 or int8 result.
__attribute__((target("avx512f"))) inline std::size_t quantize_avx512(const float* x, std::uint8_t* y, std::size_t n,
                                                                      const QuantizeConsts& k) {
  const __m512 s = _mm512_set1_ps(k.scale), lo = _mm512_set1_ps(k.lo), hi = _mm512_set1_ps(k.hi);
  const __m512i z = _mm512_set1_epi32(k.z);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 q = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(x + i), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, q, _CMP_ORD_Q), q);
    q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
    const __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(q), z);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm512_cvtepi32_epi8(v));
  }
  return i;
}

__attribute__((target("avx2"))) inline std::size_t quantize_avx2(const float* x, std::uint8_t* y, std::size_t n,
                                                                 const QuantizeConsts& k) {
  const __m256 s = _mm256_set1_ps(k.scale), lo = _mm256_set1_ps(k.lo), hi = _mm256_set1_ps(k.hi);
  const __m256i z = _mm256_set1_epi32(k.z);
  // the low byte of each int32 to the first 4 bytes of its 128-bit lane, then the two lanes' words together
  const __m256i low_bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                             0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i words = _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_and_ps(q, _mm256_cmp_ps(q, q, _CMP_ORD_Q));
    q = _mm256_min_ps(_mm256_max_ps(q, lo), hi);
    const __m256i v = _mm256_add_epi32(_mm256_cvtps_epi32(q), z);
    const __m256i packed = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, low_bytes), words);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + i), _mm256_castsi256_si128(packed));
  }
  return i;
}
#endif

}  // namespace detail

// qnn.quantize of float32 data to uint8 or int8 per tensor, as accel.quant.Quantizer defines it:
// saturate(round_half_even(x / s) + z), NaN to z. Every step after the one float32 division is
// exact, so the vector kernels give the portable one's bits.
class Quantizer {
 public:
  Quantizer() = default;
  Quantizer(float scale, std::int64_t zero_point, std::int64_t lo, std::int64_t hi) {
    if (!(scale > 0.f) || !std::isfinite(scale)) throw std::invalid_argument("quantize scale must be finite and > 0");
    if (lo > hi || lo < -128 || hi > 255 || zero_point < lo || zero_point > hi) {
      throw std::invalid_argument("quantize range and zero point must be an 8-bit dtype's");
    }
    k_.scale = scale;
    k_.z = static_cast<std::int32_t>(zero_point);
    k_.lo = static_cast<float>(lo - zero_point);
    k_.hi = static_cast<float>(hi - zero_point);
  }

  // y[i] = quantize(x[i]) for n elements; y holds the results' bytes (uint8, or int8's bit patterns).
  void run(const float* x, void* y, std::size_t n, RequantizeIsa isa = best_requantize_isa()) const {
    auto* out = static_cast<std::uint8_t*>(y);
    std::size_t i = 0;
#ifdef ACCEL_SDK_REQUANTIZE_X86
    isa = std::min(isa, best_requantize_isa());
    if (isa == RequantizeIsa::avx512) i = detail::quantize_avx512(x, out, n, k_);
    if (isa == RequantizeIsa::avx2) i = detail::quantize_avx2(x, out, n, k_);
#else
    (void)isa;
#endif
    for (; i < n; ++i) out[i] = static_cast<std::uint8_t>(detail::quantize_one(x[i], k_));
  }

 private:
  detail::QuantizeConsts k_;
};

}  // namespace quant
}  // namespace accel_sdk

#endif  // ACCEL_SDK_REQUANTIZE_HPP

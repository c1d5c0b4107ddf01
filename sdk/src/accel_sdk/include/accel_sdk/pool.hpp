// accel_sdk/pool.hpp: 2-D pooling through oneDNN, as accel's reference computes it.
//
//   onednn::PoolSpec  the kind (max, average counting the padding or not, L2) and the window:
//                     strides, kernel, dilation (accel's: 1 = dense), padding begin / end;
//   onednn::Pool      the primitive for given source and destination descriptors (the
//                     destination may be format_tag::any: dst_desc() says what it chose),
//                     made once; execute() runs it on the caller's buffers with the caller's
//                     scratch (scratch_bytes(): the squares of an L2 pool and the primitive's
//                     scratchpad; oneDNN's own scratchpad is shared between threads).
//
// What oneDNN computes differently from the reference is mended here: float32 max pooling
// returns NaN for a window holding one (MaxPoolNan), and an L2 pool is sqrt(avg(x^2)), the
// square and the root fused around oneDNN's average. Integer averages round differently in
// oneDNN: a backend computes those itself (accel rounds half away from zero).
#ifndef ACCEL_SDK_POOL_HPP
#define ACCEL_SDK_POOL_HPP

#include <accel_sdk/arena.hpp>
#include <accel_sdk/float_ops.hpp>
#include <accel_sdk/onednn.hpp>

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace accel_sdk {
namespace onednn {

struct PoolSpec {
  enum class Kind { max, avg, avg_include_pad, l2 };
  Kind kind = Kind::max;
  dnnl::memory::dims strides{1, 1}, kernel{1, 1}, dilation{1, 1}, pad_begin{0, 0}, pad_end{0, 0};
};

class Pool {
 public:
  Pool() = default;
  Pool(const PoolSpec& spec, const dnnl::memory::desc& src, const dnnl::memory::desc& dst) {
    using alg = dnnl::algorithm;
    const alg a = spec.kind == PoolSpec::Kind::max               ? alg::pooling_max
                  : spec.kind == PoolSpec::Kind::avg_include_pad ? alg::pooling_avg_include_padding
                                                                 : alg::pooling_avg_exclude_padding;
    l2_ = spec.kind == PoolSpec::Kind::l2;
    dnnl::memory::dims dil;
    for (auto d : spec.dilation) dil.push_back(d - 1);  // oneDNN counts the gaps
    dnnl::primitive_attr attr = user_scratchpad();
    if (l2_) {
      dnnl::post_ops po;
      po.append_eltwise(alg::eltwise_sqrt, 0.f, 0.f);
      attr.set_post_ops(po);
    }
    guard("pooling create", [&] {
      dnnl::pooling_forward::primitive_desc pd(engine(), dnnl::prop_kind::forward_inference, a, src, dst, spec.strides,
                                               spec.kernel, dil, spec.pad_begin, spec.pad_end, attr);
      prim_ = dnnl::pooling_forward(pd);
      src_ = pd.src_desc();
      dst_ = pd.dst_desc();
      scratch_ = pd.scratchpad_desc();
      if (a == alg::pooling_max) nan_ = MaxPoolNan(pd);
      if (l2_) {
        dnnl::eltwise_forward::primitive_desc sq(engine(), dnnl::prop_kind::forward_inference, alg::eltwise_square,
                                                 src_, src_, 0.f, 0.f, user_scratchpad());
        square_ = dnnl::eltwise_forward(sq);
        square_scratch_ = sq.scratchpad_desc();
      }
    });
    squares_bytes_ = l2_ ? align_up(src_.get_size()) : 0;
    const std::size_t sp = std::max(scratch_.get_size(), square_scratch_.get_size());
    scratch_bytes_ = squares_bytes_ + sp;
  }

  const dnnl::memory::desc& src_desc() const { return src_; }
  const dnnl::memory::desc& dst_desc() const { return dst_; }
  std::size_t scratch_bytes() const { return scratch_bytes_; }

  // src -> dst in the descriptors' formats; scratch: scratch_bytes(), 64-byte aligned.
  void execute(dnnl::stream& stream, const void* src, void* dst, std::uint8_t* scratch) const {
    const auto& eng = engine();
    void* in = const_cast<void*>(src);
    std::uint8_t* sp = scratch + squares_bytes_;
    if (l2_) {
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(src_, eng, in)},
                                                 {DNNL_ARG_DST, dnnl::memory(src_, eng, scratch)}};
      if (square_scratch_.get_size()) args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(square_scratch_, eng, sp));
      square_.execute(stream, args);
      in = scratch;
    }
    const dnnl::memory s = thread_memory(kSrcMemory, src_, in), d = thread_memory(kDstMemory, dst_, dst);
    const dnnl::memory pad = scratch_.get_size() ? thread_memory(kScratchMemory, scratch_, sp) : dnnl::memory();
    onednn::execute(prim_, stream,
                    {{DNNL_ARG_SRC, &s}, {DNNL_ARG_DST, &d}, {DNNL_ARG_SCRATCHPAD, scratch_.get_size() ? &pad : nullptr}});
    nan_.apply(stream, static_cast<const float*>(in), static_cast<float*>(dst));  // float32 max only
  }

 private:
  dnnl::pooling_forward prim_;
  dnnl::eltwise_forward square_;
  dnnl::memory::desc src_, dst_, scratch_, square_scratch_;
  MaxPoolNan nan_;
  bool l2_ = false;
  std::size_t squares_bytes_ = 0, scratch_bytes_ = 0;
};

}  // namespace onednn
}  // namespace accel_sdk

#endif  // ACCEL_SDK_POOL_HPP

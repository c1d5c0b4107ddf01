// accel_sdk/geometry.hpp: output sizes of 2-D convolution and pooling windows.
//
// The same numbers as accel.ops.geometry (conv2d_geometry, pool2d_geometry,
// same_padding), which the reference kernels use, and refused in the same cases;
// accel-sdk's tests compare the two on random windows. Every argument comes from a
// blob, so each is range-checked (sizes, kernels, strides, dilations and paddings
// in [0, 2^31), kernels, strides and dilations >= 1) and no arithmetic can overflow;
// a window that does not fit throws GeometryError.
//
//   accel_sdk::geometry::Window2d win{kh, kw, sh, sw, dh, dw, pt, pl, pb, pr};
//   auto conv = accel_sdk::geometry::conv2d(h, w, win);               // conv.oh, conv.ow
//   auto pool = accel_sdk::geometry::pool2d(h, w, win, ceil_mode);    // + pool.eb, pool.er
#ifndef ACCEL_SDK_GEOMETRY_HPP
#define ACCEL_SDK_GEOMETRY_HPP

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace accel_sdk {
namespace geometry {

// A window that does not fit its input, or an argument out of range.
class GeometryError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Every size, kernel, stride, dilation and padding is below this.
constexpr std::int64_t kMaxExtent = std::int64_t{1} << 31;

namespace detail {
inline void check_range(std::int64_t v, std::int64_t lo, const char* what) {
  if (v < lo || v >= kMaxExtent) {
    throw GeometryError(std::string(what) + "=" + std::to_string(v) + ", must be in [" + std::to_string(lo) + ", 2^31)");
  }
}
}  // namespace detail

// The extent of a dilated kernel: dilation * (kernel - 1) + 1.
inline std::int64_t effective_kernel(std::int64_t kernel, std::int64_t dilation) {
  detail::check_range(kernel, 1, "kernel");
  detail::check_range(dilation, 1, "dilation");
  return dilation * (kernel - 1) + 1;  // < 2^62
}

// Outputs of a convolution along one axis: (size + pads - extent) / stride + 1.
inline std::int64_t conv_output_size(std::int64_t size, std::int64_t pad_begin, std::int64_t pad_end, std::int64_t kernel,
                                     std::int64_t stride = 1, std::int64_t dilation = 1) {
  detail::check_range(size, 0, "size");
  detail::check_range(pad_begin, 0, "padding");
  detail::check_range(pad_end, 0, "padding");
  detail::check_range(stride, 1, "stride");
  const std::int64_t extent = effective_kernel(kernel, dilation);
  const std::int64_t padded = size + pad_begin + pad_end;
  if (padded < extent) {
    throw GeometryError("kernel extent " + std::to_string(extent) + " is larger than the padded input " + std::to_string(padded));
  }
  return (padded - extent) / stride + 1;
}

// Outputs of a pool along one axis. Padding must be smaller than the window's
// extent. With ceil_mode the last partial window counts, unless it would start in
// the end padding (as ONNX and PyTorch).
inline std::int64_t pool_output_size(std::int64_t size, std::int64_t pad_begin, std::int64_t pad_end, std::int64_t kernel,
                                     std::int64_t stride, std::int64_t dilation, bool ceil_mode) {
  detail::check_range(size, 0, "size");
  detail::check_range(pad_begin, 0, "padding");
  detail::check_range(pad_end, 0, "padding");
  detail::check_range(stride, 1, "stride");
  const std::int64_t extent = effective_kernel(kernel, dilation);
  if (std::max(pad_begin, pad_end) >= extent) {
    throw GeometryError("padding " + std::to_string(std::max(pad_begin, pad_end)) +
                        " must be smaller than the pooling window extent " + std::to_string(extent));
  }
  const std::int64_t padded = size + pad_begin + pad_end;
  if (padded < extent) {
    throw GeometryError("pooling window extent " + std::to_string(extent) + " is larger than the padded input " +
                        std::to_string(padded));
  }
  const std::int64_t span = padded - extent;
  if (!ceil_mode) return span / stride + 1;
  std::int64_t out = (span + stride - 1) / stride + 1;
  if ((out - 1) * stride >= size + pad_begin) out -= 1;
  return out;
}

// (begin, end) padding giving ceil(size / stride) outputs (ONNX auto_pad): the odd
// remainder goes to the end for SAME_UPPER (upper) and to the beginning for SAME_LOWER.
inline std::pair<std::int64_t, std::int64_t> same_padding(std::int64_t size, std::int64_t kernel, std::int64_t stride,
                                                          std::int64_t dilation, bool upper) {
  detail::check_range(size, 0, "size");
  detail::check_range(stride, 1, "stride");
  const std::int64_t extent = effective_kernel(kernel, dilation);
  const std::int64_t out = (size + stride - 1) / stride;
  const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * stride + extent - size);
  const std::int64_t small = total / 2, big = total - total / 2;
  return upper ? std::make_pair(small, big) : std::make_pair(big, small);
}

// A 2-D window: kernel, strides, dilations and padding (top, left, bottom, right).
struct Window2d {
  std::int64_t kh = 1, kw = 1;
  std::int64_t sh = 1, sw = 1;
  std::int64_t dh = 1, dw = 1;
  std::int64_t pt = 0, pl = 0, pb = 0, pr = 0;
};

struct Conv2dGeometry {
  std::int64_t oh = 0, ow = 0;
};

// eb / er: how far ceil_mode's last windows reach past the bottom / right padding.
struct Pool2dGeometry {
  std::int64_t oh = 0, ow = 0, eb = 0, er = 0;
};

inline Conv2dGeometry conv2d(std::int64_t h, std::int64_t w, const Window2d& win) {
  return {conv_output_size(h, win.pt, win.pb, win.kh, win.sh, win.dh), conv_output_size(w, win.pl, win.pr, win.kw, win.sw, win.dw)};
}

inline Pool2dGeometry pool2d(std::int64_t h, std::int64_t w, const Window2d& win, bool ceil_mode) {
  Pool2dGeometry g;
  g.oh = pool_output_size(h, win.pt, win.pb, win.kh, win.sh, win.dh, ceil_mode);
  g.ow = pool_output_size(w, win.pl, win.pr, win.kw, win.sw, win.dw, ceil_mode);
  const std::int64_t eh = effective_kernel(win.kh, win.dh), ew = effective_kernel(win.kw, win.dw);
  g.eb = std::max<std::int64_t>(0, (g.oh - 1) * win.sh + eh - (h + win.pt + win.pb));
  g.er = std::max<std::int64_t>(0, (g.ow - 1) * win.sw + ew - (w + win.pl + win.pr));
  return g;
}

}  // namespace geometry
}  // namespace accel_sdk

#endif  // ACCEL_SDK_GEOMETRY_HPP

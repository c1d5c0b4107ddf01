// accel_sdk/tensor.hpp: checked views of the caller's tensors, and dtype helpers.
//
// A TensorView is built from an accel_tensor descriptor (accel/runtime_abi.h)
// after validating it: known dtype, rank in [0, ACCEL_MAX_RANK], no negative
// dimension, a byte size that fits in size_t, data present when non-empty.
// Typed access checks the dtype, so a kernel never reads floats as bytes.
#ifndef ACCEL_SDK_TENSOR_HPP
#define ACCEL_SDK_TENSOR_HPP

#include <accel/runtime_abi.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace accel_sdk {

// A wrong tensor at run time (count, dtype, rank or shape). The ABI glue turns
// it into ACCEL_ERR_INVALID_ARGUMENT.
class ArgumentError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Bytes per element of an accel_dtype code; 0 for an unknown code.
constexpr std::size_t dtype_size(std::int32_t code) noexcept {
  switch (code) {
    case ACCEL_INT8: case ACCEL_UINT8: case ACCEL_BOOL: return 1;
    case ACCEL_FLOAT16: case ACCEL_INT16: case ACCEL_UINT16: return 2;
    case ACCEL_FLOAT32: case ACCEL_INT32: case ACCEL_UINT32: return 4;
    case ACCEL_FLOAT64: case ACCEL_INT64: case ACCEL_UINT64: return 8;
    default: return 0;
  }
}

constexpr bool dtype_valid(std::int32_t code) noexcept { return dtype_size(code) != 0; }

// The numpy name of an accel_dtype code ("float32", ...), or "unknown".
constexpr const char* dtype_name(std::int32_t code) noexcept {
  switch (code) {
    case ACCEL_FLOAT32: return "float32";
    case ACCEL_FLOAT16: return "float16";
    case ACCEL_FLOAT64: return "float64";
    case ACCEL_INT8: return "int8";
    case ACCEL_UINT8: return "uint8";
    case ACCEL_INT16: return "int16";
    case ACCEL_UINT16: return "uint16";
    case ACCEL_INT32: return "int32";
    case ACCEL_UINT32: return "uint32";
    case ACCEL_INT64: return "int64";
    case ACCEL_UINT64: return "uint64";
    case ACCEL_BOOL: return "bool";
    default: return "unknown";
  }
}

// dtype_of<T>::value: the accel_dtype code of a C++ element type.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr std::int32_t value = ACCEL_FLOAT32; };
template <> struct dtype_of<double> { static constexpr std::int32_t value = ACCEL_FLOAT64; };
template <> struct dtype_of<std::int8_t> { static constexpr std::int32_t value = ACCEL_INT8; };
template <> struct dtype_of<std::uint8_t> { static constexpr std::int32_t value = ACCEL_UINT8; };
template <> struct dtype_of<std::int16_t> { static constexpr std::int32_t value = ACCEL_INT16; };
template <> struct dtype_of<std::uint16_t> { static constexpr std::int32_t value = ACCEL_UINT16; };
template <> struct dtype_of<std::int32_t> { static constexpr std::int32_t value = ACCEL_INT32; };
template <> struct dtype_of<std::uint32_t> { static constexpr std::int32_t value = ACCEL_UINT32; };
template <> struct dtype_of<std::int64_t> { static constexpr std::int32_t value = ACCEL_INT64; };
template <> struct dtype_of<std::uint64_t> { static constexpr std::int32_t value = ACCEL_UINT64; };
template <> struct dtype_of<bool> { static constexpr std::int32_t value = ACCEL_BOOL; };

// A shape of at most ACCEL_MAX_RANK dimensions, stored inline (no allocation).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) { assign(dims.begin(), dims.size()); }
  Shape(const std::int64_t* dims, std::size_t rank) { assign(dims, rank); }

  std::int32_t rank() const { return rank_; }
  const std::int64_t* dims() const { return dims_; }
  std::int64_t operator[](std::int32_t i) const {
    if (i < 0 || i >= rank_) throw std::out_of_range("dimension " + std::to_string(i) + " of a rank-" + std::to_string(rank_) + " shape");
    return dims_[i];
  }
  // Element count (1 for rank 0); the constructor guaranteed it fits.
  std::size_t elements() const { return elements_; }

  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (std::int32_t i = 0; i < rank_; ++i) {
      if (dims_[i] != o.dims_[i]) return false;
    }
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }

  std::string str() const {
    std::string s = "[";
    for (std::int32_t i = 0; i < rank_; ++i) s += (i ? "," : "") + std::to_string(dims_[i]);
    return s + "]";
  }

 private:
  void assign(const std::int64_t* dims, std::size_t rank) {
    if (rank > ACCEL_MAX_RANK) throw ArgumentError("rank " + std::to_string(rank) + " exceeds ACCEL_MAX_RANK");
    if (rank > 0 && dims == nullptr) throw ArgumentError("null shape with rank " + std::to_string(rank));
    std::size_t n = 1;
    for (std::size_t i = 0; i < rank; ++i) {
      if (dims[i] < 0) throw ArgumentError("negative dimension " + std::to_string(dims[i]));
      const auto d = static_cast<std::uint64_t>(dims[i]);
      if (d != 0 && n > std::numeric_limits<std::size_t>::max() / d) throw ArgumentError("shape element count overflows");
      n *= static_cast<std::size_t>(d);
      dims_[i] = dims[i];
    }
    rank_ = static_cast<std::int32_t>(rank);
    elements_ = n;
  }

  std::int32_t rank_ = 0;
  std::int64_t dims_[ACCEL_MAX_RANK] = {};
  std::size_t elements_ = 1;
};

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, std::int32_t dtype, const Shape& shape) : data_(data), dtype_(dtype), shape_(shape) {
    if (!dtype_valid(dtype)) throw ArgumentError("unknown dtype code " + std::to_string(dtype));
    if (shape.elements() > std::numeric_limits<std::size_t>::max() / dtype_size(dtype)) {
      throw ArgumentError("tensor byte size overflows");
    }
    if (data == nullptr && nbytes() != 0) throw ArgumentError("null data for a non-empty tensor");
  }

  // A validated view of an ABI descriptor.
  static TensorView from_abi(const accel_tensor& t) {
    if (t.rank < 0 || t.rank > ACCEL_MAX_RANK) throw ArgumentError("rank " + std::to_string(t.rank) + " out of range");
    return TensorView(t.data, t.dtype, Shape(t.shape, static_cast<std::size_t>(t.rank)));
  }

  void* data() const { return data_; }
  std::int32_t dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::int32_t rank() const { return shape_.rank(); }
  std::int64_t dim(std::int32_t i) const { return shape_[i]; }
  std::size_t size() const { return shape_.elements(); }
  std::size_t nbytes() const { return shape_.elements() * dtype_size(dtype_); }

  // The data as T, which may be const-qualified (ArgumentError unless the dtype is T's).
  template <class T>
  T* data_as() const {
    constexpr std::int32_t want = dtype_of<typename std::remove_cv<T>::type>::value;
    if (want != dtype_) {
      throw ArgumentError(std::string("tensor is ") + dtype_name(dtype_) + ", read as " + dtype_name(want));
    }
    return static_cast<T*>(data_);
  }

  // "float32[1,4,4,3]"
  std::string describe() const { return std::string(dtype_name(dtype_)) + shape_.str(); }

 private:
  void* data_ = nullptr;
  std::int32_t dtype_ = ACCEL_FLOAT32;
  Shape shape_;
};

// The dtype and shape a runtime expects of one tensor.
struct TensorSpec {
  std::int32_t dtype = ACCEL_FLOAT32;
  Shape shape;

  bool matches(const TensorView& v) const { return v.dtype() == dtype && v.shape() == shape; }
  std::string describe() const { return std::string(dtype_name(dtype)) + shape.str(); }
};

// ArgumentError unless the views match the specs one to one, naming the first
// mismatch ("output 1 must be float32[1,2], got uint8[1,2]").
inline void check_tensors(const char* role, const std::vector<TensorView>& views, const std::vector<TensorSpec>& specs) {
  if (views.size() != specs.size()) {
    throw ArgumentError("expected " + std::to_string(specs.size()) + " " + role + "s, got " + std::to_string(views.size()));
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (!specs[i].matches(views[i])) {
      throw ArgumentError(std::string(role) + " " + std::to_string(i) + " must be " + specs[i].describe() + ", got " +
                          views[i].describe());
    }
  }
}

}  // namespace accel_sdk

#endif  // ACCEL_SDK_TENSOR_HPP

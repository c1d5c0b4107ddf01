// accel_sdk/blob_reader.hpp: a bounds-checked cursor over a serialized blob.
//
// Every read checks that the bytes exist before touching them and throws
// accel_sdk::BlobError naming the offset when they do not, so a runtime that
// parses its blob only through a BlobReader cannot read out of bounds, however
// the blob was damaged. Scalars are little-endian on every host.
//
// accel_sdk.blob.BlobWriter (Python) writes what this reads, call for call:
//
//   writer (Python)                 reader (C++)
//   w.magic(b"MYNP")                blob.expect_magic("MYNP")
//   w.u32(version)                  blob.expect_version(1, 1)
//   w.i64(x) / w.f32(x) / ...       blob.read<std::int64_t>("x") / read<float> ...
//   w.counted_array("i64", dims)    blob.read_counted_array<std::int64_t>("dims", max)
//   w.string("relu")                blob.read_string(max_len, "op")
//   w.constant(array, align=64)     blob.read_constant(64, "weights")   (u64 size, zero padding, bytes)
//   w.align(16)                     blob.align(16)                      (zero padding)
//
// A short read fails with the bytes it needed and the bytes left:
//   "blob offset 12: tensor count (u32): needs 4 bytes, 2 left".
#ifndef ACCEL_SDK_BLOB_READER_HPP
#define ACCEL_SDK_BLOB_READER_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace accel_sdk {

// A malformed blob. The ABI glue turns it into ACCEL_ERR_INVALID_BLOB.
// Errors raised through a BlobReader carry the offset they refer to
// (has_offset()); the message already names it ("blob offset N: ...").
class BlobError : public std::runtime_error {
 public:
  explicit BlobError(const std::string& what) : std::runtime_error(what) {}
  BlobError(std::size_t offset, const std::string& what)
      : std::runtime_error("blob offset " + std::to_string(offset) + ": " + what), offset_(offset), has_offset_(true) {}

  bool has_offset() const noexcept { return has_offset_; }
  std::size_t offset() const noexcept { return offset_; }

 private:
  std::size_t offset_ = 0;
  bool has_offset_ = false;
};

namespace detail {
// "u8", "i32", "f64", ...: the name a scalar read reports when it runs short.
template <class T>
constexpr const char* scalar_name() {
  if constexpr (std::is_floating_point<T>::value) {
    return sizeof(T) == 4 ? "f32" : sizeof(T) == 8 ? "f64" : "float";
  } else if constexpr (std::is_signed<T>::value) {
    return sizeof(T) == 1 ? "i8" : sizeof(T) == 2 ? "i16" : sizeof(T) == 4 ? "i32" : sizeof(T) == 8 ? "i64" : "int";
  } else {
    return sizeof(T) == 1 ? "u8" : sizeof(T) == 2 ? "u16" : sizeof(T) == 4 ? "u32" : sizeof(T) == 8 ? "u64" : "uint";
  }
}
}  // namespace detail

// a * b, or BlobError when it does not fit in size_t.
inline std::size_t checked_mul(std::size_t a, std::size_t b, const char* what) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) {
    throw BlobError(std::string(what) + ": size overflows");
  }
  return a * b;
}

// a + b, or BlobError when it does not fit in size_t.
inline std::size_t checked_add(std::size_t a, std::size_t b, const char* what) {
  if (b > std::numeric_limits<std::size_t>::max() - a) {
    throw BlobError(std::string(what) + ": size overflows");
  }
  return a + b;
}

class BlobReader {
 public:
  BlobReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size), pos_(0) {
    if (data == nullptr && size != 0) throw BlobError("blob: null data with non-zero size");
  }

  const std::uint8_t* data() const { return data_; }
  std::size_t offset() const { return pos_; }
  std::size_t size() const { return size_; }
  std::size_t remaining() const { return size_ - pos_; }

  // Throws BlobError("blob offset N: <what>") at the current offset.
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(std::size_t offset, const std::string& what) const { throw BlobError(offset, what); }

  // Moves past n bytes and returns a pointer to them (valid while the blob is).
  const std::uint8_t* read_bytes(std::size_t n, const char* what = "bytes") { return take(n, what, nullptr); }

  // Zero bytes up to the next multiple of alignment (a power of two, counted from
  // the start of the blob); non-zero padding is an error, so one content has one encoding.
  void align(std::size_t alignment, const char* what = "padding") {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      fail(std::string(what) + ": alignment " + std::to_string(alignment) + " is not a power of two");
    }
    const std::size_t at = pos_;
    const std::size_t pad = (alignment - pos_ % alignment) % alignment;
    const std::uint8_t* p = read_bytes(pad, what);
    for (std::size_t i = 0; i < pad; ++i) {
      if (p[i] != 0) fail_at(at + i, std::string(what) + ": padding byte is not zero");
    }
  }

  // A constant section as BlobWriter.constant writes it: a u64 byte size, zero
  // padding to `alignment` (from the start of the blob), then the bytes, whose
  // size goes to *size_out. A size above max_size or past the end is refused.
  // Returns a pointer into the blob: aligned relative to the blob's start, so it is
  // aligned in memory only when the blob itself is (copy when the kernel needs it).
  const std::uint8_t* read_constant(std::size_t alignment, std::size_t* size_out, const char* what = "constant",
                                    std::size_t max_size = std::numeric_limits<std::size_t>::max()) {
    const std::size_t at = pos_;
    const std::uint64_t size = read<std::uint64_t>(what);
    if (size > max_size || size > remaining()) {
      const bool capped = max_size != std::numeric_limits<std::size_t>::max();
      fail_at(at, std::string(what) + ": size " + std::to_string(size) + " does not fit (" + std::to_string(remaining()) +
                      " bytes left" + (capped ? ", at most " + std::to_string(max_size) : std::string()) + ")");
    }
    align(alignment, what);
    const std::uint8_t* p = read_bytes(static_cast<std::size_t>(size), what);
    if (size_out != nullptr) *size_out = static_cast<std::size_t>(size);
    return p;
  }

  void skip(std::size_t n, const char* what = "padding") { read_bytes(n, what); }

  // One little-endian scalar: an integer type, float or double.
  // A short read reports "<what> (<type>): needs N bytes, M left" ("u32: ..." without a what).
  template <class T>
  T read(const char* what = nullptr) {
    static_assert(std::is_arithmetic<T>::value && !std::is_same<T, bool>::value, "read<T>: T must be a number");
    T out;
    load_le(take(sizeof(T), what, detail::scalar_name<T>()), &out, 1);
    return out;
  }

  // A scalar that must lie in [lo, hi] (ids, enums, flags).
  template <class T>
  T read_in_range(T lo, T hi, const char* what) {
    const std::size_t at = pos_;
    const T v = read<T>(what);
    if (!(v >= lo && v <= hi)) {
      fail_at(at, std::string(what) + "=" + to_text(v) + ", must be in [" + to_text(lo) + ", " + to_text(hi) + "]");
    }
    return v;
  }

  // A uint32 element count, refused unless count elements of at least
  // min_elem_bytes each could still follow (so a huge count never allocates),
  // and unless it is at most max_count.
  std::uint32_t read_count(std::size_t min_elem_bytes, const char* what,
                           std::uint32_t max_count = std::numeric_limits<std::uint32_t>::max()) {
    const std::size_t at = pos_;
    const std::uint32_t n = read<std::uint32_t>(what);
    if (n > max_count) fail_at(at, std::string(what) + "=" + std::to_string(n) + ", at most " + std::to_string(max_count));
    if (min_elem_bytes != 0 && n > remaining() / min_elem_bytes) {
      fail_at(at, std::string(what) + "=" + std::to_string(n) + " does not fit in the " + std::to_string(remaining()) +
                      " bytes left (needs " + std::to_string(n) + " x " + std::to_string(min_elem_bytes) + ")");
    }
    return n;
  }

  // count little-endian scalars into dst (count * sizeof(T) checked for overflow).
  template <class T>
  void read_into(T* dst, std::size_t count, const char* what = "array") {
    static_assert(std::is_arithmetic<T>::value && !std::is_same<T, bool>::value, "read_into<T>: T must be a number");
    const std::uint8_t* src = read_bytes(checked_mul(count, sizeof(T), what), what);
    load_le(src, dst, count);
  }

  template <class T>
  std::vector<T> read_array(std::size_t count, const char* what = "array") {
    if (count > remaining() / sizeof(T)) {
      fail(std::string(what) + ": needs " + std::to_string(count) + " x " + std::to_string(sizeof(T)) + " bytes, " +
           std::to_string(remaining()) + " left");
    }
    std::vector<T> out(count);
    read_into(out.data(), count, what);
    return out;
  }

  // A uint32 element count followed by that many scalars.
  template <class T>
  std::vector<T> read_counted_array(const char* what, std::uint32_t max_count = std::numeric_limits<std::uint32_t>::max()) {
    return read_array<T>(read_count(sizeof(T), what, max_count), what);
  }

  // A uint32 byte length followed by that many bytes (at most max_len).
  std::string read_string(std::size_t max_len, const char* what = "string") {
    const std::size_t at = pos_;
    const std::uint32_t n = read_count(1, what);
    if (n > max_len) fail_at(at, std::string(what) + ": length " + std::to_string(n) + " exceeds " + std::to_string(max_len));
    const std::uint8_t* p = read_bytes(n, what);
    return std::string(reinterpret_cast<const char*>(p), n);
  }

  // The exact bytes of magic (no terminator), or BlobError.
  void expect_magic(std::string_view magic) {
    const std::size_t at = pos_;
    const std::uint8_t* p = read_bytes(magic.size(), "magic");
    if (std::memcmp(p, magic.data(), magic.size()) != 0) {
      fail_at(at, "bad magic, this is not a '" + std::string(magic) + "' blob");
    }
  }

  // A uint32 format version in [oldest, newest]; returns it.
  std::uint32_t expect_version(std::uint32_t oldest, std::uint32_t newest) {
    const std::size_t at = pos_;
    const std::uint32_t v = read<std::uint32_t>("version");
    if (v < oldest || v > newest) {
      fail_at(at, "format version " + std::to_string(v) + " is not supported (this runtime reads " +
                      std::to_string(oldest) + (oldest == newest ? "" : ".." + std::to_string(newest)) + ")");
    }
    return v;
  }

  // The blob must end here: trailing bytes are an error.
  void expect_end() const {
    if (pos_ != size_) fail(std::to_string(remaining()) + " unexpected trailing bytes");
  }

 private:
  // The one bounds check every read goes through: n bytes at the cursor, or
  // BlobError("<what> (<type>): needs n bytes, m left").
  const std::uint8_t* take(std::size_t n, const char* what, const char* type) {
    if (n > remaining()) {
      std::string name = what != nullptr ? what : "";
      if (type != nullptr) name = name.empty() ? type : name + " (" + type + ")";
      fail(name + ": needs " + std::to_string(n) + (n == 1 ? " byte, " : " bytes, ") + std::to_string(remaining()) +
           " left");
    }
    const std::uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  template <class T>
  static std::string to_text(T v) {
    if constexpr (std::is_floating_point<T>::value) {
      return std::to_string(v);
    } else if constexpr (std::is_signed<T>::value) {
      return std::to_string(static_cast<long long>(v));
    } else {
      return std::to_string(static_cast<unsigned long long>(v));
    }
  }

  template <class T>
  static void load_le(const std::uint8_t* src, T* dst, std::size_t count) {
    if (count == 0) return;
    std::memcpy(dst, src, count * sizeof(T));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    if constexpr (sizeof(T) > 1) {
      for (std::size_t i = 0; i < count; ++i) {
        auto* b = reinterpret_cast<std::uint8_t*>(dst + i);
        for (std::size_t j = 0; j < sizeof(T) / 2; ++j) std::swap(b[j], b[sizeof(T) - 1 - j]);
      }
    }
#endif
  }

  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_;
};

}  // namespace accel_sdk

#endif  // ACCEL_SDK_BLOB_READER_HPP

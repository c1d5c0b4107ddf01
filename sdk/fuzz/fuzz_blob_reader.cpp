// libFuzzer target: accel_sdk::BlobReader on arbitrary bytes.
//
// The input is a program and its data at once: each step reads an opcode byte
// and then performs one reader call whose parameters also come from the input,
// so every call (scalars, arrays, counted arrays, strings, constants, alignment,
// magic, version, ranges) runs at every offset with every length. Only BlobError
// may come out; AddressSanitizer and UndefinedBehaviorSanitizer report the rest.
// Every byte a call returns is read, so an out-of-bounds pointer is touched.
#include <accel_sdk/blob_reader.hpp>

#include <cstddef>
#include <cstdint>

namespace {

volatile std::uint64_t g_sink;

void touch(const std::uint8_t* p, std::size_t n) {
  std::uint64_t s = 0;
  for (std::size_t i = 0; i < n; ++i) s += p[i];
  g_sink = g_sink + s;
}

void step(accel_sdk::BlobReader& r) {
  switch (r.read<std::uint8_t>("opcode") % 16) {
    case 0: g_sink = g_sink + r.read<std::uint8_t>(); break;
    case 1: g_sink = g_sink + r.read<std::uint16_t>(); break;
    case 2: g_sink = g_sink + r.read<std::uint32_t>(); break;
    case 3: g_sink = g_sink + static_cast<std::uint64_t>(r.read<std::int64_t>()); break;
    case 4: g_sink = g_sink + static_cast<std::uint64_t>(r.read<double>() != 0); break;
    case 5: {
      const std::size_t n = r.read<std::uint16_t>("length");
      touch(r.read_bytes(n), n);
      break;
    }
    case 6: {
      const std::string s = r.read_string(r.read<std::uint16_t>("max length"));
      touch(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
      break;
    }
    case 7: {
      const auto v = r.read_counted_array<std::int64_t>("ints", r.read<std::uint32_t>("max count"));
      g_sink = g_sink + v.size();
      break;
    }
    case 8: {
      const auto v = r.read_array<float>(r.read<std::uint32_t>("count"));
      g_sink = g_sink + v.size();
      break;
    }
    case 9: {
      std::size_t n = 0;
      const std::uint8_t* p = r.read_constant(std::size_t{1} << (r.read<std::uint8_t>("alignment") % 14), &n);
      touch(p, n);
      break;
    }
    case 10: r.align(r.read<std::uint8_t>("alignment")); break;  // any value: not a power of two is an error
    case 11: r.expect_magic("AGRB"); break;
    case 12: r.expect_version(1, 3); break;
    case 13: g_sink = g_sink + r.read_in_range<std::int32_t>(-5, 1000, "ranged"); break;
    case 14: {
      const std::uint32_t n = r.read_count(r.read<std::uint8_t>("element size"), "count", 1u << 20);
      g_sink = g_sink + n;
      break;
    }
    case 15: {
      std::uint16_t dst[16];
      r.read_into(dst, r.read<std::uint8_t>("count") % 17);
      g_sink = g_sink + dst[0];
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    accel_sdk::BlobReader r(data, size);
    while (r.remaining() != 0) step(r);
    r.expect_end();
  } catch (const accel_sdk::BlobError&) {
  }
  return 0;
}

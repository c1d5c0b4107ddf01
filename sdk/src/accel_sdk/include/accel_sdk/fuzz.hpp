// accel_sdk/fuzz.hpp: a runtime's blob reader under AddressSanitizer and UndefinedBehaviorSanitizer.
//
// A backend's fuzz target is one line after including its runtime without the Python module:
//
//   #define ACCEL_MYNPU_NO_MODULE 1
//   #include "../src/runtime.cpp"
//   #include <accel_sdk/fuzz.hpp>
//   ACCEL_SDK_FUZZ_TARGET(MynpuRuntime, "fuzz_mynpu_blob")
//
// One input is one blob: R::create parses and validates it; a blob it accepts is run once on
// zero-filled inputs (R's input_specs() / output_specs()). Only exceptions may come out, never a
// crash or an out-of-bounds access. accel_sdk.fuzz builds the target two ways: as a libFuzzer
// target (clang, -fsanitize=fuzzer) when clang has libFuzzer, else with the mutation driver below
// (ACCEL_SDK_FUZZ_DRIVER: seeds from real blobs, random byte changes, extreme 32-bit fields,
// splices, truncations), so it also runs with g++ alone.
#ifndef ACCEL_SDK_FUZZ_HPP
#define ACCEL_SDK_FUZZ_HPP

#include <accel_sdk/blob_reader.hpp>
#include <accel_sdk/runtime.hpp>
#include <accel_sdk/tensor.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

namespace accel_sdk {
namespace fuzz {

// Create a runtime of class R from the blob; run it once on zeros if it accepted the blob.
template <class R>
int one_blob(const std::uint8_t* data, std::size_t size) {
  std::unique_ptr<R> rt;
  try {
    BlobReader reader(data, size);
    rt = R::create(reader, RuntimeOptions{1});
  } catch (const std::exception&) {
    return 0;
  }
  try {
    std::vector<std::vector<std::uint8_t>> buffers;
    std::vector<TensorView> ins, outs;
    buffers.reserve(rt->input_specs().size() + rt->output_specs().size());
    auto make = [&](const std::vector<TensorSpec>& specs, std::vector<TensorView>& views) {
      for (const auto& s : specs) {
        const std::size_t bytes = s.shape.elements() * dtype_size(s.dtype);
        if (bytes > (std::size_t{64} << 20)) return false;  // a huge tensor: parsing was the point
        buffers.emplace_back(bytes, 0);
        views.emplace_back(buffers.back().data(), s.dtype, s.shape);
      }
      return true;
    };
    if (make(rt->input_specs(), ins) && make(rt->output_specs(), outs)) rt->run(ins, outs);
  } catch (const std::exception&) {
  }
  return 0;
}

// The mutation driver: `name ITERATIONS SEED_FILE...`.
inline int drive(int argc, char** argv, int (*target)(const std::uint8_t*, std::size_t), const char* name) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ITERATIONS SEED_FILE...\n", argv[0]);
    return 2;
  }
  const long iterations = std::atol(argv[1]);
  std::vector<std::vector<std::uint8_t>> seeds;
  for (int i = 2; i < argc; ++i) {
    std::ifstream f(argv[i], std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {  // xorshift64*
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1Dull;
  };
  long mutated = 0;
  for (const auto& s : seeds) target(s.data(), s.size());
  for (long it = 0; it < iterations; ++it) {
    std::vector<std::uint8_t> b = seeds[next() % seeds.size()];
    if (b.empty()) continue;
    switch (next() % 4) {
      case 0: {  // a few bytes changed
        const int n = 1 + static_cast<int>(next() % 4);
        for (int k = 0; k < n; ++k) b[next() % b.size()] = static_cast<std::uint8_t>(next());
        break;
      }
      case 1: {  // a 32-bit field of the tables set to an extreme
        static const std::uint32_t extremes[] = {0u, 1u, 2u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu, 64u, 4096u};
        const std::size_t at = (next() % std::min<std::size_t>(b.size(), 8192)) & ~std::size_t{3};
        const std::uint32_t v = extremes[next() % 8];
        for (int k = 0; k < 4 && at + k < b.size(); ++k) b[at + k] = static_cast<std::uint8_t>(v >> (8 * k));
        break;
      }
      case 2: {  // cut, and another blob's tail spliced on
        const auto& o = seeds[next() % seeds.size()];
        b.resize(next() % b.size());
        const std::size_t from = o.empty() ? 0 : next() % o.size();
        b.insert(b.end(), o.begin() + static_cast<std::ptrdiff_t>(from), o.end());
        break;
      }
      default:  // truncated
        b.resize(next() % b.size());
    }
    target(b.data(), b.size());
    ++mutated;
  }
  std::printf("%s: %ld mutated blobs, no sanitizer findings\n", name, mutated);
  return 0;
}

}  // namespace fuzz
}  // namespace accel_sdk

#ifdef ACCEL_SDK_FUZZ_DRIVER
#define ACCEL_SDK_FUZZ_MAIN(name) \
  int main(int argc, char** argv) { return ::accel_sdk::fuzz::drive(argc, argv, LLVMFuzzerTestOneInput, name); }
#else
#define ACCEL_SDK_FUZZ_MAIN(name)
#endif

// The fuzz target of runtime class R (and, in driver builds, its main).
#define ACCEL_SDK_FUZZ_TARGET(R, name)                                                  \
  extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { \
    return ::accel_sdk::fuzz::one_blob<R>(data, size);                                  \
  }                                                                                     \
  ACCEL_SDK_FUZZ_MAIN(name)

#endif  // ACCEL_SDK_FUZZ_HPP

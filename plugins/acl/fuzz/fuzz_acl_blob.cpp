// The acl runtime's blob reader under AddressSanitizer and UndefinedBehaviorSanitizer.
//
// One input is one blob: AclRuntime::create parses and validates it (accel-sdk's graph
// blob reader, then every kernel's own checks, then oneDNN primitives); a blob it accepts
// is run once on zero-filled inputs. Only exceptions may come out, never a crash or an
// out-of-bounds access. Built two ways by run_fuzz.py: as a libFuzzer target (clang,
// -fsanitize=fuzzer) when clang is there, else with a small mutation driver of its own
// (ACL_FUZZ_DRIVER: seeds from real acl blobs, random byte changes, extreme 32-bit
// fields, splices), so it also runs with g++ alone.
#define ACCEL_ACL_NO_MODULE 1
#include "../src/runtime.cpp"

#include <cstdio>
#include <fstream>
#include <iterator>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::unique_ptr<AclRuntime> rt;
  try {
    accel_sdk::BlobReader reader(data, size);
    rt = AclRuntime::create(reader, accel_sdk::RuntimeOptions{1});
  } catch (const std::exception&) {
    return 0;
  }
  try {
    std::vector<std::vector<std::uint8_t>> buffers;
    std::vector<TensorView> ins, outs;
    auto make = [&](const std::vector<TensorSpec>& specs, std::vector<TensorView>& views) {
      for (const auto& s : specs) {
        const std::size_t bytes = s.shape.elements() * accel_sdk::dtype_size(s.dtype);
        if (bytes > (std::size_t{64} << 20)) return false;  // a huge tensor: parsing was the point
        buffers.emplace_back(bytes, 0);
        views.emplace_back(buffers.back().data(), s.dtype, s.shape);
      }
      return true;
    };
    buffers.reserve(rt->input_specs().size() + rt->output_specs().size());
    if (make(rt->input_specs(), ins) && make(rt->output_specs(), outs)) rt->run(ins, outs);
  } catch (const std::exception&) {
  }
  return 0;
}

#ifdef ACL_FUZZ_DRIVER
// usage: fuzz_acl_blob ITERATIONS SEED_FILE...
int main(int argc, char** argv) {
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
  long loaded = 0;
  for (const auto& s : seeds) LLVMFuzzerTestOneInput(s.data(), s.size());
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
    LLVMFuzzerTestOneInput(b.data(), b.size());
    ++loaded;
  }
  std::printf("fuzz_acl_blob: %ld mutated blobs, no sanitizer findings\n", loaded);
  return 0;
}
#endif

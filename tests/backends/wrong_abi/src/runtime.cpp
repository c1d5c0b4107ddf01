// Test fixture: a runtime that publishes an accel_runtime_api table for ABI
// version 999, laid out by hand as a runtime built against another accel-core
// would be. The core must read the version and refuse it without calling anything.
#include <pybind11/pybind11.h>

#include <cstdint>

namespace {

struct foreign_runtime_api {
  std::uint32_t abi_version;
  const char* backend;
  void* entry_points[3];  // create, run, destroy: never called
};

const foreign_runtime_api kApi = {999, "wrongabi", {nullptr, nullptr, nullptr}};

}  // namespace

PYBIND11_MODULE(_runtime, m) {
  m.attr("ABI_VERSION") = 999;
  m.attr("__accel_abi__") = pybind11::capsule(static_cast<const void*>(&kApi), "accel.runtime_api");
}

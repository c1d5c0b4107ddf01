// The ncnn runtime's blob reader under AddressSanitizer and UndefinedBehaviorSanitizer
// (accel_sdk/fuzz.hpp): NcnnRuntime::create reads each mutated blob (the ports, the .param text
// ncnn parses, the .bin read to its last byte) and runs the ones it accepts once on zeros.
// Built and run by run_fuzz.py, against the ncnn library the plugin's build made.
#define ACCEL_NCNN_NO_MODULE 1
#include "../src/runtime.cpp"

#include <accel_sdk/fuzz.hpp>

ACCEL_SDK_FUZZ_TARGET(NcnnRuntime, "fuzz_ncnn_blob")

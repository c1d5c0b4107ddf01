// The acl runtime's blob reader under AddressSanitizer and UndefinedBehaviorSanitizer
// (accel_sdk/fuzz.hpp): AclRuntime::create parses and validates each mutated blob (accel-sdk's
// graph blob reader, every kernel's checks, oneDNN's primitive creation) and runs the ones it
// accepts once. Built and run by run_fuzz.py.
#define ACCEL_ACL_NO_MODULE 1
#include "../src/runtime.cpp"

#include <accel_sdk/fuzz.hpp>

ACCEL_SDK_FUZZ_TARGET(AclRuntime, "fuzz_acl_blob")

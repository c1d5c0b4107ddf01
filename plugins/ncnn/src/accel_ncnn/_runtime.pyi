"""The compiled runtime (src/runtime.cpp); its module glue and this interface come from accel-sdk."""

from accel_sdk.runtime_module import ABI_VERSION as ABI_VERSION
from accel_sdk.runtime_module import Runtime as Runtime
from accel_sdk.runtime_module import __accel_abi__ as __accel_abi__

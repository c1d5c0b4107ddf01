# accel-sdk for CMake: find_package(accel_sdk CONFIG REQUIRED), then
#
#   accel_add_runtime(<target> <sources...> [DESTINATION <package dir>])
#
# builds <target> as a Python extension module (python_add_library MODULE
# WITH_SOABI) with pybind11, the accel-sdk headers (accel_sdk/*.hpp) and the
# runtime ABI header of the installed accel-core (accel/runtime_abi.h), in
# C++17, -O3, hidden visibility; with DESTINATION it is also installed there
# (the package folder inside the wheel). The header folders are in
# ACCEL_SDK_INCLUDE_DIR and ACCEL_CORE_INCLUDE_DIR.
#
# Needs a C++17 compiler (GCC >= 8, Clang >= 7, MSVC 2019) and, in the build
# environment, Python >= 3.10 with accel-core and pybind11. A project may declare
# `project(<name> LANGUAGES NONE)`: this file then looks for the compiler itself
# and, without one, stops with one line saying what to install.
# scikit-build-core finds this file through accel-sdk's `cmake.root` entry
# point; elsewhere pass -Daccel_sdk_DIR=$(python -c "import accel_sdk; print(accel_sdk.get_cmake_dir())").

include_guard(GLOBAL)

# A C++17 compiler, checked before anything else. (Error texts start with a space:
# CMake then prints them as one line, unwrapped, easy to find in a pip build log.)
get_property(_accel_sdk_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
if(NOT "CXX" IN_LIST _accel_sdk_languages)
  include(CheckLanguage)
  check_language(CXX)
  if(NOT CMAKE_CXX_COMPILER)
    message(FATAL_ERROR
      " accel-sdk: no C++ compiler found; building an accel backend needs a C++17 compiler "
      "(GCC >= 8 or Clang >= 7: apt install g++, dnf install gcc-c++, xcode-select --install), or set CXX to one")
  endif()
  enable_language(CXX)
endif()
if(NOT "cxx_std_17" IN_LIST CMAKE_CXX_COMPILE_FEATURES)
  message(FATAL_ERROR
    " accel-sdk: the C++ compiler ${CMAKE_CXX_COMPILER} (${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}) "
    "does not support C++17; building an accel backend needs GCC >= 8 or Clang >= 7 (set CXX to one)")
endif()

get_filename_component(ACCEL_SDK_INCLUDE_DIR "${CMAKE_CURRENT_LIST_DIR}/../include" ABSOLUTE)

if(NOT TARGET Python::Module)
  find_package(Python 3.10 REQUIRED COMPONENTS Interpreter Development.Module)
endif()
if(NOT TARGET pybind11::headers)
  if(NOT DEFINED PYBIND11_FINDPYTHON)
    set(PYBIND11_FINDPYTHON ON)
  endif()
  find_package(pybind11 CONFIG QUIET)
  if(NOT pybind11_FOUND)  # not on the search path: ask the interpreter's pybind11 where it is
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c "import pybind11; print(pybind11.get_cmake_dir(), end='')"
      OUTPUT_VARIABLE _accel_sdk_pybind11_dir
      RESULT_VARIABLE _accel_sdk_result)
    if(NOT _accel_sdk_result EQUAL 0)
      message(FATAL_ERROR " accel-sdk: pybind11 not found; install it in the build environment (build requirement \"pybind11\")")
    endif()
    find_package(pybind11 CONFIG REQUIRED HINTS "${_accel_sdk_pybind11_dir}" NO_DEFAULT_PATH)
  endif()
endif()

execute_process(
  COMMAND "${Python_EXECUTABLE}" -c "import accel; print(accel.get_include(), end='')"
  OUTPUT_VARIABLE ACCEL_CORE_INCLUDE_DIR
  ERROR_VARIABLE _accel_sdk_error
  RESULT_VARIABLE _accel_sdk_result)
if(NOT _accel_sdk_result EQUAL 0 OR NOT EXISTS "${ACCEL_CORE_INCLUDE_DIR}/accel/runtime_abi.h")
  message(FATAL_ERROR
    " accel-sdk: no accel/runtime_abi.h from accel-core for ${Python_EXECUTABLE}; "
    "install accel-core in the build environment (build requirement \"accel-core\").\n${_accel_sdk_error}")
endif()

function(accel_add_runtime target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "DESTINATION" "")
  if(NOT ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "accel_add_runtime(${target} ...): no source files")
  endif()
  python_add_library(${target} MODULE WITH_SOABI ${ARG_UNPARSED_ARGUMENTS})
  target_link_libraries(${target} PRIVATE pybind11::headers)
  target_include_directories(${target} PRIVATE "${ACCEL_SDK_INCLUDE_DIR}" "${ACCEL_CORE_INCLUDE_DIR}")
  target_compile_features(${target} PRIVATE cxx_std_17)
  set_target_properties(${target} PROPERTIES
    CXX_EXTENSIONS OFF
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(NOT MSVC)
    target_compile_options(${target} PRIVATE -O3)
  endif()
  if(ARG_DESTINATION)
    install(TARGETS ${target} LIBRARY DESTINATION "${ARG_DESTINATION}")
  endif()
endfunction()

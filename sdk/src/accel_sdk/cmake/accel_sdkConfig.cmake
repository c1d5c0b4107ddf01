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
#   accel_link_onednn(<target> [DESTINATION <package dir>])
#
# links <target> with oneDNN 3.2 (GNU OpenMP build) from two wheels, which the
# plugin's pyproject.toml declares itself:
#
#   [build-system]
#   requires = [..., "onednn-devel-cpu-gomp==2023.2.0", "onednn-cpu-gomp==2023.2.0"]
#   [project]
#   dependencies = [..., "onednn-cpu-gomp==2023.2.0"]
#
# onednn-devel-cpu-gomp holds the headers and dnnl-config.cmake, onednn-cpu-gomp
# libdnnl.so.3 (in <prefix>/lib, outside site-packages). Both are located by
# asking the build's Python for the distributions' files (importlib.metadata):
# under pip's build isolation they sit in the build environment's overlay, not
# in sys.prefix. The extension gets an install RPATH relative to itself
# ($ORIGIN/<up to site-packages>/<site-packages to the runtime wheel's lib>),
# so it finds libdnnl.so.3 in whatever environment the plugin wheel is
# installed into, provided onednn-cpu-gomp is installed there (a dependency);
# the build tree gets the absolute folder. DESTINATION is the extension's
# folder relative to site-packages; it defaults to the DESTINATION given to
# accel_add_runtime. GNU OpenMP's libgomp is linked too (omp_set_num_threads,
# see accel_sdk/onednn.hpp; it comes with the compiler and the system), and with GCC
# the target is compiled with -fopenmp, so accel_sdk::onednn::parallel shares oneDNN's
# OpenMP threads.
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
    set_target_properties(${target} PROPERTIES ACCEL_SDK_DESTINATION "${ARG_DESTINATION}")
    install(TARGETS ${target} LIBRARY DESTINATION "${ARG_DESTINATION}")
  endif()
endfunction()

# -- oneDNN ------------------------------------------------------------------------------

set(ACCEL_SDK_ONEDNN_VERSION "2023.2.0")

# Asks the build's Python where <dist>'s file ending in <suffix> is; sets <out> (absolute
# path) and <out>_SITE (the folder the distribution's paths are relative to: its site-packages).
function(_accel_sdk_dist_file out dist suffix)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c "
import importlib.metadata as md, sys
try:
    d = md.distribution(sys.argv[1])
except md.PackageNotFoundError:
    sys.exit(3)
hits = [f for f in (d.files or []) if str(f).replace(chr(92), '/').endswith(sys.argv[2])]
if not hits:
    sys.exit(4)
print(d.locate_file(hits[0]).resolve(), d.locate_file('').resolve(), d.version, sep=chr(10), end='')
" "${dist}" "${suffix}"
    OUTPUT_VARIABLE _out
    RESULT_VARIABLE _result)
  if(_result EQUAL 3)
    set(${out} "" PARENT_SCOPE)
    set(${out}_WHY "is not installed" PARENT_SCOPE)
  elseif(NOT _result EQUAL 0)
    set(${out} "" PARENT_SCOPE)
    set(${out}_WHY "has no ${suffix}" PARENT_SCOPE)
  else()
    string(REPLACE "\n" ";" _out "${_out}")
    list(GET _out 0 _file)
    list(GET _out 1 _site)
    list(GET _out 2 _version)
    set(${out} "${_file}" PARENT_SCOPE)
    set(${out}_SITE "${_site}" PARENT_SCOPE)
    set(${out}_VERSION "${_version}" PARENT_SCOPE)
  endif()
endfunction()

function(accel_link_onednn target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "DESTINATION" "")
  if(NOT TARGET ${target})
    message(FATAL_ERROR " accel_link_onednn(${target}): no such target (call accel_add_runtime first)")
  endif()
  if(NOT TARGET DNNL::dnnl)
    set(_need "add \"onednn-devel-cpu-gomp==${ACCEL_SDK_ONEDNN_VERSION}\" and \"onednn-cpu-gomp==${ACCEL_SDK_ONEDNN_VERSION}\" to [build-system].requires, and \"onednn-cpu-gomp==${ACCEL_SDK_ONEDNN_VERSION}\" to [project].dependencies")
    _accel_sdk_dist_file(_config onednn-devel-cpu-gomp "dnnl/dnnl-config.cmake")
    if(NOT _config)
      message(FATAL_ERROR " accel-sdk: oneDNN's CMake files not found (onednn-devel-cpu-gomp ${_config_WHY} for ${Python_EXECUTABLE}); ${_need}")
    endif()
    _accel_sdk_dist_file(_lib onednn-cpu-gomp "libdnnl.so.3")
    if(NOT _lib)
      message(FATAL_ERROR " accel-sdk: libdnnl.so.3 not found (onednn-cpu-gomp ${_lib_WHY} for ${Python_EXECUTABLE}); ${_need}")
    endif()
    get_filename_component(_dnnl_dir "${_config}" DIRECTORY)
    find_package(dnnl CONFIG REQUIRED PATHS "${_dnnl_dir}" NO_DEFAULT_PATH)
    get_filename_component(_lib_dir "${_lib}" DIRECTORY)
    file(RELATIVE_PATH _lib_from_site "${_lib_SITE}" "${_lib_dir}")
    string(REGEX REPLACE "/+$" "" _lib_from_site "${_lib_from_site}")
    set(ACCEL_SDK_ONEDNN_LIB_DIR "${_lib_dir}" CACHE INTERNAL "folder of libdnnl.so.3 at build time")
    set(ACCEL_SDK_ONEDNN_LIB_FROM_SITE "${_lib_from_site}" CACHE INTERNAL "that folder relative to site-packages")
  endif()

  # Where the extension lands relative to site-packages: scikit-build-core's platlib
  # folder is site-packages, CMAKE_INSTALL_PREFIX may be a package inside it (wheel.install-dir).
  set(_dest "${ARG_DESTINATION}")
  if(NOT _dest)
    get_target_property(_dest ${target} ACCEL_SDK_DESTINATION)
  endif()
  if(NOT _dest)
    set(_dest ".")
  endif()
  if(DEFINED SKBUILD_PLATLIB_DIR)
    get_filename_component(_ext_dir "${CMAKE_INSTALL_PREFIX}/${_dest}" ABSOLUTE)
    get_filename_component(_site_dir "${SKBUILD_PLATLIB_DIR}" ABSOLUTE)
    file(RELATIVE_PATH _up "${_ext_dir}" "${_site_dir}")
  else()
    get_filename_component(_ext_dir "/site/${_dest}" ABSOLUTE)
    file(RELATIVE_PATH _up "${_ext_dir}" "/site")
  endif()
  if(APPLE)
    set(_origin "@loader_path")
  else()
    set(_origin "$ORIGIN")
  endif()
  string(REGEX REPLACE "/+$" "" _up "${_up}")
  set(_rpath "${_origin}")
  if(_up)
    string(APPEND _rpath "/${_up}")
  endif()
  if(ACCEL_SDK_ONEDNN_LIB_FROM_SITE)
    string(APPEND _rpath "/${ACCEL_SDK_ONEDNN_LIB_FROM_SITE}")
  endif()

  target_link_libraries(${target} PRIVATE DNNL::dnnl)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC's OpenMP is GNU OpenMP, oneDNN's own: accel_sdk::onednn::parallel then runs on
    # oneDNN's threads. (Clang's -fopenmp would bring a second runtime, libomp: not there.)
    target_compile_options(${target} PRIVATE -fopenmp)
    target_link_libraries(${target} PRIVATE gomp)  # the GCC driver knows where its libgomp is
  else()
    find_library(ACCEL_SDK_GOMP NAMES gomp libgomp.so.1)
    if(ACCEL_SDK_GOMP)
      target_link_libraries(${target} PRIVATE "${ACCEL_SDK_GOMP}")
    endif()  # else omp_* resolve through libdnnl.so.3's own libgomp.so.1 at load time
  endif()
  set_property(TARGET ${target} APPEND PROPERTY INSTALL_RPATH "${_rpath}")
  set_property(TARGET ${target} APPEND PROPERTY BUILD_RPATH "${ACCEL_SDK_ONEDNN_LIB_DIR}")
  message(STATUS "accel-sdk: ${target} links oneDNN from ${ACCEL_SDK_ONEDNN_LIB_DIR}, install RPATH ${_rpath}")
endfunction()

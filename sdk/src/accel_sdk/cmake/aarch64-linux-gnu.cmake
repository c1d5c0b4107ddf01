# CMake toolchain file: build for 64-bit Arm Linux (aarch64, glibc) on an x86-64 Debian or
# Ubuntu machine, with the distribution's cross compiler and its arm64 (multiarch) packages:
#
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install g++-aarch64-linux-gnu qemu-user libarm-compute-dev:arm64
#
#   cmake -DCMAKE_TOOLCHAIN_FILE=<accel_sdk.get_cmake_dir()>/aarch64-linux-gnu.cmake ...
#
# (`accel-sdk arm64 build <plugin>` builds a plugin's wheel with it; docs/arm64.md.)
#
# Libraries and headers of arm64 packages are found where Debian's multiarch layout puts them,
# /usr/lib/aarch64-linux-gnu and /usr/include/aarch64-linux-gnu; the host's x86-64 folders are
# never searched. Programs (python, pkg-config, ...) are the host's. What the build compiles for
# the target runs under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR: try_run, ctest).
#
# Python extension modules. When cross-compiling, CMake's FindPython does not ask the build's
# interpreter anything about the target, so without more it names every module plain `.so`.
# Given the target Python's prefix, -DPython_ROOT_DIR=<root>/usr (an arm64 python3.11 with its
# development files, unpacked from python3.11-dev:arm64 and its dependencies), this file is also
# included right after each project() (CMAKE_PROJECT_INCLUDE) and finds the target's development
# files there, through its aarch64-linux-gnu-python3.11-config: headers and the extension suffix
# (cpython-311-aarch64-linux-gnu), before accel-sdk or pybind11 look for Python. Pass the build's
# own interpreter as -DPython_EXECUTABLE: CMake code runs it (accel.get_include(), pybind11's
# location), which is right, since those headers are the same on every architecture.

if(NOT CMAKE_SYSTEM_INFO_FILE)
  # -- read as the toolchain: before the platform's information is loaded ----------------------

  set(CMAKE_SYSTEM_NAME Linux)
  set(CMAKE_SYSTEM_PROCESSOR aarch64)
  set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
  set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
  set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

  find_program(_ACCEL_AARCH64_QEMU qemu-aarch64)
  if(_ACCEL_AARCH64_QEMU)
    set(CMAKE_CROSSCOMPILING_EMULATOR "${_ACCEL_AARCH64_QEMU}")
  endif()

  # The cross compiler's own tree (its libc, libstdc++) first, then the multiarch folders of the
  # host's file system: the arm64 packages' libraries and headers.
  set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
  set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
  set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
  set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
  list(APPEND CMAKE_SYSTEM_LIBRARY_PATH /usr/lib/aarch64-linux-gnu)
  list(APPEND CMAKE_SYSTEM_INCLUDE_PATH /usr/include/aarch64-linux-gnu)
  list(APPEND CMAKE_SYSTEM_IGNORE_PATH
    /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/include/x86_64-linux-gnu
    /usr/lib64 /lib64)

  # An arm64 shared library's own dependencies (libarm_compute.so needs libarm_compute_core.so)
  # are looked up by the linker in the multiarch folder too.
  foreach(_kind EXE SHARED MODULE)
    string(APPEND CMAKE_${_kind}_LINKER_FLAGS_INIT " -Wl,-rpath-link,/usr/lib/aarch64-linux-gnu")
  endforeach()

  # pybind11 computes the module suffix from FindPython's results, not by running Python.
  set(PYBIND11_USE_CROSSCOMPILING ON CACHE BOOL "pybind11: cross-compiling (set by aarch64-linux-gnu.cmake)")

  if(Python_ROOT_DIR AND NOT CMAKE_PROJECT_INCLUDE)
    set(CMAKE_PROJECT_INCLUDE "${CMAKE_CURRENT_LIST_FILE}")
  endif()
else()
  # -- read after project(): the target Python's development files ----------------------------
  if(NOT TARGET Python::Module AND Python_ROOT_DIR)
    get_property(_accel_aarch64_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
    if(NOT "CXX" IN_LIST _accel_aarch64_languages)
      enable_language(CXX)  # FindPython checks the target's pointer size
    endif()
    find_package(Python 3 REQUIRED COMPONENTS Development.Module)
    if(NOT Python_SOABI)
      message(FATAL_ERROR
        " aarch64-linux-gnu.cmake: no extension suffix from the Python development files in "
        "${Python_ROOT_DIR} (expected bin/aarch64-linux-gnu-python3.X-config there)")
    endif()
    message(STATUS "aarch64-linux-gnu.cmake: target Python ${Python_VERSION} in ${Python_ROOT_DIR}, "
      "modules .${Python_SOABI}.so")
  endif()
endif()

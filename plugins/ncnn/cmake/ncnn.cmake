# The ncnn library the runtime links: the pinned source distribution, built static with only
# what the runtime uses (no Vulkan, tools, examples, Python, int8/bf16, and only the layers
# the serializer writes plus those ncnn creates inside them), cached per checkout.
#
#   ACCEL_NCNN_SOURCE_DIR (CMake variable or environment): an unpacked ncnn source to build instead
#   ACCEL_NCNN_CACHE (CMake variable or environment): the cache folder (default: .ncnn-cache here)
#
# The cache holds the source archive (its sha256 checked), the unpacked source and one
# build + install per set of options, so a second build of the plugin only compiles runtime.cpp.

set(ACCEL_NCNN_VERSION "1.0.20261020")
set(ACCEL_NCNN_SHA256 "ad8cdd63e9755cfa8e23b9b6d9ce46156077d80298a89e7c3ba325ffccfca200")

# The layers the serializer writes, and those ncnn creates inside them or between them
# (Split for shared blobs; Packing, Cast, Padding, Crop for layouts and borders; Noop).
set(ACCEL_NCNN_LAYERS
    Input Convolution ConvolutionDepthWise InnerProduct Pooling ReLU Clip Sigmoid LRN Softmax Concat
    Eltwise BinaryOp Flatten Reshape BatchNorm Split Packing Cast Padding Crop Noop)

set(ACCEL_NCNN_OPTIONS
    -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON
    -DNCNN_SHARED_LIB=OFF
    -DNCNN_VULKAN=OFF
    -DNCNN_BUILD_TOOLS=OFF
    -DNCNN_BUILD_EXAMPLES=OFF
    -DNCNN_BUILD_BENCHMARK=OFF
    -DNCNN_BUILD_TESTS=OFF
    -DNCNN_PYTHON=OFF
    -DNCNN_INSTALL_SDK=ON
    -DNCNN_INT8=OFF
    -DNCNN_BF16=OFF
    -DNCNN_WEIGHT_QUANT=OFF
    -DNCNN_C_API=OFF
    -DNCNN_PIXEL=OFF
    -DNCNN_PIXEL_ROTATE=OFF
    -DNCNN_PIXEL_AFFINE=OFF
    -DNCNN_PIXEL_DRAWING=OFF
    # x86 variants for int8, bf16 and fp16 arithmetic the runtime never uses
    -DNCNN_XOP=OFF
    -DNCNN_FMA4=OFF
    -DNCNN_AVXVNNI=OFF
    -DNCNN_AVXVNNIINT8=OFF
    -DNCNN_AVXVNNIINT16=OFF
    -DNCNN_AVXNECONVERT=OFF
    -DNCNN_AVX512VNNI=OFF
    -DNCNN_AVX512BF16=OFF
    -DNCNN_AVX512FP16=OFF)

function(accel_ncnn_fail what)
  message(FATAL_ERROR " accel-ncnn: ${what}")
endfunction()

if(NOT ACCEL_NCNN_CACHE)
  if(DEFINED ENV{ACCEL_NCNN_CACHE})
    set(ACCEL_NCNN_CACHE "$ENV{ACCEL_NCNN_CACHE}")
  else()
    set(ACCEL_NCNN_CACHE "${CMAKE_CURRENT_SOURCE_DIR}/.ncnn-cache")
  endif()
endif()
if(NOT ACCEL_NCNN_SOURCE_DIR AND DEFINED ENV{ACCEL_NCNN_SOURCE_DIR})
  set(ACCEL_NCNN_SOURCE_DIR "$ENV{ACCEL_NCNN_SOURCE_DIR}")
endif()
file(MAKE_DIRECTORY "${ACCEL_NCNN_CACHE}")
# One build of the cache at a time (two pip installs of one checkout wait for each other).
file(LOCK "${ACCEL_NCNN_CACHE}/.lock" TIMEOUT 3600 RESULT_VARIABLE lock_result)
if(lock_result)
  accel_ncnn_fail("cannot lock ${ACCEL_NCNN_CACHE}: ${lock_result}")
endif()

if(ACCEL_NCNN_SOURCE_DIR)
  if(NOT EXISTS "${ACCEL_NCNN_SOURCE_DIR}/src/net.h")
    accel_ncnn_fail("ACCEL_NCNN_SOURCE_DIR=${ACCEL_NCNN_SOURCE_DIR} is not an ncnn source tree (no src/net.h)")
  endif()
  set(ncnn_source "${ACCEL_NCNN_SOURCE_DIR}")
else()
  set(archive "${ACCEL_NCNN_CACHE}/ncnn-${ACCEL_NCNN_VERSION}.tar.gz")
  if(EXISTS "${archive}")
    file(SHA256 "${archive}" got)
    if(NOT got STREQUAL ACCEL_NCNN_SHA256)
      message(STATUS "accel-ncnn: ${archive} has sha256 ${got}, not the pinned one: fetching it again")
      file(REMOVE "${archive}")
    endif()
  endif()
  if(NOT EXISTS "${archive}")
    find_package(Python3 COMPONENTS Interpreter REQUIRED)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" "${CMAKE_CURRENT_LIST_DIR}/fetch_ncnn.py" "${ACCEL_NCNN_VERSION}"
              "${ACCEL_NCNN_SHA256}" "${archive}"
      RESULT_VARIABLE fetch_result)
    if(fetch_result)
      accel_ncnn_fail("fetching ncnn ${ACCEL_NCNN_VERSION} failed (or give an unpacked source: ACCEL_NCNN_SOURCE_DIR)")
    endif()
  endif()
  set(ncnn_source "${ACCEL_NCNN_CACHE}/ncnn-${ACCEL_NCNN_VERSION}")
  if(NOT EXISTS "${ncnn_source}/.accel-unpacked")
    file(REMOVE_RECURSE "${ncnn_source}")
    file(ARCHIVE_EXTRACT INPUT "${archive}" DESTINATION "${ACCEL_NCNN_CACHE}")
    if(NOT EXISTS "${ncnn_source}/src/net.h")
      accel_ncnn_fail("${archive} did not unpack to ${ncnn_source}")
    endif()
    file(TOUCH "${ncnn_source}/.accel-unpacked")
  endif()
endif()

# Every layer of ncnn's list off but ours.
file(STRINGS "${ncnn_source}/src/CMakeLists.txt" layer_lines REGEX "^ *ncnn_add_layer\\(")
set(layer_options)
foreach(line IN LISTS layer_lines)
  string(REGEX REPLACE "^ *ncnn_add_layer\\(([A-Za-z0-9_]+).*" "\\1" layer "${line}")
  string(TOLOWER "${layer}" lower)
  if(layer IN_LIST ACCEL_NCNN_LAYERS)
    list(APPEND layer_options "-DWITH_LAYER_${lower}=ON")
  else()
    list(APPEND layer_options "-DWITH_LAYER_${lower}=OFF")
  endif()
endforeach()
foreach(layer IN LISTS ACCEL_NCNN_LAYERS)
  string(TOLOWER "${layer}" lower)
  if(NOT "-DWITH_LAYER_${lower}=ON" IN_LIST layer_options)
    accel_ncnn_fail("ncnn at ${ncnn_source} has no layer ${layer}")
  endif()
endforeach()

# The build folder is named by what it is built from and with, so a change of any rebuilds it.
string(SHA256 key "${ncnn_source};${ACCEL_NCNN_VERSION};${ACCEL_NCNN_OPTIONS};${layer_options};${CMAKE_CXX_COMPILER}")
string(SUBSTRING "${key}" 0 12 key)
set(ncnn_build "${ACCEL_NCNN_CACHE}/build-${key}")
set(ncnn_install "${ACCEL_NCNN_CACHE}/install-${key}")
if(NOT EXISTS "${ncnn_install}/.accel-built")
  file(REMOVE_RECURSE "${ncnn_build}" "${ncnn_install}")
  cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
  if(DEFINED ENV{CMAKE_BUILD_PARALLEL_LEVEL})
    set(cores "$ENV{CMAKE_BUILD_PARALLEL_LEVEL}")
  endif()
  set(generator -G "${CMAKE_GENERATOR}")
  if(CMAKE_MAKE_PROGRAM)
    list(APPEND generator "-DCMAKE_MAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}")
  endif()
  message(STATUS "accel-ncnn: building ncnn ${ACCEL_NCNN_VERSION} (static, ${cores} jobs) in ${ncnn_build}")
  string(TIMESTAMP started "%s")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${ncnn_source}" -B "${ncnn_build}" ${generator}
            "-DCMAKE_C_COMPILER=${CMAKE_C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}"
            "-DCMAKE_INSTALL_PREFIX=${ncnn_install}" ${ACCEL_NCNN_OPTIONS} ${layer_options}
    OUTPUT_FILE "${ncnn_build}.configure.log" ERROR_FILE "${ncnn_build}.configure.log"
    RESULT_VARIABLE result)
  if(result)
    accel_ncnn_fail("configuring ncnn failed; see ${ncnn_build}.configure.log")
  endif()
  execute_process(
    COMMAND "${CMAKE_COMMAND}" --build "${ncnn_build}" --target install --parallel ${cores}
    OUTPUT_FILE "${ncnn_build}.build.log" ERROR_FILE "${ncnn_build}.build.log"
    RESULT_VARIABLE result)
  if(result)
    accel_ncnn_fail("building ncnn failed; see ${ncnn_build}.build.log")
  endif()
  string(TIMESTAMP finished "%s")
  math(EXPR seconds "${finished} - ${started}")
  message(STATUS "accel-ncnn: ncnn built in ${seconds} s")
  file(TOUCH "${ncnn_install}/.accel-built")
endif()
file(LOCK "${ACCEL_NCNN_CACHE}/.lock" RELEASE)

find_package(ncnn CONFIG REQUIRED PATHS "${ncnn_install}/lib/cmake/ncnn" "${ncnn_install}/lib64/cmake/ncnn"
             NO_DEFAULT_PATH)

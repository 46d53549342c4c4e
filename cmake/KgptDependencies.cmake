# Finds every package kgpt builds against and gives each one target to link:
#   Kokkos::kokkos, kgpt::kokkos_kernels, MPI::MPI_CXX, HDF5::HDF5, kgpt::yaml_cpp,
#   kgpt::sentencepiece, ZLIB::ZLIB, kgpt::zstd, kgpt::brotli, and, in CUDA
#   builds, kgpt::nccl (CPU builds may add the library kgpt_nccl_transport, see KGPT_NCCL_TRANSPORT).
#   Works with Debian 12's Trilinos packages and with upstream installs found through CMAKE_PREFIX_PATH.

find_package(Kokkos 3.4 REQUIRED)

# Debian's Trilinos Kokkos (3.4.01) exports Kokkos::kokkos with the include folder <prefix>/include,
# while its headers live in <prefix>/include/trilinos (which Kokkos_INCLUDE_DIRS names correctly).
if(TARGET trilinos_kokkoscore)
  set(_kgpt_kokkos_includes "")
  foreach(_dir IN LISTS Kokkos_INCLUDE_DIRS)
    get_filename_component(_dir "${_dir}" REALPATH)
    list(APPEND _kgpt_kokkos_includes "${_dir}")
  endforeach()
  set_target_properties(Kokkos::kokkos PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_kgpt_kokkos_includes}"
    INTERFACE_LINK_LIBRARIES "trilinos_kokkosalgorithms;trilinos_kokkoscontainers;trilinos_kokkoscore")
  if(NOT Kokkos_VERSION)
    set(Kokkos_VERSION "${PACKAGE_VERSION}")
  endif()
endif()

# CUDA builds embed the GPU's machine code (SASS) only, not PTX as well: upstream Kokkos asks nvcc for
# both (-arch=sm_XX), which adds the PTX of every kernel to every executable, and kgpt is built for
# the GPU it runs on (-arch=compute_XX -code=sm_XX, as the cuda preset's CMAKE_CXX_FLAGS say too:
# nvcc_wrapper refuses two different architecture flags).
if(TARGET Kokkos::kokkoscore AND "CUDA" IN_LIST Kokkos_DEVICES)
  foreach(_kgpt_property INTERFACE_COMPILE_OPTIONS INTERFACE_LINK_OPTIONS)
    get_target_property(_kgpt_options Kokkos::kokkoscore ${_kgpt_property})
    if(_kgpt_options)
      string(REGEX REPLACE "-arch=sm_([0-9]+a?)" "-arch=compute_\\1;-code=sm_\\1" _kgpt_options "${_kgpt_options}")
      set_target_properties(Kokkos::kokkoscore PROPERTIES ${_kgpt_property} "${_kgpt_options}")
    endif()
  endforeach()
endif()

# Kokkos Kernels: upstream exports Kokkos::kokkoskernels; Debian exports trilinos_kokkoskernels
# without include folders and ships no version file, so no version is asked for.
find_package(KokkosKernels REQUIRED)
add_library(kgpt_kokkos_kernels INTERFACE)
add_library(kgpt::kokkos_kernels ALIAS kgpt_kokkos_kernels)
if(TARGET Kokkos::kokkoskernels)
  target_link_libraries(kgpt_kokkos_kernels INTERFACE Kokkos::kokkoskernels)
elseif(TARGET trilinos_kokkoskernels)
  target_link_libraries(kgpt_kokkos_kernels INTERFACE trilinos_kokkoskernels Kokkos::kokkos)
else()
  message(FATAL_ERROR "KokkosKernels was found but exports neither Kokkos::kokkoskernels nor trilinos_kokkoskernels")
endif()
set(KGPT_KOKKOS_KERNELS_VERSION "${KokkosKernels_VERSION}")
if(NOT KGPT_KOKKOS_KERNELS_VERSION)
  set(KGPT_KOKKOS_KERNELS_VERSION "${Kokkos_VERSION} (Trilinos)")
endif()

find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT TARGET HDF5::HDF5)
  add_library(HDF5::HDF5 INTERFACE IMPORTED)
  target_include_directories(HDF5::HDF5 INTERFACE ${HDF5_INCLUDE_DIRS})
  target_link_libraries(HDF5::HDF5 INTERFACE ${HDF5_LIBRARIES})
endif()

find_package(yaml-cpp REQUIRED)
add_library(kgpt_yaml_cpp INTERFACE)
add_library(kgpt::yaml_cpp ALIAS kgpt_yaml_cpp)
if(TARGET yaml-cpp::yaml-cpp)
  target_link_libraries(kgpt_yaml_cpp INTERFACE yaml-cpp::yaml-cpp)
else()
  target_link_libraries(kgpt_yaml_cpp INTERFACE yaml-cpp)
endif()

# SentencePiece (tokenizer training, encoding and decoding) through its pkg-config file, as Debian's
# libsentencepiece-dev and upstream's `make install` ship it; zlib and zstd for model artifacts.
find_package(PkgConfig REQUIRED)
pkg_check_modules(KGPT_SENTENCEPIECE IMPORTED_TARGET sentencepiece)
if(NOT KGPT_SENTENCEPIECE_FOUND)
  message(FATAL_ERROR "SentencePiece was not found (pkg-config sentencepiece): install libsentencepiece-dev, "
                      "or add the prefix of an install to PKG_CONFIG_PATH")
endif()
add_library(kgpt_sentencepiece INTERFACE)
add_library(kgpt::sentencepiece ALIAS kgpt_sentencepiece)
target_link_libraries(kgpt_sentencepiece INTERFACE PkgConfig::KGPT_SENTENCEPIECE)
find_package(ZLIB REQUIRED)
# brotli, the artifacts' third compressor (export.compression: brotli): Debian's libbrotli-dev.
pkg_check_modules(KGPT_BROTLI IMPORTED_TARGET libbrotlienc libbrotlidec)
if(NOT KGPT_BROTLI_FOUND)
  message(FATAL_ERROR "brotli was not found (pkg-config libbrotlienc libbrotlidec): install libbrotli-dev")
endif()
add_library(kgpt_brotli INTERFACE)
add_library(kgpt::brotli ALIAS kgpt_brotli)
target_link_libraries(kgpt_brotli INTERFACE PkgConfig::KGPT_BROTLI)

# zstd, the artifacts' second compressor (export.compression: zstd): Debian's libzstd-dev.
pkg_check_modules(KGPT_ZSTD IMPORTED_TARGET libzstd)
if(NOT KGPT_ZSTD_FOUND)
  message(FATAL_ERROR "zstd was not found (pkg-config libzstd): install libzstd-dev, "
                      "or add the prefix of an install to PKG_CONFIG_PATH")
endif()
add_library(kgpt_zstd INTERFACE)
add_library(kgpt::zstd ALIAS kgpt_zstd)
target_link_libraries(kgpt_zstd INTERFACE PkgConfig::KGPT_ZSTD)
# nlohmann/json (header only) for the JSON header of safetensors files: Debian's nlohmann-json3-dev.
find_package(nlohmann_json 3 REQUIRED)
# ICU's Unicode character database (general categories, White_Space, case folding) for the split
# patterns of tiktoken-style BPE: Debian's libicu-dev.
find_package(ICU REQUIRED COMPONENTS uc data)

# CUDA and NCCL come together, exactly when the Kokkos found was built with CUDA: the Kokkos decides
# (the code's backend, core/backend.hpp, follows Kokkos too). A KGPT_ENABLE_CUDA given on the command
# line (the cuda preset gives ON) must agree with it.
if("CUDA" IN_LIST Kokkos_DEVICES)
  set(_kgpt_kokkos_has_cuda ON)
else()
  set(_kgpt_kokkos_has_cuda OFF)
endif()
if(DEFINED CACHE{KGPT_ENABLE_CUDA} AND NOT KGPT_ENABLE_CUDA STREQUAL "" AND
   NOT (KGPT_ENABLE_CUDA AND _kgpt_kokkos_has_cuda) AND NOT (NOT KGPT_ENABLE_CUDA AND NOT _kgpt_kokkos_has_cuda))
  message(FATAL_ERROR "KGPT_ENABLE_CUDA is ${KGPT_ENABLE_CUDA} but the Kokkos found (${Kokkos_DIR}, devices: "
                      "${Kokkos_DEVICES}) decides the backend: point CMAKE_PREFIX_PATH at a Kokkos with CUDA for a CUDA "
                      "build, or at one without for a CPU build, and leave KGPT_ENABLE_CUDA unset")
endif()
set(KGPT_ENABLE_CUDA ${_kgpt_kokkos_has_cuda})
if(KGPT_ENABLE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
  if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    message(FATAL_ERROR "CUDA build without NCCL: set NCCL_HOME or CMAKE_PREFIX_PATH to the NCCL install")
  endif()
  add_library(kgpt_nccl INTERFACE)
  add_library(kgpt::nccl ALIAS kgpt_nccl)
  target_include_directories(kgpt_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
  target_link_libraries(kgpt_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart CUDA::cublas CUDA::cublasLt)
endif()

# cuDNN's fused attention (model.attention: cudnn) in CUDA builds: cuDNN from the CUDA toolkit (or
# CUDNN_ROOT, e.g. the nvidia-cudnn wheel's folder) and NVIDIA's header-only cudnn-frontend (found on
# CMAKE_PREFIX_PATH or CUDNN_FRONTEND_ROOT; never part of this repository). AUTO builds it when both
# are found, ON insists, OFF leaves it out; builds without it keep the gemm and fused attentions.
set(KGPT_ENABLE_CUDNN AUTO CACHE STRING "CUDA builds: cuDNN fused attention (AUTO, ON, OFF)")
set_property(CACHE KGPT_ENABLE_CUDNN PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${KGPT_ENABLE_CUDNN}" _kgpt_cudnn)
set(KGPT_HAVE_CUDNN OFF)
if(KGPT_ENABLE_CUDA AND NOT _kgpt_cudnn STREQUAL "OFF")
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ENV CUDNN_ROOT ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(CUDNN_LIBRARY cudnn HINTS ENV CUDNN_ROOT ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ENV CUDNN_FRONTEND_ROOT PATH_SUFFIXES include)
  if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY AND CUDNN_FRONTEND_INCLUDE_DIR)
    add_library(kgpt_cudnn INTERFACE)
    add_library(kgpt::cudnn ALIAS kgpt_cudnn)
    target_include_directories(kgpt_cudnn SYSTEM INTERFACE ${CUDNN_FRONTEND_INCLUDE_DIR} ${CUDNN_INCLUDE_DIR})
    target_link_libraries(kgpt_cudnn INTERFACE ${CUDNN_LIBRARY})
    # cudnn-frontend >= 1.16 compiles some of its own engines with NVRTC at run time; kgpt's
    # attention uses none of them, but their code is in the headers it includes.
    if(TARGET CUDA::nvrtc)
      target_link_libraries(kgpt_cudnn INTERFACE CUDA::nvrtc)
    endif()
    # kgpt uses no graph serialisation: no JSON library needed.
    target_compile_definitions(kgpt_cudnn INTERFACE CUDNN_FRONTEND_SKIP_JSON_LIB)
    set(KGPT_HAVE_CUDNN ON)
    message(STATUS "cuDNN attention: ${CUDNN_LIBRARY} with cudnn-frontend from ${CUDNN_FRONTEND_INCLUDE_DIR}")
  elseif(_kgpt_cudnn STREQUAL "ON")
    message(FATAL_ERROR "KGPT_ENABLE_CUDNN is ON but cuDNN (cudnn.h: ${CUDNN_INCLUDE_DIR}, libcudnn: ${CUDNN_LIBRARY}) "
                        "or cudnn-frontend (cudnn_frontend.h: ${CUDNN_FRONTEND_INCLUDE_DIR}) was not found; set "
                        "CUDNN_ROOT and CUDNN_FRONTEND_ROOT or CMAKE_PREFIX_PATH")
  else()
    message(STATUS "cuDNN attention: not built (cuDNN or cudnn-frontend not found; model.attention: gemm and fused "
                   "remain)")
  endif()
elseif(NOT KGPT_ENABLE_CUDA AND _kgpt_cudnn STREQUAL "ON")
  message(FATAL_ERROR "KGPT_ENABLE_CUDNN is ON but this is not a CUDA build")
endif()

# The NCCL transport of gradient averaging (src/parallel/nccl_averager.cpp). CUDA builds always compile
# it into kgpt. CPU builds average with MPI and never use it, but may compile it against the CUDA
# toolkit's NCCL into the separate library kgpt_nccl_transport, so that a machine without a GPU still
# compiles, links and runs it (tests/parallel/nccl_probe.cpp): AUTO does when nccl.h, libnccl and
# libcudart are found and the tests are on, ON insists, OFF skips it.
set(KGPT_NCCL_TRANSPORT AUTO CACHE STRING
    "CPU builds: compile the NCCL gradient transport for its test (AUTO, ON, OFF); CUDA builds always do")
set_property(CACHE KGPT_NCCL_TRANSPORT PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${KGPT_NCCL_TRANSPORT}" _kgpt_nccl_transport)
if(NOT _kgpt_nccl_transport MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "KGPT_NCCL_TRANSPORT is '${KGPT_NCCL_TRANSPORT}'; it must be AUTO, ON or OFF")
endif()
if(KGPT_ENABLE_CUDA)
  if(_kgpt_nccl_transport STREQUAL "OFF")
    message(FATAL_ERROR "KGPT_NCCL_TRANSPORT is OFF, but CUDA builds average gradients with NCCL and always "
                        "compile its transport: leave KGPT_NCCL_TRANSPORT at AUTO")
  endif()
  message(STATUS "NCCL transport: compiled into kgpt (CUDA build, ${NCCL_LIBRARY})")
elseif(_kgpt_nccl_transport STREQUAL "OFF")
  message(STATUS "NCCL transport: skipped (KGPT_NCCL_TRANSPORT is OFF)")
elseif(_kgpt_nccl_transport STREQUAL "AUTO" AND NOT KGPT_ENABLE_TESTS)
  message(STATUS "NCCL transport: skipped (CPU build without tests; only its test would use it)")
else()
  find_package(CUDAToolkit QUIET)
  find_path(KGPT_CUDART_INCLUDE_DIR cuda_runtime_api.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDA_HOME /usr/local/cuda PATH_SUFFIXES include)
  find_library(KGPT_CUDART_LIBRARY cudart
               HINTS ${CUDAToolkit_LIBRARY_DIR} ENV CUDA_HOME /usr/local/cuda PATH_SUFFIXES lib64 lib)
  find_path(NCCL_INCLUDE_DIR nccl.h
            HINTS ENV NCCL_HOME ${KGPT_CUDART_INCLUDE_DIR} /usr/local/cuda PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl
               HINTS ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda PATH_SUFFIXES lib64 lib)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND KGPT_CUDART_INCLUDE_DIR AND KGPT_CUDART_LIBRARY)
    add_library(kgpt_nccl_transport STATIC ${PROJECT_SOURCE_DIR}/src/parallel/nccl_averager.cpp)
    # SYSTEM: CUDA's and NCCL's headers are not held to kgpt's -Werror.
    target_include_directories(kgpt_nccl_transport SYSTEM PUBLIC ${NCCL_INCLUDE_DIR} ${KGPT_CUDART_INCLUDE_DIR})
    # kgpt::kgpt and kgpt_compile_options are defined after this file; CMake resolves names at generation.
    target_link_libraries(kgpt_nccl_transport
      PUBLIC kgpt::kgpt ${NCCL_LIBRARY} ${KGPT_CUDART_LIBRARY}
      PRIVATE kgpt_compile_options)
    message(STATUS "NCCL transport: compiled against ${NCCL_LIBRARY} and ${KGPT_CUDART_LIBRARY} for its test "
                   "only (CPU build: kgpt averages gradients with MPI)")
  elseif(_kgpt_nccl_transport STREQUAL "ON")
    message(FATAL_ERROR "KGPT_NCCL_TRANSPORT is ON, but this CPU build found no NCCL with the CUDA runtime "
                        "(nccl.h: ${NCCL_INCLUDE_DIR}, libnccl: ${NCCL_LIBRARY}, cuda_runtime_api.h: "
                        "${KGPT_CUDART_INCLUDE_DIR}, libcudart: ${KGPT_CUDART_LIBRARY}); set CUDA_HOME and "
                        "NCCL_HOME, or KGPT_NCCL_TRANSPORT to AUTO or OFF")
  else()
    message(STATUS "NCCL transport: skipped (CPU build; nccl.h, libnccl or libcudart not found under CUDA_HOME, "
                   "NCCL_HOME or /usr/local/cuda)")
  endif()
endif()

if(KGPT_ENABLE_TESTS)
  find_package(Catch2 2 REQUIRED)
endif()

# Finds every dependency. All of them come from Debian packages (scripts/bootstrap.sh).

find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3.10 CONFIG REQUIRED)  # core's JSON parser (json.cc only)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(Torch REQUIRED)

# --- CUDA and NCCL: auto-detected; OFF when not found. -------------------------------------------
find_package(CUDAToolkit QUIET)
set(_flywheel_nccl_default OFF)
if(CUDAToolkit_FOUND)
  find_path(FLYWHEEL_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME
            PATH_SUFFIXES include)
  find_library(FLYWHEEL_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME
               PATH_SUFFIXES lib lib64)
  if(FLYWHEEL_NCCL_INCLUDE_DIR AND FLYWHEEL_NCCL_LIBRARY)
    set(_flywheel_nccl_default ON)
  endif()
endif()
option(FLYWHEEL_WITH_CUDA "Build the CUDA code paths" ${CUDAToolkit_FOUND})
option(FLYWHEEL_WITH_NCCL "Build the NCCL communicator" ${_flywheel_nccl_default})
if(FLYWHEEL_WITH_CUDA AND NOT CUDAToolkit_FOUND)
  message(FATAL_ERROR "FLYWHEEL_WITH_CUDA=ON but the CUDA toolkit was not found "
                      "(set CUDAToolkit_ROOT or turn the option OFF)")
endif()
if(FLYWHEEL_WITH_NCCL AND NOT (FLYWHEEL_WITH_CUDA AND FLYWHEEL_NCCL_INCLUDE_DIR
                               AND FLYWHEEL_NCCL_LIBRARY))
  message(FATAL_ERROR "FLYWHEEL_WITH_NCCL=ON needs CUDA and NCCL (nccl.h, libnccl); "
                      "set NCCL_HOME or turn the option OFF")
endif()

set(FLYWHEEL_CUDA_VERSION "")
if(FLYWHEEL_WITH_CUDA)
  set(FLYWHEEL_CUDA_VERSION "${CUDAToolkit_VERSION}")
endif()
set(FLYWHEEL_NCCL_VERSION "")
if(FLYWHEEL_WITH_NCCL)
  file(STRINGS "${FLYWHEEL_NCCL_INCLUDE_DIR}/nccl.h" _nccl_lines
       REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) [0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${_part} ([0-9]+)" _m "${_nccl_lines}")
    set(_nccl_${_part} ${CMAKE_MATCH_1})
  endforeach()
  set(FLYWHEEL_NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
endif()

# The OpenBLAS check: without libopenblas0-pthread LibTorch's float32 matmul falls back to the
# reference BLAS and runs ~25x slower. Warn loudly at configure time.
if(CMAKE_SYSTEM_NAME STREQUAL "Linux" AND NOT EXISTS
   "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3" AND NOT EXISTS
   "/usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3")
  message(WARNING "libopenblas0-pthread not found: LibTorch float32 matmul will use the "
                  "reference BLAS (~25x slower). Run scripts/bootstrap.sh.")
endif()

# Git revision for `flywheel version`.
set(FLYWHEEL_GIT_REVISION "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE _rev
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _rev)
    set(FLYWHEEL_GIT_REVISION "${_rev}")
  endif()
endif()

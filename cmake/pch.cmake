# Precompiled headers (HEXISIM_PCH): a build-time saving only, for clang, i.e. the sanitizer
# build of make check-asan and make fuzz (there: 1827 -> 1115 CPU s for unit_tests and
# fuzz_targets). The third-party and standard headers that nearly every file includes
# (nlohmann/json through topologies/json_input.hpp, Eigen through topologies/cluster.hpp,
# GoogleTest in the tests) are parsed once per build instead of once per file. Two carriers:
#   hexi_pch       the libraries, executables, benchmarks and fuzz targets
#   hexi_pch_test  every GoogleTest executable (+ <gtest/gtest.h>)
# Every other target reuses one of them (REUSE_FROM: one .pch per carrier, hexi_pch_apply);
# hexi_kernels (-fno-math-errno) has its own. A reused PCH needs the same compile flags as
# its users, which all targets here share (the global options and hexi_warnings; a user's
# own -D is fine, it is not in the PCH). A target with other flags must not reuse one: clang
# then refuses the PCH, so a mistake fails the build rather than slowing it.
# Not for GCC (the Release build): GCC 12 does not keep `#pragma GCC diagnostic` state in a
# PCH, so the suppressions inside libstdc++ (char_traits.h: -Wstringop-overflow,
# -Warray-bounds) and topologies/eigen.hpp (GCC bug 105593) are lost and -Werror fails on
# GCC's false positives (e.g. at "w" + std::to_string(i)); without Eigen it also saved
# little there (0.4 CPU s per file on average, small files slower).
# Caveat: a missing #include of a precompiled header goes unnoticed in a PCH build; the
# Release build (no PCH) still catches it.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  option(HEXISIM_PCH "Precompiled headers for the common third-party and standard headers (clang)" ON)
else()
  set(HEXISIM_PCH OFF)
endif()

set(HEXI_PCH_HEADERS
  <algorithm> <array> <chrono> <cmath> <cstddef> <cstdint> <cstdio> <cstdlib> <cstring>
  <filesystem> <fstream> <functional> <limits> <map> <memory> <numeric> <optional> <set>
  <sstream> <stdexcept> <string> <string_view> <tuple> <unordered_map> <utility> <vector>
  <nlohmann/json.hpp> ${PROJECT_SOURCE_DIR}/topologies/eigen.hpp)

if(HEXISIM_PCH)
  file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/hexi_pch.cpp
       CONTENT "// Carrier of the shared precompiled headers (cmake/pch.cmake).\n")
  add_library(hexi_pch OBJECT ${CMAKE_BINARY_DIR}/hexi_pch.cpp)
  target_link_libraries(hexi_pch PRIVATE nlohmann_json::nlohmann_json Eigen3::Eigen hexi_warnings)
  target_precompile_headers(hexi_pch PRIVATE ${HEXI_PCH_HEADERS})

  add_library(hexi_pch_test OBJECT ${CMAKE_BINARY_DIR}/hexi_pch.cpp)
  target_link_libraries(hexi_pch_test PRIVATE nlohmann_json::nlohmann_json Eigen3::Eigen
                                              GTest::gtest hexi_warnings)
  target_precompile_headers(hexi_pch_test PRIVATE ${HEXI_PCH_HEADERS} <gtest/gtest.h>)
endif()

# hexi_pch_own(target [headers...]): target gets its own PCH of HEXI_PCH_HEADERS + headers.
function(hexi_pch_own target)
  if(HEXISIM_PCH)
    target_precompile_headers(${target} PRIVATE ${HEXI_PCH_HEADERS} ${ARGN})
  endif()
endfunction()

# hexi_pch_apply(dir): every C++ library and executable under dir that has no PCH yet reuses
# hexi_pch_test (if it links GoogleTest) or hexi_pch. Called once, after every add_subdirectory.
function(hexi_pch_apply dir)
  if(NOT HEXISIM_PCH)
    return()
  endif()
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t ${targets})
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$"
       OR t STREQUAL "hexi_pch" OR t STREQUAL "hexi_pch_test")
      continue()
    endif()
    get_target_property(own ${t} PRECOMPILE_HEADERS)
    get_target_property(reuse ${t} PRECOMPILE_HEADERS_REUSE_FROM)
    get_target_property(sources ${t} SOURCES)
    list(FILTER sources INCLUDE REGEX "\\.cpp$")
    if(own OR reuse OR NOT sources)
      continue()
    endif()
    get_target_property(libs ${t} LINK_LIBRARIES)
    if("GTest::gtest" IN_LIST libs)
      target_precompile_headers(${t} REUSE_FROM hexi_pch_test)
    else()
      target_precompile_headers(${t} REUSE_FROM hexi_pch)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(d ${subdirs})
    hexi_pch_apply(${d})
  endforeach()
endfunction()

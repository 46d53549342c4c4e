# build_info.cpp is regenerated at every build (not only at configure time) so that
# `kgpt --version` names the commit the binary was built from.
set(KGPT_BUILD_INFO_CPP "${CMAKE_CURRENT_BINARY_DIR}/generated/build_info.cpp")
add_custom_target(kgpt_build_info
  COMMAND ${CMAKE_COMMAND}
          -DSOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}
          -DOUTPUT=${KGPT_BUILD_INFO_CPP}
          -DVERSION=${PROJECT_VERSION}
          -DBUILD_TYPE=${CMAKE_BUILD_TYPE}
          -DKOKKOS_KERNELS_VERSION=${KGPT_KOKKOS_KERNELS_VERSION}
          -DYAML_CPP_VERSION=${yaml-cpp_VERSION}
          -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/KgptWriteBuildInfo.cmake
  BYPRODUCTS ${KGPT_BUILD_INFO_CPP}
  COMMENT "Recording the git commit for kgpt --version"
  VERBATIM)

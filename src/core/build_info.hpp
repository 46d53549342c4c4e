#pragma once
// Facts fixed when the binary was built (cmake/KgptWriteBuildInfo.cmake writes the definitions).

namespace kgpt::build_info {

const char* version();
const char* git_sha();  // short commit, "-dirty" when tracked files differed, "unknown" outside git
const char* build_type();
const char* kokkos_kernels_version();
const char* yaml_cpp_version();

}  // namespace kgpt::build_info

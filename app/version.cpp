#include <hdf5.h>
#include <mpi.h>

#include <sstream>

#include "commands.hpp"
#include "core/build_info.hpp"
#include "core/kokkos_compat.hpp"
#ifdef KGPT_HAVE_NCCL
#include <nccl.h>
#endif

namespace kgpt::app {

namespace {

// MPI_Get_library_version may be called before MPI_Init; its first line names the library.
std::string mpi_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string line(text, static_cast<std::size_t>(length));
  const auto end = line.find_first_of("\n,");
  if (end != std::string::npos) line.resize(end);
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  return line + " (MPI " + std::to_string(major) + "." + std::to_string(minor) + ")";
}

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

std::string nccl_version() {
#ifdef KGPT_HAVE_NCCL
  int code = 0;
  ncclGetVersion(&code);
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
#else
  return "not built (CPU build; gradients are averaged with MPI)";
#endif
}

}  // namespace

std::string version_text() {
  std::ostringstream out;
  out << "kgpt " << build_info::version() << " (git " << build_info::git_sha() << ", " << build_info::build_type()
      << " build)\n"
      << "Kokkos " << compat::version_string() << ", backends: " << compat::enabled_backends() << "\n"
      << "Kokkos Kernels " << build_info::kokkos_kernels_version() << "\n"
      << "MPI: " << mpi_version() << "\n"
      << "HDF5 " << hdf5_version() << "\n"
      << "yaml-cpp " << build_info::yaml_cpp_version() << "\n"
      << "NCCL: " << nccl_version() << "\n";
  return out.str();
}

}  // namespace kgpt::app

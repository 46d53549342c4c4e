#include "core/versions.hpp"

#include <hdf5.h>
#include <mpi.h>

#include "core/build_info.hpp"
#include "core/kokkos_compat.hpp"
#ifdef KGPT_HAVE_NCCL
#include <nccl.h>
#endif
#ifdef KGPT_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace kgpt {

namespace {

// The first line of MPI_Get_library_version names the library.
std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string line(text, static_cast<std::size_t>(length));
  const auto end = line.find_first_of("\n,");
  if (end != std::string::npos) line.resize(end);
  return line;
}

std::string mpi_standard() {
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
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
  return "none (CPU build)";
#endif
}

std::string cudnn_version() {
#ifdef KGPT_HAVE_CUDNN
  // cuDNN 9 numbers versions major * 10000 + minor * 100 + patch.
  const auto text = [](std::size_t code) {
    return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
  };
  return text(cudnnGetVersion()) + " (built against " + text(CUDNN_VERSION) + ")";
#elif defined(KGPT_HAVE_NCCL)
  return "none (built without cuDNN; model.attention: cudnn is unavailable)";
#else
  return "none (CPU build)";
#endif
}

Versions query() {
  Versions v;
  v.kgpt = build_info::version();
  v.git_sha = build_info::git_sha();
  v.build_type = build_info::build_type();
  v.kokkos = compat::version_string();
  v.kokkos_backends = compat::enabled_backends();
  v.kokkos_kernels = build_info::kokkos_kernels_version();
  v.mpi = mpi_library();
  v.mpi_standard = mpi_standard();
  v.hdf5 = hdf5_version();
  v.yaml_cpp = build_info::yaml_cpp_version();
  v.cudnn = cudnn_version();
  v.nccl = nccl_version();
  return v;
}

}  // namespace

const Versions& versions() {
  static const Versions v = query();
  return v;
}

}  // namespace kgpt

#include <sstream>

#include "commands.hpp"
#include "core/blas.hpp"
#include "core/versions.hpp"

namespace kgpt::app {

std::string version_text() {
  const Versions& v = versions();
  std::ostringstream out;
  out << "kgpt " << v.kgpt << " (git " << v.git_sha << ", " << v.build_type << " build)\n"
      << "Kokkos " << v.kokkos << ", backends: " << v.kokkos_backends << "\n"
      << "Kokkos Kernels " << v.kokkos_kernels << "\n"
      << "MPI: " << v.mpi << " (MPI " << v.mpi_standard << ")\n"
      << "HDF5 " << v.hdf5 << "\n"
      << "yaml-cpp " << v.yaml_cpp << "\n"
      << "NCCL: " << v.nccl << (v.nccl.rfind("none", 0) == 0 ? "; gradients are averaged with MPI" : "") << "\n"
      << "cuDNN: " << v.cudnn << "\n"
      << "BLAS: " << describe_blas(blas_info()) << "\n";
  return out.str();
}

}  // namespace kgpt::app

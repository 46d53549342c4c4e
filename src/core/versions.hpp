#pragma once
// The versions of kgpt and of every library it runs with, made in one place for `kgpt --version`
// and for the /metadata of histories and checkpoints.

#include <string>

namespace kgpt {

struct Versions {
  std::string kgpt, git_sha, build_type;
  std::string kokkos;           // "4.6.1"
  std::string kokkos_backends;  // "Serial", "Serial Cuda"
  std::string kokkos_kernels, hdf5, yaml_cpp;
  std::string mpi;           // the library: "Open MPI v4.1.4"
  std::string mpi_standard;  // "3.1"
  std::string nccl;  // "2.27.3", or "none (CPU build)"
  std::string cudnn;  // the loaded cuDNN's "9.19.0" and the one compiled against, or "none (...)"
};

// Queried once; MPI's version may be asked before MPI_Init.
const Versions& versions();

}  // namespace kgpt

#pragma once
// Which BLAS the host's products run on, and which kernel it chose. Debian's OpenBLAS (0.3.21, built
// for every x86-64 core, DYNAMIC_ARCH) picks its kernel from the CPU's model when it loads, and a
// CPU newer than it knows gets a generic one: a new Intel Xeon with AVX-512 got "Prescott" (SSE3)
// and ran kgpt's products at a fifth of their speed, saying nothing. OPENBLAS_CORETYPE overrides the
// choice, but only when it is set before the library loads, which is before main: so kgpt checks at
// the start of main and, where the kernel uses fewer vector units than the CPU has and the variable
// is unset, sets it and runs itself again in the same process (exec), under mpiexec and srun too
// (every rank does the same, before MPI starts). A core type set by hand is always kept.
// KGPT_OPENBLAS_AS_DETECTED=1 makes OPENBLAS_CORETYPE stand for OpenBLAS's own choice: on a CPU that
// OpenBLAS knows, OPENBLAS_CORETYPE=Prescott with it shows what happens where it does not.

#include <string>

namespace kgpt {

struct BlasInfo {
  std::string library;   // "OpenBLAS 0.3.21", or what else answers for sgemm
  std::string path;      // the shared library sgemm comes from
  std::string kernel;    // the core type OpenBLAS runs ("SkylakeX"); "" where unknown
  int threads = 0;       // OpenBLAS's threads; 0 where unknown
  std::string cpu;       // the widest vector units of this CPU: "AVX-512", "AVX2", "AVX", "SSE", or "" (not x86-64)
  std::string best;      // the OpenBLAS core type for those units ("SkylakeX", "Haswell", "Sandybridge"), or ""
  // How the kernel came to be: "OpenBLAS" (its own choice, kept), "by hand" (OPENBLAS_CORETYPE set
  // by the user, kept), or "kgpt" (kgpt set OPENBLAS_CORETYPE and restarted; `detected` is what
  // OpenBLAS had chosen).
  std::string chosen_by;
  std::string detected;
  // Whether the kernel uses fewer vector units than the CPU has (a generic one for this CPU).
  bool below_cpu() const;
};

// Call first in main, before MPI starts: where OpenBLAS runs a kernel below this CPU's vector
// units and OPENBLAS_CORETYPE is unset, sets it to `best` and executes this program again with
// the same arguments (it does not return then). Returns when nothing needs doing, or when the
// restart failed (blas_info() says so).
void choose_blas_kernel(char** argv);

// The BLAS as this process runs it (queried once).
const BlasInfo& blas_info();

// One line: "OpenBLAS 0.3.21, kernel SkylakeX (...how it was chosen...), 2 threads".
std::string describe_blas(const BlasInfo& info);

}  // namespace kgpt

#pragma once
// The one place that chooses between host and CUDA implementations. Where the two differ (GEMM,
// attention, the embedding backward, the gradient transport) an interface is a template over the
// backend tag with a host and a CUDA implementation in files of their own; every caller reaches
// the one named by backend::Current, fixed here by the Kokkos the build was made with.

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#define KGPT_BACKEND_CUDA 1
#else
#define KGPT_BACKEND_CUDA 0
#endif

namespace kgpt::backend {

struct Host {
  static constexpr const char* name = "host";
};
struct Cuda {
  static constexpr const char* name = "cuda";
};

#if KGPT_BACKEND_CUDA
using Current = Cuda;
// Host memory the device copies from without the host waiting: page-locked on CUDA.
using StagingSpace = Kokkos::CudaHostPinnedSpace;
#else
using Current = Host;
using StagingSpace = Kokkos::HostSpace;
#endif

constexpr bool on_gpu = std::is_same<Current, Cuda>::value;

}  // namespace kgpt::backend

#pragma once
// The one place that tests Kokkos versions. Debian 12 ships Trilinos' Kokkos 3.4.01 (C++14
// configuration, Serial); GPU builds use upstream Kokkos >= 4.6. Everything else in kgpt calls
// the names below instead of testing KOKKOS_VERSION itself.

#include <KokkosBlas3_gemm.hpp>
#include <KokkosKernels_config.h>
#include <Kokkos_Core.hpp>

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime_api.h>
#endif

#if KOKKOS_VERSION >= 40000
#define KGPT_KOKKOS_4 1
#else
#define KGPT_KOKKOS_4 0
#endif

namespace kgpt::compat {

// Math in kernels: float overloads on every backend (an unqualified exp(float) on the host resolves
// to the C library's double exp). Kokkos 3.4 keeps them in Kokkos::Experimental.
#if KGPT_KOKKOS_4
using Kokkos::exp;
using Kokkos::log;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::exp;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif

// Kokkos 3.4 has no Kokkos::min/max/clamp and no rsqrt; these work in kernels on every backend.
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T min(T a, T b) { return b < a ? b : a; }
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T max(T a, T b) { return a < b ? b : a; }
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T clamp(T x, T lo, T hi) { return x < lo ? lo : (hi < x ? hi : x); }
KOKKOS_INLINE_FUNCTION float rsqrt(float x) { return 1.0f / compat::sqrt(x); }
KOKKOS_INLINE_FUNCTION double rsqrt(double x) { return 1.0 / compat::sqrt(x); }

// Kokkos 3.4 has no labelled global fence.
inline void fence(const std::string& label) {
#if KGPT_KOKKOS_4
  Kokkos::fence(label);
#else
  (void)label;
  Kokkos::fence();
#endif
}

inline bool has_bhalf() {
#if KGPT_KOKKOS_4
  return true;
#else
  return false;
#endif
}

// "3.4.1" from KOKKOS_VERSION (major*10000 + minor*100 + patch).
inline std::string version_string() {
  return std::to_string(KOKKOS_VERSION / 10000) + "." + std::to_string(KOKKOS_VERSION / 100 % 100) + "." +
         std::to_string(KOKKOS_VERSION % 100);
}

// The execution spaces compiled into this Kokkos, as a space-separated list.
inline std::string enabled_backends() {
  std::string names;
  auto add = [&names](const char* name) { names += names.empty() ? name : std::string(" ") + name; };
#ifdef KOKKOS_ENABLE_SERIAL
  add("Serial");
#endif
#ifdef KOKKOS_ENABLE_OPENMP
  add("OpenMP");
#endif
#ifdef KOKKOS_ENABLE_THREADS
  add("Threads");
#endif
#ifdef KOKKOS_ENABLE_CUDA
  add("Cuda");
#endif
#ifdef KOKKOS_ENABLE_HIP
  add("HIP");
#endif
#ifdef KOKKOS_ENABLE_SYCL
  add("SYCL");
#endif
  return names;
}

// KokkosBlas::gemm on an execution space instance (Kokkos Kernels 4); Debian's Kokkos Kernels 3.4
// has only the overload that runs on the default instance.
template <class ExecSpace, class AView, class BView, class CView>
void blas_gemm(const ExecSpace& space, const char* trans_a, const char* trans_b,
               typename AView::const_value_type& alpha, const AView& a, const BView& b,
               typename CView::const_value_type& beta, const CView& c) {
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 40000
  KokkosBlas::gemm(space, trans_a, trans_b, alpha, a, b, beta, c);
#else
  (void)space;
  KokkosBlas::gemm(trans_a, trans_b, alpha, a, b, beta, c);
#endif
}

// Whether Kokkos passes a parallel_for of this functor and policy to a CUDA kernel as its argument.
// Kokkos 4 copies a kernel whose driver (functor, policy and bookkeeping) is 512 bytes or more to
// constant memory instead, and waits on the host before each such launch until the last one has
// read its copy. Always true off CUDA.
template <class Functor, class Policy>
constexpr bool launches_as_argument() {
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (std::is_same<typename Policy::execution_space, Kokkos::Cuda>::value) {
    return sizeof(Kokkos::Impl::ParallelFor<Functor, Policy, Kokkos::Cuda>) <
           Kokkos::Impl::CudaTraits::ConstantMemoryUseThreshold;
  }
#endif
  return true;
}

// The number of GPUs this process sees; -1 when this Kokkos has no GPU backend.
inline int device_count() {
#ifdef KOKKOS_ENABLE_CUDA
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
#else
  return -1;
#endif
}

// The name of the GPU this process drives ("NVIDIA H100 80GB HBM3"), or "" without a GPU backend.
inline std::string device_name() {
#ifdef KOKKOS_ENABLE_CUDA
  int device = 0;
  cudaDeviceProp properties{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&properties, device) != cudaSuccess) return "";
  return properties.name;
#else
  return "";
#endif
}

// Bytes of GPU memory in use on the current device (every allocation of every process on it, the
// CUDA context included), read with cudaMemGetInfo; -1 when this Kokkos has no GPU backend.
inline double device_memory_used_bytes() {
#ifdef KOKKOS_ENABLE_CUDA
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return -1;
  return static_cast<double>(total_bytes - free_bytes);
#else
  return -1;
#endif
}

// Bytes of memory of the device this process computes on: the GPU's total (cudaMemGetInfo) on a
// CUDA build, the host's physical memory otherwise; -1 when it cannot be read.
inline double device_memory_total_bytes() {
#ifdef KOKKOS_ENABLE_CUDA
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return -1;
  return static_cast<double>(total_bytes);
#else
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size) : -1;
#endif
}

// Starts Kokkos for this process (device_id < 0: Kokkos chooses) and stops it when destroyed.
// Exactly one lives in main, after MPI_Init: Kokkos 4's own ScopeGuard aborts on a second start.
class Runtime {
 public:
  explicit Runtime(int device_id = -1) {
#if KGPT_KOKKOS_4
    Kokkos::InitializationSettings settings;
    if (device_id >= 0) settings.set_device_id(device_id);
    settings.set_disable_warnings(true);
    Kokkos::initialize(settings);
#else
    Kokkos::InitArguments arguments;
    arguments.device_id = device_id;
    arguments.disable_warnings = true;
    // Kokkos 3 loads a Kokkos Tools library from KOKKOS_PROFILE_LIBRARY, Kokkos 4 from
    // KOKKOS_TOOLS_LIBS: the latter works on both (the former, where set, wins as before).
    const char* tools = std::getenv("KOKKOS_TOOLS_LIBS");
    if (tools != nullptr && std::getenv("KOKKOS_PROFILE_LIBRARY") == nullptr) arguments.tool_lib = tools;
    Kokkos::initialize(arguments);
#endif
  }
  ~Runtime() { Kokkos::finalize(); }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
};

}  // namespace kgpt::compat

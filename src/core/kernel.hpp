#pragma once
// kgpt::parallel_for: how every top-level kernel of kgpt is launched. It is Kokkos::parallel_for,
// and it refuses, when the kernel is compiled for CUDA, a functor that Kokkos would not pass as the
// kernel's argument (compat::launches_as_argument): such a kernel makes the host wait before each
// launch. Kernels that read many arrays capture them as RowView (core/views.hpp), a pointer and a
// leading dimension, rather than as Kokkos Views.
//
// Kernels defined in headers live in unnamed namespaces (internal linkage). nvcc gives every
// __host__ __device__ lambda (KOKKOS_LAMBDA) a wrapper whose copy and destruction on the host go
// through function pointers private to each translation unit, set where the lambda is made. A
// header template instantiated in several units is kept once by the linker, so a lambda made by one
// unit's copy can be copied by another unit's code, whose pointer was never set: the process jumps to
// address 0 (seen on an H100 in double and fp32 models, and moving with every change of the link).
// With the kernels' functions internal, each unit has its own, lambdas and their wrappers included.
// bench/device/check_lambda_linkage.sh checks a CUDA build for wrappers that more than one object
// file defines.

#include <string>

#include "core/kokkos_compat.hpp"

namespace kgpt {

template <class Policy, class Functor>
void parallel_for(const std::string& label, const Policy& policy, const Functor& functor) {
  static_assert(compat::launches_as_argument<Functor, Policy>(),
                "kgpt::parallel_for: this kernel's functor is too large to be a CUDA kernel argument; "
                "capture fewer Views, or RowViews instead of Views");
  Kokkos::parallel_for(label, policy, functor);
}

}  // namespace kgpt

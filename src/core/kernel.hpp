#pragma once
// kgpt::parallel_for: how every top-level kernel of kgpt is launched. It is Kokkos::parallel_for,
// and it refuses, when the kernel is compiled for CUDA, a functor that Kokkos would not pass as the
// kernel's argument (compat::launches_as_argument): such a kernel makes the host wait before each
// launch. Kernels that read many arrays capture them as RowView (core/views.hpp), a pointer and a
// leading dimension, rather than as Kokkos Views.

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

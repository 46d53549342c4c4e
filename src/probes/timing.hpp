#pragma once
// How `kgpt check --device`'s probes (probes/head.hpp, probes/gelu.hpp, probes/fp8.hpp) time work on the
// device.

#include <algorithm>
#include <limits>

#include <Kokkos_Core.hpp>

#include "core/views.hpp"

namespace kgpt::probes {

// Milliseconds of the fastest of three runs of `work`, after one that makes the libraries' plans.
template <class Work>
double fastest_of_three(const ExecSpace& exec, Work&& work) {
  work();
  exec.fence();
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 3; ++run) {
    Kokkos::Timer timer;
    work();
    exec.fence();
    best = std::min(best, timer.seconds() * 1e3);
  }
  return best;
}

}  // namespace kgpt::probes

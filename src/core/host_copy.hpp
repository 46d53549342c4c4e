#pragma once
// Real copies between a buffer in the default memory space and host memory (create_mirror, not
// create_mirror_view, which aliases on the host), for I/O, checksums and MPI.

#include <algorithm>
#include <vector>

#include "core/views.hpp"

namespace kgpt {

template <class T>
std::vector<T> to_host(const Vector<T>& values) {
  auto host = Kokkos::create_mirror(values);
  Kokkos::deep_copy(host, values);
  return std::vector<T>(host.data(), host.data() + host.span());
}

template <class T>
void from_host(const std::vector<T>& from, const Vector<T>& to) {
  auto host = Kokkos::create_mirror(to);
  std::copy(from.begin(), from.end(), host.data());
  Kokkos::deep_copy(to, host);
}

}  // namespace kgpt

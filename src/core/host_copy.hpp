#pragma once
// Real copies between a buffer in the default memory space and host memory (create_mirror, not
// create_mirror_view, which aliases on the host), for I/O, checksums and MPI; and host copies as
// doubles, for comparing two results.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/views.hpp"

namespace kgpt {

template <class T>
std::vector<T> to_host(const Vector<T>& values) {
  auto host = Kokkos::create_mirror(values);
  Kokkos::deep_copy(host, values);
  return std::vector<T>(host.data(), host.data() + host.span());
}

// The values of `v` (any rank, contiguous, any value type, bf16 too) as doubles on the host, for
// comparing one result with another.
template <class V>
std::vector<double> host_values(const V& v) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<double> out(v.span());
  for (std::size_t i = 0; i < v.span(); ++i) out[i] = static_cast<double>(host.data()[i]);
  return out;
}

// max_i |a_i - b_i| / (1 + |b_i|) over two results of one size; infinite if any value is not
// finite, so that a NaN cannot hide inside the maximum. Zero means equal bit for bit (up to the sign
// of zero).
inline double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double difference = std::fabs(a[i] - b[i]) / (1 + std::fabs(b[i]));
    if (!std::isfinite(difference)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, difference);
  }
  return worst;
}

template <class T>
void from_host(const std::vector<T>& from, const Vector<T>& to) {
  auto host = Kokkos::create_mirror(to);
  std::copy(from.begin(), from.end(), host.data());
  Kokkos::deep_copy(to, host);
}

}  // namespace kgpt

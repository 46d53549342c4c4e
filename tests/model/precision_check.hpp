#pragma once
// Comparing one op run in two precisions: the same inputs converted to each type, and the largest
// difference of the results relative to the reference's scale.

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "core/views.hpp"

namespace kgpt::test {

// A copy of `from` (any rank, contiguous) with the value type of `To`: double data as float, say.
template <class To, class From>
To converted(const std::string& label, const From& from) {
  To to(label, from.layout());
  auto host_from = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), from);
  auto host_to = Kokkos::create_mirror_view(to);
  for (std::size_t i = 0; i < from.span(); ++i) {
    host_to.data()[i] = static_cast<typename To::non_const_value_type>(host_from.data()[i]);
  }
  Kokkos::deep_copy(to, host_to);
  return to;
}

// max_i |a_i - factor * b_i| / (1 + |factor * b_i|); infinite if any element is NaN or infinite, so
// that a NaN cannot hide inside the maximum. Zero means equal bit for bit (up to the sign of zero).
template <class A, class B>
double max_difference(const A& a, const B& b, double factor = 1.0) {
  REQUIRE(a.span() == b.span());
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  double worst = 0;
  for (std::size_t i = 0; i < a.span(); ++i) {
    const double expected = factor * static_cast<double>(hb.data()[i]);
    const double difference = std::fabs(static_cast<double>(ha.data()[i]) - expected) / (1 + std::fabs(expected));
    if (!std::isfinite(difference)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, difference);
  }
  return worst;
}

template <class V>
bool all_finite(const V& v) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  for (std::size_t i = 0; i < v.span(); ++i) {
    if (!std::isfinite(static_cast<double>(host.data()[i]))) return false;
  }
  return true;
}

}  // namespace kgpt::test

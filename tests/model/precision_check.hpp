#pragma once
// Comparing one op run in two precisions: the same inputs converted to each type, and the largest
// difference of the results relative to the reference's scale.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/host_copy.hpp"
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

using kgpt::host_values;  // core/host_copy.hpp

// kgpt::max_relative_difference (core/host_copy.hpp) of two results that must be of one size.
inline double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  return kgpt::max_relative_difference(a, b);
}

// The same between two Views, b scaled by `factor`: max_i |a_i - factor * b_i| / (1 + |factor * b_i|).
template <class A, class B>
double max_difference(const A& a, const B& b, double factor = 1.0) {
  std::vector<double> expected = host_values(b);
  for (double& value : expected) value *= factor;
  return max_difference(host_values(a), expected);
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

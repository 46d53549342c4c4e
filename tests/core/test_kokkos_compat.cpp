// The compatibility header must give the same answers in kernels on every Kokkos version.
#include <catch2/catch.hpp>

#include <cmath>
#include <type_traits>

#include "core/kokkos_compat.hpp"

TEST_CASE("compat math works inside a Kokkos kernel", "[core][compat]") {
  const int n = 1000;
  Kokkos::View<float*> x("x", n);
  Kokkos::parallel_for(
      "kgpt::test::fill", Kokkos::RangePolicy<>(0, n),
      KOKKOS_LAMBDA(const int i) { x(i) = static_cast<float>(i) - 500.0f; });
  float clamped_sum = 0.0f;
  Kokkos::parallel_reduce(
      "kgpt::test::clamp_sum", Kokkos::RangePolicy<>(0, n),
      KOKKOS_LAMBDA(const int i, float& sum) { sum += kgpt::compat::clamp(x(i), -10.0f, 10.0f); }, clamped_sum);
  // Values -500..499 clamped to [-10, 10]: -490 x 10 below, -9..9 cancel, +489 x 10 above, plus -10 and 10.
  CHECK(clamped_sum == Approx(-10.0f));

  int largest = 0;
  Kokkos::parallel_reduce(
      "kgpt::test::max", Kokkos::RangePolicy<>(0, n),
      KOKKOS_LAMBDA(const int i, int& m) { m = kgpt::compat::max(m, (i * 7919) % 1009); },
      Kokkos::Max<int>(largest));
  int expected = 0;
  for (int i = 0; i < n; ++i) expected = (i * 7919) % 1009 > expected ? (i * 7919) % 1009 : expected;
  CHECK(largest == expected);
  CHECK(kgpt::compat::min(3, -4) == -4);
  CHECK(kgpt::compat::rsqrt(4.0f) == Approx(0.5f));
  CHECK(kgpt::compat::rsqrt(0.25) == Approx(2.0));
  kgpt::compat::fence("kgpt::test::fence");
}

// An unqualified exp(float) on the host is the C library's double exp: kernels call compat's, which
// must stay in the argument's precision.
static_assert(std::is_same<decltype(kgpt::compat::exp(1.0f)), float>::value, "compat::exp(float) is float");
static_assert(std::is_same<decltype(kgpt::compat::sqrt(1.0f)), float>::value, "compat::sqrt(float) is float");
static_assert(std::is_same<decltype(kgpt::compat::log(1.0f)), float>::value, "compat::log(float) is float");
static_assert(std::is_same<decltype(kgpt::compat::tanh(1.0f)), float>::value, "compat::tanh(float) is float");
static_assert(std::is_same<decltype(kgpt::compat::exp(1.0)), double>::value, "compat::exp(double) is double");

TEST_CASE("compat exp, log, sqrt and tanh agree with the standard library in float and double", "[core][compat]") {
  const int n = 64;
  Kokkos::View<float* [4]> f("f", n);
  Kokkos::View<double* [4]> d("d", n);
  Kokkos::parallel_for(
      "kgpt::test::math", Kokkos::RangePolicy<>(0, n), KOKKOS_LAMBDA(const int i) {
        const double x = 0.125 * (i + 1);
        f(i, 0) = kgpt::compat::exp(static_cast<float>(-x));
        f(i, 1) = kgpt::compat::log(static_cast<float>(x));
        f(i, 2) = kgpt::compat::sqrt(static_cast<float>(x));
        f(i, 3) = kgpt::compat::tanh(static_cast<float>(x - 4));
        d(i, 0) = kgpt::compat::exp(-x);
        d(i, 1) = kgpt::compat::log(x);
        d(i, 2) = kgpt::compat::sqrt(x);
        d(i, 3) = kgpt::compat::tanh(x - 4);
      });
  auto fh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), f);
  auto dh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d);
  for (int i = 0; i < n; ++i) {
    const double x = 0.125 * (i + 1);
    const double expected[4] = {std::exp(-x), std::log(x), std::sqrt(x), std::tanh(x - 4)};
    for (int k = 0; k < 4; ++k) {
      CHECK(dh(i, k) == Approx(expected[k]).epsilon(1e-15).margin(1e-15));
      CHECK(fh(i, k) == Approx(expected[k]).epsilon(1e-6).margin(1e-6));
    }
  }
}

TEST_CASE("compat reports the Kokkos version and backends", "[core][compat]") {
  const std::string version = kgpt::compat::version_string();
  CHECK(version == std::to_string(KOKKOS_VERSION / 10000) + "." + std::to_string(KOKKOS_VERSION / 100 % 100) + "." +
                       std::to_string(KOKKOS_VERSION % 100));
  CHECK(KOKKOS_VERSION >= 30400);
  const std::string backends = kgpt::compat::enabled_backends();
  CHECK_FALSE(backends.empty());
  // The default execution space must be among the listed backends.
  CHECK(backends.find(Kokkos::DefaultExecutionSpace::name()) != std::string::npos);
}

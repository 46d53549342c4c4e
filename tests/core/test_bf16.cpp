#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/bf16.hpp"
#include "core/random.hpp"
#include "core/views.hpp"

using kgpt::bf16;

namespace {

std::uint16_t bits_of(float x) { return bf16(x).bits; }

float float_of_bits(std::uint32_t word) {
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

}  // namespace

TEST_CASE("bf16 keeps the upper half of a float, rounded to nearest even", "[core][bf16]") {
  CHECK(bits_of(1.0f) == 0x3f80);
  CHECK(bits_of(-2.0f) == 0xc000);
  CHECK(bits_of(0.0f) == 0x0000);
  CHECK(bits_of(-0.0f) == 0x8000);
  CHECK(float(bf16(3.140625f)) == 3.140625f);  // representable: 1.1001001 x 2^1
  // The unit in the last place at 1 is 2^-7: halfway cases go to the even neighbour.
  CHECK(float(bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  CHECK(float(bf16(1.0f + std::ldexp(1.0f, -7) + std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(float(bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))) == 1.0f + std::ldexp(1.0f, -7));
  // Infinities stay, NaN stays NaN, the largest floats round up to infinity, tiny denormals to zero.
  CHECK(std::isinf(float(bf16(std::numeric_limits<float>::infinity()))));
  CHECK(float(bf16(-std::numeric_limits<float>::infinity())) < 0);
  CHECK(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(float(bf16(float_of_bits(0x7f800001u)))));  // a signalling NaN whose payload sits below bit 16
  CHECK(std::isinf(float(bf16(std::numeric_limits<float>::max()))));
  CHECK(float(bf16(std::numeric_limits<float>::denorm_min())) == 0.0f);
  CHECK(float(bf16(1.0e-39f)) != 0.0f);  // bf16 has float's exponent range: denormals it can hold stay
}

TEST_CASE("every finite bf16 value survives a round trip through float", "[core][bf16]") {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const bf16 x = bf16::from_bits(static_cast<std::uint16_t>(b));
    const float f = float(x);
    if (std::isnan(f)) continue;
    REQUIRE(bf16(f).bits == b);
  }
}

TEST_CASE("bf16 rounding is within half a unit in the last place, on the host and the device", "[core][bf16]") {
  const std::size_t n = 100000;
  kgpt::Vector<float> x("x", n), back("back", n);
  kgpt::random::fill_normal(x, 5, 0, 100.0);
  kgpt::Vector<bf16> stored("stored", n);
  Kokkos::parallel_for(
      "kgpt::test::bf16", Kokkos::RangePolicy<kgpt::ExecSpace>(0, n), KOKKOS_LAMBDA(const std::size_t i) {
        stored(i) = bf16(x(i));
        back(i) = float(stored(i));
      });
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), stored);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), back);
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(hs(i).bits == bits_of(hx(i)));  // the device rounds as the host does
    REQUIRE(std::fabs(hb(i) - hx(i)) <= std::ldexp(std::fabs(hx(i)), -8));
  }
}

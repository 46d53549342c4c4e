// IEEE half precision conversions: every half value survives half -> float -> half, floats round to
// the nearest half with ties to even, and the edges (subnormals, overflow, infinities, NaN) hold.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "core/fp16.hpp"

using kgpt::float_to_half;
using kgpt::half_to_float;

TEST_CASE("every half value converts to float and back unchanged", "[core][fp16]") {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto half = static_cast<std::uint16_t>(bits);
    const float value = half_to_float(half);
    const bool nan = (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0;
    if (nan) {
      CHECK(std::isnan(value));
      CHECK(std::isnan(half_to_float(float_to_half(value))));
    } else if (float_to_half(value) != half) {
      FAIL("half " << bits << " -> " << value << " -> " << float_to_half(value));
    }
  }
}

TEST_CASE("floats round to the nearest half, ties to even", "[core][fp16]") {
  CHECK(half_to_float(float_to_half(1.0f)) == 1.0f);
  CHECK(half_to_float(float_to_half(65504.0f)) == 65504.0f);  // the largest half
  CHECK(half_to_float(float_to_half(-2.5f)) == -2.5f);
  CHECK(half_to_float(float_to_half(5.9604645e-8f)) == 5.9604645e-8f);  // the smallest subnormal, 2^-24
  // Halves near 1 are 2^-10 apart: halfway points go to the even neighbour.
  CHECK(float_to_half(1.0f + 0.5f / 1024) == float_to_half(1.0f));
  CHECK(float_to_half(1.0f + 1.5f / 1024) == float_to_half(1.0f + 2.0f / 1024));
  CHECK(float_to_half(1.0f + 0.51f / 1024) == float_to_half(1.0f + 1.0f / 1024));
  // Subnormal halves are 2^-24 apart: 1.5 units rounds to 2, 2.5 units to 2.
  CHECK(half_to_float(float_to_half(1.5f * 5.9604645e-8f)) == 2 * 5.9604645e-8f);
  CHECK(half_to_float(float_to_half(2.5f * 5.9604645e-8f)) == 2 * 5.9604645e-8f);
  CHECK(float_to_half(1e-9f) == 0);
  CHECK(float_to_half(-1e-9f) == 0x8000);
  // Beyond the largest half (65504 + half a step and more) is infinity.
  CHECK(std::isinf(half_to_float(float_to_half(65520.0f))));
  CHECK(half_to_float(float_to_half(65519.0f)) == 65504.0f);
  CHECK(std::isinf(half_to_float(float_to_half(std::numeric_limits<float>::infinity()))));
  CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  // Over many values the relative error is at most 2^-11 for normal halves.
  for (int i = 1; i < 100000; ++i) {
    const float x = 6.2e-5f * std::pow(1.0001f, static_cast<float>(i));
    if (x > 65000.0f) break;
    const float back = half_to_float(float_to_half(x));
    CHECK(std::fabs(back - x) <= x * std::ldexp(1.0f, -11));
  }
}

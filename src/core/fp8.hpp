#pragma once
// The two 8-bit float formats of Hopper's FP8 products (OCP FP8, as CUDA's __nv_fp8_e4m3 and
// __nv_fp8_e5m2 and PyTorch's float8_e4m3fn and float8_e5m2 hold them):
//   e4m3  1 sign, 4 exponent, 3 mantissa bits; normal exponents -6..8, largest finite 448, no
//         infinity: weights and activations, where precision matters more than range
//   e5m2  1 sign, 5 exponent, 2 mantissa bits; normal exponents -14..15, largest finite 57,344:
//         gradients, where range matters more
// fp8_round gives the float an FP8 cast would hold: rounded to nearest, ties to even, subnormals
// kept, magnitudes above the largest finite value (infinity too) saturated to it, as a cast after
// PyTorch's clamp to the format's range does; NaN stays NaN. A tensor goes to FP8 at a scale of
// its own: multiplied by 2^k, k the largest with amax 2^k <= the largest finite value
// (fp8_scale_exponent). The scale is a power of two so that scaling and unscaling are exact: the
// rounded tensor, unscaled, holds exactly what an FP8 product with that scale reads. fp8_bits gives
// a rounded value's 8 bits, the operand a GPU's FP8 product reads.

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>

namespace kgpt {

enum class Fp8Format { e4m3, e5m2 };

template <Fp8Format F>
struct Fp8Traits;
template <>
struct Fp8Traits<Fp8Format::e4m3> {
  static constexpr int mantissa_bits = 3;
  static constexpr int min_exponent = -6;         // of the normal numbers; subnormals below
  static constexpr std::uint32_t max_bits = 0x43e00000u;  // 448.0f, 1.75 x 2^8
};
template <>
struct Fp8Traits<Fp8Format::e5m2> {
  static constexpr int mantissa_bits = 2;
  static constexpr int min_exponent = -14;
  static constexpr std::uint32_t max_bits = 0x47600000u;  // 57344.0f, 1.75 x 2^15
};

namespace detail {

KOKKOS_INLINE_FUNCTION std::uint32_t bits_of(float value) {
  std::uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  return word;
}

KOKKOS_INLINE_FUNCTION float float_of(std::uint32_t word) {
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

}  // namespace detail

// 2^k as a float, for -126 <= k <= 127.
KOKKOS_INLINE_FUNCTION float power_of_two(int k) { return detail::float_of(static_cast<std::uint32_t>(k + 127) << 23); }

// Adding 2^(23 + e - mantissa_bits), for a magnitude of exponent e, leaves a sum whose last
// mantissa bit is worth the format's step there, so the float addition rounds the magnitude to a
// step, to nearest with ties to even (the sum's parity is the steps'); subtracting it again is
// exact. Below the format's normal range the step stays that of its smallest normal exponent
// (subnormals). Selects only and float arithmetic, so that a host loop over a row vectorises with
// any x86-64 SIMD. The addition must not be folded away: kgpt compiles without -ffast-math.
template <Fp8Format F>
KOKKOS_INLINE_FUNCTION float fp8_round(float value) {
  using Tr = Fp8Traits<F>;
  const std::uint32_t word = detail::bits_of(value);
  const std::uint32_t sign = word & 0x80000000u, magnitude = word & 0x7fffffffu;
  const int exponent = static_cast<int>(magnitude >> 23) - 127;  // fp32 subnormals: below any kept
  const int kept = exponent > Tr::min_exponent ? exponent : Tr::min_exponent;
  // Wraps for infinity and NaN (exponent 128), whose results the selects below replace.
  const float shifter = detail::float_of(static_cast<std::uint32_t>(kept - Tr::mantissa_bits + 23 + 127) << 23);
  const float rounded = (detail::float_of(magnitude) + shifter) - shifter;
  const std::uint32_t result = magnitude >= Tr::max_bits ? Tr::max_bits : detail::bits_of(rounded);  // saturated
  return magnitude > 0x7f800000u ? value : detail::float_of(sign | result);                          // NaN stays
}

// The largest k with amax x 2^k <= the format's largest finite value; 0 for an amax that is zero,
// negative (an empty tensor's) or not finite; at most 126, so that 2^-k is a normal float.
template <Fp8Format F>
KOKKOS_INLINE_FUNCTION int fp8_scale_exponent(float amax) {
  const std::uint32_t word = detail::bits_of(amax);
  if (!(amax > 0.0f) || (word & 0x7f800000u) == 0x7f800000u) return 0;
  if ((word >> 23) == 0) return 126;  // an fp32 subnormal amax
  const int amax_exponent = static_cast<int>(word >> 23) - 127, max_exponent = static_cast<int>(Fp8Traits<F>::max_bits >> 23) - 127;
  const bool larger_mantissa = (word & 0x7fffffu) > (Fp8Traits<F>::max_bits & 0x7fffffu);
  const int k = max_exponent - amax_exponent - (larger_mantissa ? 1 : 0);
  return k < 126 ? k : 126;
}

// The 8 bits of an FP8 value (what fp8_round returns): the sign, then the biased exponent and the
// mantissa as the format lays them out, or exponent 0 and the value in steps of the smallest
// subnormal; NaN as the format's NaN (0x7f with the sign). A float that is no FP8 value gets the
// bits of its truncation; kgpt encodes rounded values only.
template <Fp8Format F>
KOKKOS_INLINE_FUNCTION std::uint8_t fp8_bits(float rounded) {
  using Tr = Fp8Traits<F>;
  constexpr int bias = 1 - Tr::min_exponent;
  const std::uint32_t word = detail::bits_of(rounded);
  const std::uint32_t sign = (word >> 24) & 0x80u, magnitude = word & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<std::uint8_t>(sign | 0x7fu);
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  const std::uint32_t code =
      exponent >= Tr::min_exponent
          ? (static_cast<std::uint32_t>(exponent + bias) << Tr::mantissa_bits) |
                ((magnitude >> (23 - Tr::mantissa_bits)) & ((1u << Tr::mantissa_bits) - 1u))
          : static_cast<std::uint32_t>(detail::float_of(magnitude) * power_of_two(bias - 1 + Tr::mantissa_bits));
  return static_cast<std::uint8_t>(sign | code);
}

}  // namespace kgpt

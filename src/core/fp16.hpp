#pragma once
// IEEE half precision (binary16) bits on the host: float to half rounded to nearest, ties to even
// (overflow to infinity, NaN kept a quiet NaN), and half to float, exact. Model artifacts store
// small tensors and int8 row scales in it, as parameter-golf's artifacts do.

#include <cstdint>
#include <cstring>

namespace kgpt {

inline std::uint16_t float_to_half(float value) {
  std::uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t exponent = (x >> 23) & 0xffu;
  std::uint32_t mantissa = x & 0x7fffffu;
  if (exponent == 0xffu) return static_cast<std::uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u | (mantissa >> 13) : 0u));
  const int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    // A half subnormal (or zero): the value in units of 2^-24, rounded to nearest even.
    if (e < -10) return static_cast<std::uint16_t>(sign);
    mantissa |= 0x800000u;
    const int shift = 14 - e;
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;  // may carry into the exponent: right
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = sign | (static_cast<std::uint32_t>(e) << 10) | (mantissa >> 13);
  const std::uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry past the top gives infinity
  return static_cast<std::uint16_t>(half);
}

inline float half_to_float(std::uint16_t half) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(half) & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  std::uint32_t mantissa = half & 0x3ffu;
  std::uint32_t x;
  if (exponent == 0) {
    if (mantissa == 0) {
      x = sign;
    } else {
      int shifts = 0;  // normalise the subnormal
      while (!(mantissa & 0x400u)) {
        mantissa <<= 1;
        ++shifts;
      }
      x = sign | (static_cast<std::uint32_t>(113 - shifts) << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 31) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else {
    x = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &x, sizeof value);
  return value;
}

}  // namespace kgpt

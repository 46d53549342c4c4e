#pragma once
// kgpt's bfloat16 storage type, usable in kernels on the host and on CUDA: the upper 16 bits of an
// IEEE float (1 sign, 8 exponent, 7 mantissa bits), rounded to nearest, ties to even, with NaN kept
// a quiet NaN. It is a storage type: arithmetic converts to float, and results are rounded back by
// the bf16(float) constructor. Its bits are those of CUDA's __nv_bfloat16 and PyTorch's bfloat16,
// so cuBLAS and cuDNN read bf16 Views in place.
//
// Activations of train.precision: bf16 are stored in it; weights, gradients, optimizer state,
// norms' statistics, softmax and the loss stay float.

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kgpt {

struct bf16 {
  std::uint16_t bits;

  bf16() = default;
  KOKKOS_INLINE_FUNCTION explicit bf16(float value) : bits(round(value)) {}
  KOKKOS_INLINE_FUNCTION explicit bf16(double value) : bits(round(static_cast<float>(value))) {}
  KOKKOS_INLINE_FUNCTION operator float() const {
    const std::uint32_t word = static_cast<std::uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &word, sizeof value);
    return value;
  }

  static KOKKOS_INLINE_FUNCTION bf16 from_bits(std::uint16_t b) {
    bf16 x;
    x.bits = b;
    return x;
  }

 private:
  static KOKKOS_INLINE_FUNCTION std::uint16_t round(float value) {
    std::uint32_t word;
    std::memcpy(&word, &value, sizeof word);
    if ((word & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((word >> 16) | 0x0040u);  // NaN
    // Adding 0x7fff rounds to nearest; the lowest kept bit breaks ties towards even. Overflow of
    // the largest finite values carries into the exponent and gives infinity, as it should.
    word += 0x7fffu + ((word >> 16) & 1u);
    return static_cast<std::uint16_t>(word >> 16);
  }
};

static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable<bf16>::value, "bf16 is two bytes, copied as bits");

// The type arithmetic on a stored type is done in: float for bf16, the type itself otherwise.
template <class A>
struct Compute {
  using type = A;
};
template <>
struct Compute<bf16> {
  using type = float;
};
template <class A>
using compute_t = typename Compute<A>::type;

// Stores a computed value in storage type A (rounding to bf16 where A is bf16).
template <class A, class V>
KOKKOS_INLINE_FUNCTION A store(V value) {
  return static_cast<A>(value);
}

}  // namespace kgpt

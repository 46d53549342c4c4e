#pragma once
// Counter-based random numbers: the value at (seed, stream, index) is a pure function, so every
// rank, every backend and every Kokkos version draws the same numbers (Kokkos::Random differs
// between versions and backends). Usable inside kernels.

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "core/kernel.hpp"

namespace kgpt::random {

// SplitMix64 finaliser: a strong 64-bit mix of one counter.
KOKKOS_INLINE_FUNCTION std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

KOKKOS_INLINE_FUNCTION std::uint64_t bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return mix(mix(mix(seed) ^ stream) ^ index);
}

// Uniform in (0, 1), never exactly 0 or 1.
KOKKOS_INLINE_FUNCTION double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return (static_cast<double>(bits(seed, stream, index) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller on two uniforms drawn at 2*index and 2*index + 1.
KOKKOS_INLINE_FUNCTION double normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const double u1 = uniform(seed, stream, 2 * index);
  const double u2 = uniform(seed, stream, 2 * index + 1);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

namespace {  // kernels: internal linkage, see core/kernel.hpp

// Fills a View of any rank (contiguous) with N(0, std^2) values from (seed, stream).
template <class View>
void fill_normal(const View& view, std::uint64_t seed, std::uint64_t stream, double std_dev) {
  using T = typename View::non_const_value_type;
  auto flat = Kokkos::View<T*, typename View::memory_space, Kokkos::MemoryUnmanaged>(view.data(), view.span());
  kgpt::parallel_for(
      "kgpt::random::fill_normal", Kokkos::RangePolicy<typename View::execution_space>(0, view.span()),
      KOKKOS_LAMBDA(const std::size_t i) { flat(i) = static_cast<T>(std_dev * normal(seed, stream, i)); });
}

// Fills a View with uniform values in (low, high).
template <class View>
void fill_uniform(const View& view, std::uint64_t seed, std::uint64_t stream, double low, double high) {
  using T = typename View::non_const_value_type;
  auto flat = Kokkos::View<T*, typename View::memory_space, Kokkos::MemoryUnmanaged>(view.data(), view.span());
  kgpt::parallel_for(
      "kgpt::random::fill_uniform", Kokkos::RangePolicy<typename View::execution_space>(0, view.span()),
      KOKKOS_LAMBDA(const std::size_t i) { flat(i) = static_cast<T>(low + (high - low) * uniform(seed, stream, i)); });
}

}  // namespace

}  // namespace kgpt::random

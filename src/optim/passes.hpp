#pragma once
// What every optimizer rule's kernels share (optim/rules/): a pass over a tensor that reads each
// gradient times `grad_factor` (a device scalar: the clipping factor of the step; none means 1), so
// clipping costs no pass of its own, and with `norm_part` (a device scalar) also writes the sum of
// the squared raw gradients there, so that without clipping the gradient norm costs no pass either;
// and the chunks by which one launch covers many tensors.

#include <cmath>

#include "core/backend.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "core/kernel.hpp"

namespace kgpt::optim {

// The factor gradients are read with. On a GPU it stays a device scalar, read by every thread; on
// the host it is read once here (host memory, already computed: the host runs kernels in order), so
// that the update loops stay vectorisable.
template <class T>
struct GradFactor {
  const double* device = nullptr;
  T value = T(1);
  explicit GradFactor(const double* factor) {
    if constexpr (backend::Traits::device_scalars) {
      device = factor;
    } else if (factor != nullptr) {
      value = static_cast<T>(*factor);
    }
  }
  KOKKOS_INLINE_FUNCTION T get() const {
    if constexpr (backend::Traits::device_scalars) return device != nullptr ? static_cast<T>(*device) : T(1);
    else return value;
  }
};

// One launch over many tensors works in chunks of this many elements, a team each.
constexpr std::size_t kUpdateChunk = 4096;

namespace {  // kernels: internal linkage, see core/kernel.hpp

// Runs body(i) for i < n, and with norm_part also sums g(i)^2 into it, in a fixed order. On a GPU,
// one thread per element does both. On the host, each chunk of the buffer is one loop that updates
// and sums the squares in float, vectorised (the simd reduction: sums in the lanes' order, fixed for
// a build), and the chunks' sums join in double: the norm costs no pass over memory and almost no
// time.
template <class T, class Body>
void update_pass(const ExecSpace& exec, const char* label, std::size_t n, const ConstVector<T>& g, double* norm_part,
                 const Body& body) {
  if (norm_part == nullptr) {
    kgpt::parallel_for(label, Kokkos::RangePolicy<ExecSpace>(exec, 0, n), body);
    return;
  }
  if constexpr (backend::Traits::device_scalars) {
    Kokkos::parallel_reduce(
        label, Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
        KOKKOS_LAMBDA(const std::size_t i, double& acc) {
          body(i);
          const double grad = static_cast<double>(g(i));
          acc += grad * grad;
        },
        Kokkos::View<double, MemSpace>(norm_part));
  } else {
    constexpr std::size_t chunk = 2048;
    const std::size_t chunks = (n + chunk - 1) / chunk;
    Kokkos::parallel_reduce(
        label, Kokkos::RangePolicy<ExecSpace>(exec, 0, chunks),
        [=](const std::size_t c, double& acc) {
          const std::size_t begin = c * chunk, end = begin + chunk < n ? begin + chunk : n;
          T sum = 0;
#if !KGPT_BACKEND_CUDA  // host builds compile with -fopenmp-simd; this branch runs on the host only
#pragma omp simd reduction(+ : sum)
#endif
          for (std::size_t i = begin; i < end; ++i) {
            body(i);
            sum += g(i) * g(i);
          }
          acc += static_cast<double>(sum);
        },
        Kokkos::View<double, MemSpace>(norm_part));
  }
}

// The segment a chunk of kUpdateChunk elements belongs to (the last one starting at or before it, by
// binary search over a table of segments with `first_chunk` and `size`), and the chunk's elements in it.
template <class Segment>
KOKKOS_INLINE_FUNCTION Segment chunk_of(const Kokkos::View<const Segment*, MemSpace>& segments, std::size_t chunk,
                                        std::size_t& begin, std::size_t& end) {
  int lo = 0, hi = static_cast<int>(segments.extent(0)) - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (segments(mid).first_chunk <= chunk) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const Segment seg = segments(lo);
  begin = (chunk - seg.first_chunk) * kUpdateChunk;
  end = begin + kUpdateChunk < seg.size ? begin + kUpdateChunk : seg.size;
  return seg;
}

}  // namespace

}  // namespace kgpt::optim

#pragma once
// Moves between the token-major matrices of the projections and the head-major tensors of
// attention. A projection output m (N = B*T, cols) holds head h's feature d of token (b, t) at
// column offset + h*D + d; the tensor x (B, heads, T, D) holds it at x(b, h, t, d). Head-major
// tensors make each (b, h) slice a contiguous LayoutRight (T, D) matrix for the GEMMs.

#include "core/views.hpp"

namespace kgpt::model::ops {

// x(b, h, t, d) = m(b*T + t, offset + h*D + d)
template <class T>
void split_heads(const ExecSpace& exec, const ConstMatrix<T>& m, int offset, const Tensor4<T>& x) {
  const int b = static_cast<int>(x.extent(0)), h = static_cast<int>(x.extent(1));
  const int t = static_cast<int>(x.extent(2)), d = static_cast<int>(x.extent(3));
  Kokkos::parallel_for(
      "kgpt::heads::split", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<4>>(exec, {0, 0, 0, 0}, {b, h, t, d}),
      KOKKOS_LAMBDA(const int i, const int j, const int k, const int l) {
        x(i, j, k, l) = m(i * t + k, offset + j * d + l);
      });
}

// m(b*T + t, offset + h*D + d) = x(b, h, t, d); other columns of m are left as they are.
template <class T>
void merge_heads(const ExecSpace& exec, const ConstTensor4<T>& x, int offset, const Matrix<T>& m) {
  const int b = static_cast<int>(x.extent(0)), h = static_cast<int>(x.extent(1));
  const int t = static_cast<int>(x.extent(2)), d = static_cast<int>(x.extent(3));
  Kokkos::parallel_for(
      "kgpt::heads::merge", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<4>>(exec, {0, 0, 0, 0}, {b, h, t, d}),
      KOKKOS_LAMBDA(const int i, const int j, const int k, const int l) {
        m(i * t + k, offset + j * d + l) = x(i, j, k, l);
      });
}

}  // namespace kgpt::model::ops

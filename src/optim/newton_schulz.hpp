#pragma once
// Muon's orthogonalisation: the quintic Newton-Schulz iteration of Keller Jordan's Muon as
// parameter-golf runs it. X = G / (||G||_F + 1e-7), working on the wide orientation (rows <= cols,
// transposing when needed); then `steps` times: A = X X^T, B = b A + c A A, X = a X + B X, with
// (a, b, c) = (3.4445, -4.7750, 2.0315). The result has singular values near 1.

#include <algorithm>

#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/gemm.hpp"

namespace kgpt::optim {

// Workspaces for matrices of up to max_elements entries whose smaller side is at most max_side.
template <class T>
struct NewtonSchulzWorkspace {
  NewtonSchulzWorkspace(std::size_t max_elements, std::size_t max_side)
      : x("kgpt::newton_schulz::x", max_elements),
        x_next("kgpt::newton_schulz::x_next", max_elements),
        a("kgpt::newton_schulz::a", max_side * max_side),
        b("kgpt::newton_schulz::b", max_side * max_side) {}
  Vector<T> x, x_next, a, b;
};

// out (rows, cols) = NewtonSchulz(g (rows, cols)). out may be g: g is read before out is written.
template <class T>
void newton_schulz(const ExecSpace& exec, const ConstMatrix<T>& g, const Matrix<T>& out, int steps,
                   NewtonSchulzWorkspace<T>& work, model::GemmPrecision precision = model::GemmPrecision::fp32) {
  const std::size_t rows = g.extent(0), cols = g.extent(1);
  const bool transposed = rows > cols;
  const std::size_t m = transposed ? cols : rows, n = transposed ? rows : cols;
  Matrix<T> x(work.x.data(), m, n), x_next(work.x_next.data(), m, n);
  Matrix<T> a(work.a.data(), m, m), b(work.b.data(), m, m);

  T sum_sq = 0;
  Kokkos::parallel_reduce(
      "kgpt::newton_schulz::norm", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {rows, cols}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j, T& acc) { acc += g(i, j) * g(i, j); }, sum_sq);
  const T inverse = T(1) / (compat::sqrt(sum_sq) + T(1e-7));
  Kokkos::parallel_for(
      "kgpt::newton_schulz::normalise", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {rows, cols}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
        if (transposed) x(j, i) = g(i, j) * inverse;
        else x(i, j) = g(i, j) * inverse;
      });
  const T ca = T(3.4445), cb = T(-4.7750), cc = T(2.0315);
  for (int s = 0; s < steps; ++s) {
    model::gemm(exec, model::Op::none, model::Op::transpose, T(1), x, x, T(0), a, precision);  // A = X X^T
    Kokkos::deep_copy(exec, b, a);
    model::gemm(exec, model::Op::none, model::Op::none, cc, a, a, cb, b, precision);      // B = b A + c A A
    Kokkos::deep_copy(exec, x_next, x);
    model::gemm(exec, model::Op::none, model::Op::none, T(1), b, x, ca, x_next, precision);  // X' = a X + B X
    std::swap(x, x_next);
  }
  const Matrix<T> result = x;
  Kokkos::parallel_for(
      "kgpt::newton_schulz::store", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {rows, cols}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) { out(i, j) = transposed ? result(j, i) : result(i, j); });
}

}  // namespace kgpt::optim

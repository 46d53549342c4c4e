#pragma once
// Muon's orthogonalisation: the quintic Newton-Schulz iteration of Keller Jordan's Muon as
// parameter-golf runs it. X = G / (||G||_F + 1e-7), working on the wide orientation (rows <= cols,
// transposing when needed); then `steps` times: A = X X^T, B = b A + c A A, X = a X + B X, with
// (a, b, c) = (3.4445, -4.7750, 2.0315). The result has singular values near 1.
// X, A and B are stored in X's type: float (or double) in fp32 models, bf16 in bf16 ones (as
// parameter-golf runs it), with fp32 accumulation in the products. The norm stays on the device.

#include <algorithm>
#include <type_traits>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/gemm/gemm.hpp"
#include "core/kernel.hpp"

namespace kgpt::optim {

// Workspaces for matrices of up to max_elements entries whose smaller side is at most max_side.
template <class X>
struct NewtonSchulzWorkspace {
  NewtonSchulzWorkspace(std::size_t max_elements, std::size_t max_side)
      : x("kgpt::newton_schulz::x", max_elements),
        x_next("kgpt::newton_schulz::x_next", max_elements),
        a("kgpt::newton_schulz::a", max_side * max_side),
        b("kgpt::newton_schulz::b", max_side * max_side),
        norm("kgpt::newton_schulz::norm") {}
  static std::size_t bytes(std::size_t max_elements, std::size_t max_side) {
    return (2 * max_elements + 2 * max_side * max_side) * sizeof(X) + sizeof(double);
  }
  Vector<X> x, x_next, a, b;
  Kokkos::View<double, MemSpace> norm;
};

// The orthogonalised matrix of g (rows, cols): the wide orientation (m, n) = (min, max) of it, in
// the workspace, and whether it is g's transpose.
template <class X>
struct Orthogonalised {
  Matrix<X> x;
  bool transposed;
};

namespace {  // kernels: internal linkage, see core/kernel.hpp

template <class X, class T>
Orthogonalised<X> newton_schulz_core(const ExecSpace& exec, const ConstMatrix<T>& g, int steps,
                                     NewtonSchulzWorkspace<X>& work) {
  using C = compute_t<X>;
  const std::size_t rows = g.extent(0), cols = g.extent(1);
  const bool transposed = rows > cols;
  const std::size_t m = transposed ? cols : rows, n = transposed ? rows : cols;
  Matrix<X> x(work.x.data(), m, n), x_next(work.x_next.data(), m, n);
  const Matrix<X> a(work.a.data(), m, m), b(work.b.data(), m, m);
  const auto norm = work.norm;
  Kokkos::parallel_reduce(
      "kgpt::newton_schulz::norm", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows * cols),
      KOKKOS_LAMBDA(const std::size_t e, double& acc) {
        const double v = static_cast<double>(g(e / cols, e % cols));
        acc += v * v;
      },
      norm);
  kgpt::parallel_for(
      "kgpt::newton_schulz::normalise", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows * cols),
      KOKKOS_LAMBDA(const std::size_t e) {
        const std::size_t i = e / cols, j = e % cols;
        const T inverse = T(1) / (compat::sqrt(static_cast<T>(norm())) + T(1e-7));
        if (transposed) x(j, i) = store<X>(g(i, j) * inverse);
        else x(i, j) = store<X>(g(i, j) * inverse);
      });
  const C ca = C(3.4445), cb = C(-4.7750), cc = C(2.0315);
  for (int s = 0; s < steps; ++s) {
    model::gemm(exec, model::Op::none, model::Op::transpose, C(1), x, x, C(0), a);                 // A = X X^T
    model::gemm_ex(exec, model::Op::none, model::Op::none, cc, a, a, cb, a, b, ConstVector<X>());  // B = b A + c A A
    model::gemm_ex(exec, model::Op::none, model::Op::none, C(1), b, x, ca, x, x_next, ConstVector<X>());  // X' = a X + B X
    std::swap(x, x_next);
  }
  return {x, transposed};
}

// out (rows, cols) = NewtonSchulz(g (rows, cols)). out may be g: g is read before out is written.
template <class T, class X = T>
void newton_schulz(const ExecSpace& exec, const ConstMatrix<T>& g, const Matrix<T>& out, int steps,
                   NewtonSchulzWorkspace<X>& work) {
  const Orthogonalised<X> r = newton_schulz_core<X, T>(exec, g, steps, work);
  const Matrix<X> x = r.x;
  const bool transposed = r.transposed;
  const std::size_t rows = g.extent(0), cols = g.extent(1);
  kgpt::parallel_for(
      "kgpt::newton_schulz::store", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows * cols), KOKKOS_LAMBDA(const std::size_t e) {
        const std::size_t i = e / cols, j = e % cols;
        out(i, j) = T(transposed ? x(j, i) : x(i, j));
      });
}

}  // namespace

}  // namespace kgpt::optim

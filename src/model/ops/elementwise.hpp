#pragma once
// The golf block's per-channel parameter ops. Shapes: x, x0, y (N, C); s (C); mix (2, C).
//   residual_mix:  y = mix(0) * x + mix(1) * x0
//                  dx = mix(0) * dy (overwritten), dx0 += mix(1) * dy, dmix(0) += sum_n x dy, dmix(1) += sum_n x0 dy
//   scaled_add:    x += s * y (in place: a residual add with a per-channel scale)
//                  dy = s * dx (overwritten), ds += sum_n y dx; dx itself flows on unchanged
//   add_into:      y += x (two gradient paths meeting)
//   bias:          y += bias; dbias += sum_n dy (a linear layer's bias)
// Channel sums (detail::column_sums) run in a fixed order: reproducible run to run, and on the host
// the same as a plain loop over n.

#include "core/views.hpp"

namespace kgpt::model::ops {

namespace detail {

// out(j) += sum over rows i of term(i, j), for each of the (N, C) columns j: one team per column
// whose threads split the rows. On the host (one thread per team) the rows are added in order, as a
// plain loop would; on a GPU C columns would otherwise leave all but C threads idle over N rows.
template <class T, class Term, class Out>
void column_sums(const ExecSpace& exec, const char* label, int n, int c, const Term& term, const Out& out) {
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      label, Kokkos::TeamPolicy<ExecSpace>(exec, c, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const int j = team.league_rank();
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n), [&](const int i, T& acc) { acc += term(i, j); }, sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { out(j) += sum; });
      });
}

template <class T, class TermA, class TermB, class OutA, class OutB>
void column_sums(const ExecSpace& exec, const char* label, int n, int c, const TermA& term_a, const TermB& term_b,
                 const OutA& out_a, const OutB& out_b) {
  column_sums<T>(exec, label, n, c, term_a, out_a);
  column_sums<T>(exec, label, n, c, term_b, out_b);
}

}  // namespace detail

template <class T>
void residual_mix_forward(const ExecSpace& exec, const ConstMatrix<T>& x, const ConstMatrix<T>& x0,
                          const ConstMatrix<T>& mix, const Matrix<T>& y) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::residual_mix::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, c}),
      KOKKOS_LAMBDA(const int i, const int j) { y(i, j) = mix(0, j) * x(i, j) + mix(1, j) * x0(i, j); });
}

template <class T>
void residual_mix_backward(const ExecSpace& exec, const ConstMatrix<T>& x, const ConstMatrix<T>& x0,
                           const ConstMatrix<T>& mix, const ConstMatrix<T>& dy, const Matrix<T>& dx,
                           const Matrix<T>& dx0, const Matrix<T>& dmix) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  detail::column_sums<T>(
      exec, "kgpt::residual_mix::backward_mix", n, c,
      KOKKOS_LAMBDA(const int i, const int j) { return x(i, j) * dy(i, j); },
      KOKKOS_LAMBDA(const int i, const int j) { return x0(i, j) * dy(i, j); }, Kokkos::subview(dmix, 0, Kokkos::ALL()),
      Kokkos::subview(dmix, 1, Kokkos::ALL()));
  Kokkos::parallel_for(
      "kgpt::residual_mix::backward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, c}),
      KOKKOS_LAMBDA(const int i, const int j) {
        const T g = dy(i, j);
        dx(i, j) = mix(0, j) * g;
        dx0(i, j) += mix(1, j) * g;
      });
}

template <class T>
void scaled_add_forward(const ExecSpace& exec, const ConstMatrix<T>& y, const ConstVector<T>& s, const Matrix<T>& x) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::scaled_add::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, c}),
      KOKKOS_LAMBDA(const int i, const int j) { x(i, j) += s(j) * y(i, j); });
}

template <class T>
void scaled_add_backward(const ExecSpace& exec, const ConstMatrix<T>& y, const ConstVector<T>& s,
                         const ConstMatrix<T>& dx, const Matrix<T>& dy, const Vector<T>& ds) {
  const int n = static_cast<int>(y.extent(0)), c = static_cast<int>(y.extent(1));
  detail::column_sums<T>(exec, "kgpt::scaled_add::backward_scale", n, c,
                         KOKKOS_LAMBDA(const int i, const int j) { return y(i, j) * dx(i, j); }, ds);
  Kokkos::parallel_for(
      "kgpt::scaled_add::backward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, c}),
      KOKKOS_LAMBDA(const int i, const int j) { dy(i, j) = s(j) * dx(i, j); });
}

// y += x, elementwise on (N, C): joins gradients that reach one tensor by two paths.
template <class T>
void add_into(const ExecSpace& exec, const ConstMatrix<T>& x, const Matrix<T>& y) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::add_into", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, c}),
      KOKKOS_LAMBDA(const int i, const int j) { y(i, j) += x(i, j); });
}

// Bias of a linear layer: y(n, f) += bias(f); dbias(f) += sum_n dy(n, f) (row order per column).
template <class T>
void bias_forward(const ExecSpace& exec, const ConstVector<T>& bias, const Matrix<T>& y) {
  const int n = static_cast<int>(y.extent(0)), f = static_cast<int>(y.extent(1));
  Kokkos::parallel_for(
      "kgpt::bias::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, f}),
      KOKKOS_LAMBDA(const int i, const int j) { y(i, j) += bias(j); });
}

template <class T>
void bias_backward(const ExecSpace& exec, const ConstMatrix<T>& dy, const Vector<T>& dbias) {
  const int n = static_cast<int>(dy.extent(0)), f = static_cast<int>(dy.extent(1));
  detail::column_sums<T>(exec, "kgpt::bias::backward", n, f,
                         KOKKOS_LAMBDA(const int i, const int j) { return dy(i, j); }, dbias);
}

}  // namespace kgpt::model::ops

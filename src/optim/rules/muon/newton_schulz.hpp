#pragma once
// Muon's orthogonalisation: the quintic Newton-Schulz iteration of Keller Jordan's Muon as
// parameter-golf runs it. X = G / (||G||_F + 1e-7), working on the wide orientation (rows <= cols,
// transposing when needed); then `steps` times: A = X X^T, B = b A + c A A, X = a X + B X, with
// (a, b, c) = (3.4445, -4.7750, 2.0315). The result has singular values near 1.
// X, A and B are stored in X's type: float (or double) in fp32 models, bf16 in bf16 ones (as
// parameter-golf runs it), with fp32 accumulation in the products. The norm stays on the device.
// Matrices of one shape are orthogonalised together: each stage is one launch or one batched
// product for all of them (golf's 54 matrices are 4 shapes: 60 products a step instead of 810),
// and every matrix of a batch gets exactly the arithmetic it would get alone.

#include <algorithm>
#include <type_traits>

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/gemm/gemm.hpp"
#include "core/kernel.hpp"

namespace kgpt::optim {

// The multiply-adds of `steps` iterations on a (rows, cols) matrix, counted as the products do
// (2 m n k each): what sharing Muon across ranks balances.
inline double newton_schulz_flops(std::size_t rows, std::size_t cols, int steps) {
  const double m = static_cast<double>(std::min(rows, cols)), n = static_cast<double>(std::max(rows, cols));
  return steps * (2 * m * m * n + 2 * m * m * m + 2 * m * m * n);
}

// Each matrix's norm is summed in parts of this many elements, a team each, then the parts in order:
// on a GPU, so that a batch of 18 matrices is hundreds of teams (a team per matrix took 3.9 ms of a
// golf step on an H200); on the host in one part per matrix (0 here), its elements in order.
constexpr std::size_t kNormPart = backend::on_gpu ? 16384 : 0;

// Workspaces for batches of matrices: X and its next value (`elements` entries over the batch), A
// and B (`squares` entries: m^2 per matrix of wide orientation (m, n)), one norm per matrix and the
// parts they are summed from (`part` elements each; 0: one part a matrix).
template <class X>
struct NewtonSchulzWorkspace {
  NewtonSchulzWorkspace(std::size_t elements, std::size_t squares, std::size_t count, std::size_t part_ = kNormPart)
      : x("kgpt::newton_schulz::x", elements),
        x_next("kgpt::newton_schulz::x_next", elements),
        a("kgpt::newton_schulz::a", squares),
        b("kgpt::newton_schulz::b", squares),
        norms("kgpt::newton_schulz::norms", norm_slots(elements, count, part_)),
        part(part_) {}
  // One matrix at a time: up to max_elements entries, its smaller side at most max_side.
  NewtonSchulzWorkspace(std::size_t max_elements, std::size_t max_side)
      : NewtonSchulzWorkspace(max_elements, max_side * max_side, 1) {}
  NewtonSchulzWorkspace() : NewtonSchulzWorkspace(1, 1, 1) {}
  // The norms, then the parts: at most elements / part + count of them (a matrix's last part may be
  // short).
  static std::size_t norm_slots(std::size_t elements, std::size_t count, std::size_t part = kNormPart) {
    return 2 * count + (part > 0 ? elements / part : 0);
  }
  static std::size_t bytes(std::size_t elements, std::size_t squares, std::size_t count) {
    return (2 * elements + 2 * squares) * sizeof(X) + norm_slots(elements, count) * sizeof(double);
  }
  // Elements of a part of a matrix of `size`, and the parts of such a matrix.
  std::size_t part_of(std::size_t size) const { return part > 0 && part < size ? part : (size > 0 ? size : 1); }
  std::size_t parts_of(std::size_t size) const { return (size + part_of(size) - 1) / part_of(size); }
  static std::size_t bytes(std::size_t max_elements, std::size_t max_side) {
    return bytes(max_elements, max_side * max_side, 1);
  }
  Vector<X> x, x_next, a, b;
  Kokkos::View<double*, MemSpace> norms;
  std::size_t part;
};

// The orthogonalised matrices of a batch of g (rows, cols): matrix k in the wide orientation (m, n)
// = (min, max) of g's at x + k m n, in the workspace, and whether it is g's transpose.
template <class X>
struct Orthogonalised {
  X* x;
  std::size_t m, n, count;
  bool transposed;
  Matrix<X> item(std::size_t k) const { return Matrix<X>(x + k * m * n, m, n); }
  // The matrices' shape as given: the iteration ran on their transposes where rows > cols.
  std::size_t rows() const { return transposed ? n : m; }
  std::size_t cols() const { return transposed ? m : n; }
  // Element e of matrix k, row-major in that shape.
  KOKKOS_INLINE_FUNCTION X at(std::size_t k, std::size_t e) const {
    const std::size_t c = transposed ? m : n, i = e / c, j = e % c;
    return x[k * m * n + (transposed ? j * n + i : i * n + j)];
  }
};

namespace {  // kernels: internal linkage, see core/kernel.hpp

// `count` matrices g_k (rows, cols), g_k at g + k rows cols, orthogonalised together.
template <class X, class T>
Orthogonalised<X> newton_schulz_batch(const ExecSpace& exec, const T* g, std::size_t rows, std::size_t cols,
                                      std::size_t count, int steps, NewtonSchulzWorkspace<X>& work) {
  using C = compute_t<X>;
  const bool transposed = rows > cols;
  const std::size_t m = transposed ? cols : rows, n = transposed ? rows : cols, size = rows * cols;
  X* x = work.x.data();
  X* x_next = work.x_next.data();
  X* const a = work.a.data();
  X* const b = work.b.data();
  const auto norms = work.norms;
  // Each matrix's squared norm in double: its parts, a team each, then each matrix's parts in
  // order (on the host one part: the elements in order).
  const std::size_t part = work.part_of(size), parts = work.parts_of(size);
  double* const part_sums = norms.data() + count;
  kgpt::parallel_for(
      "kgpt::newton_schulz::norm", Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(count * parts), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Kokkos::TeamPolicy<ExecSpace>::member_type& team) {
        const std::size_t k = static_cast<std::size_t>(team.league_rank()) / parts;
        const std::size_t first = static_cast<std::size_t>(team.league_rank()) % parts * part;
        const std::size_t last = first + part < size ? first + part : size;
        double sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, first, last),
            [&](const std::size_t e, double& acc) {
              const double v = static_cast<double>(g[k * size + e]);
              acc += v * v;
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { part_sums[k * parts + first / part] = sum; });
      });
  kgpt::parallel_for(
      "kgpt::newton_schulz::norm_parts", Kokkos::RangePolicy<ExecSpace>(exec, 0, count), KOKKOS_LAMBDA(const std::size_t k) {
        double sum = 0;
        for (std::size_t p = 0; p < parts; ++p) sum += part_sums[k * parts + p];
        norms(k) = sum;
      });
  X* const into = x;
  kgpt::parallel_for(
      "kgpt::newton_schulz::normalise", Kokkos::RangePolicy<ExecSpace>(exec, 0, count * size),
      KOKKOS_LAMBDA(const std::size_t flat) {
        const std::size_t k = flat / size, e = flat % size, i = e / cols, j = e % cols;
        const T inverse = T(1) / (compat::sqrt(static_cast<T>(norms(k))) + T(1e-7));
        into[k * size + (transposed ? j * n + i : i * n + j)] = store<X>(g[flat] * inverse);
      });
  using model::Op;
  using model::Strided;
  const C ca = C(3.4445), cb = C(-4.7750), cc = C(2.0315);
  const Strided<X> as{a, m, m, m, m * m}, bs{b, m, m, m, m * m};
  const Strided<const X> a_in{a, m, m, m, m * m}, b_in{b, m, m, m, m * m};
  for (int s = 0; s < steps; ++s) {
    const Strided<const X> xs{x, m, n, n, size};
    const Strided<X> next{x_next, m, n, n, size};
    model::gemm_batched<X, X>(exec, Op::none, Op::transpose, C(1), xs, xs, C(0), as, count);      // A = X X^T
    model::gemm_batched_ex<X, X>(exec, Op::none, Op::none, cc, a_in, a_in, cb, a_in, bs, count);  // B = b A + c A A
    model::gemm_batched_ex<X, X>(exec, Op::none, Op::none, C(1), b_in, xs, ca, xs, next, count);  // X' = a X + B X
    std::swap(x, x_next);
  }
  return {x, m, n, count, transposed};
}

// One matrix: the batch of one.
template <class X, class T>
Orthogonalised<X> newton_schulz_core(const ExecSpace& exec, const ConstMatrix<T>& g, int steps,
                                     NewtonSchulzWorkspace<X>& work) {
  return newton_schulz_batch<X, T>(exec, g.data(), g.extent(0), g.extent(1), 1, steps, work);
}

// out (rows, cols) = NewtonSchulz(g (rows, cols)). out may be g: g is read before out is written.
template <class T, class X = T>
void newton_schulz(const ExecSpace& exec, const ConstMatrix<T>& g, const Matrix<T>& out, int steps,
                   NewtonSchulzWorkspace<X>& work) {
  const Orthogonalised<X> r = newton_schulz_core<X, T>(exec, g, steps, work);
  const Matrix<X> x = r.item(0);
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

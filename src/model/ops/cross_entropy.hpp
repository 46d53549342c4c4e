#pragma once
// The output head and the loss:
//   z = x W^T (N, V);  z' = cap * tanh(z / cap) (cap = 0: z' = z);  loss(n) = logsumexp(z'(n)) - z'(n, y(n))
//   mean loss = sum(loss) / N, accumulated in double on the device.
// Backward with upstream scale g (the caller's grad_scale; the 1/N of the mean is applied here):
//   dz'(n, v) = g / N * (softmax(z'(n))(v) - [v = y(n)]);  dz = dz' * (1 - (z'/cap)^2)
//   dx = dz W (overwritten);  dW += dz^T x (accumulated: a tied W also gets the embedding's gradient).
// x (N, C) and W (V, C) activations-typed (W: the head's weights in that type); targets (B, T) with
// N = B*T. `logits` (N, V) gets z from the product, in the activation type (bf16 in a bf16 model, as
// PyTorch's autocast writes it) or in T. Logits stored in T are overwritten by z' in the forward's
// first pass, so the cap's tanh is taken once per logit instead of three times (the forward's two
// passes and the backward); bf16 logits keep z and every pass caps it in T, so nothing is rounded
// to bf16 twice. The softmax and the loss are computed in T, never stored. lse (N) and losses (N) of
// T are kept by the forward. The backward writes dz into d_logits (N, V), which may be `logits`
// itself. dW: the parameters' gradient.

#include <type_traits>

#include "core/bf16.hpp"
#include "core/kernel.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/gemm/gemm.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::model::ops {

// z' of a logit z.
template <class T>
KOKKOS_INLINE_FUNCTION T capped(T z, T softcap) {
  return softcap > T(0) ? softcap * compat::tanh(z / softcap) : z;
}

// Whether logits of the view type Z hold z' after the forward (they are stored in T).
template <class T, class Z>
using StoresCapped = std::is_same<typename Z::non_const_value_type, T>;

// z' of a stored logit after the forward: the value itself, or its z capped.
template <bool StoredCapped, class T, class L>
KOKKOS_INLINE_FUNCTION T capped_logit(L stored, T softcap) {
  if constexpr (StoredCapped) {
    return T(stored);
  } else {
    return capped(T(stored), softcap);
  }
}

// Adds the micro-batch's mean loss to loss_sum (a device scalar) without waiting for it.
template <class T, class X, class W, class Z>
void cross_entropy_forward(const ExecSpace& exec, const X& x, const W& w, const ConstTokenMatrix& targets, T softcap,
                           const Z& logits, const Vector<T>& lse, const Vector<T>& losses,
                           const Kokkos::View<double, MemSpace>& loss_sum, const Kokkos::View<double, MemSpace>& scratch) {
  gemm(exec, Op::none, Op::transpose, T(1), x, w, T(0), logits);
  const int n = static_cast<int>(logits.extent(0)), v = static_cast<int>(logits.extent(1));
  const int seq = static_cast<int>(targets.extent(1));
  using InPlace = StoresCapped<T, Z>;
  kgpt::parallel_for(
      "kgpt::cross_entropy::forward", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        T row_max = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, v),
            [&](const int j, T& m) {
              const T z = capped(T(logits(row, j)), softcap);
              if constexpr (InPlace::value) {
                if (softcap > T(0)) logits(row, j) = z;
              }
              m = (j == 0 || z > m) ? z : m;
            },
            Kokkos::Max<T>(row_max));
        if constexpr (InPlace::value) team.team_barrier();  // z' read below by other threads of the team
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, v),
            [&](const int j, T& acc) { acc += compat::exp(capped_logit<InPlace::value>(logits(row, j), softcap) - row_max); },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          const T log_sum = row_max + compat::log(sum);
          lse(row) = log_sum;
          losses(row) = log_sum - capped_logit<InPlace::value>(logits(row, targets(row / seq, row % seq)), softcap);
        });
      });
  Kokkos::parallel_reduce(
      "kgpt::cross_entropy::sum", Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
      KOKKOS_LAMBDA(const int row, double& acc) { acc += static_cast<double>(losses(row)); }, scratch);
  kgpt::parallel_for(
      "kgpt::cross_entropy::mean", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1),
      KOKKOS_LAMBDA(const int) { loss_sum() += scratch() / n; });
}

// The same, returning the micro-batch's mean loss (this waits for the device).
template <class T, class X, class W, class Z>
double cross_entropy_forward(const ExecSpace& exec, const X& x, const W& w, const ConstTokenMatrix& targets, T softcap,
                             const Z& logits, const Vector<T>& lse, const Vector<T>& losses) {
  const Kokkos::View<double, MemSpace> sum("kgpt::cross_entropy::loss"), scratch("kgpt::cross_entropy::scratch");
  cross_entropy_forward(exec, x, w, targets, softcap, logits, lse, losses, sum, scratch);
  double host = 0;
  Kokkos::deep_copy(exec, host, sum);
  exec.fence();
  return host;
}

template <class T, class X, class W, class Z, class DZ, class DX, class DW>
void cross_entropy_backward(const ExecSpace& exec, const X& x, const W& w, const ConstTokenMatrix& targets, T softcap,
                            const Z& logits, const ConstVector<T>& lse, T grad_scale, const DZ& d_logits,
                            const DX& dx, const DW& dw) {
  using A = typename DZ::value_type;
  const int n = static_cast<int>(logits.extent(0));
  const int seq = static_cast<int>(targets.extent(1));
  const T scale = grad_scale / static_cast<T>(n);
  using InPlace = StoresCapped<T, Z>;
  for_each_element(exec, "kgpt::cross_entropy::backward", logits.extent(0), logits.extent(1),
                   KOKKOS_LAMBDA(const std::size_t row, const std::size_t j) {
                     const T z = capped_logit<InPlace::value>(logits(row, j), softcap);
                     const bool target = static_cast<int>(j) == targets(row / seq, row % seq);
                     T grad = scale * (compat::exp(z - lse(row)) - (target ? T(1) : T(0)));
                     if (softcap > T(0)) {
                       const T ratio = z / softcap;
                       grad *= T(1) - ratio * ratio;
                     }
                     d_logits(row, j) = store<A>(grad);
                   });
  using ConstZ = Kokkos::View<const A**, Layout, MemSpace>;
  gemm(exec, Op::none, Op::none, T(1), ConstZ(d_logits), w, T(0), dx);
  gemm(exec, Op::transpose, Op::none, T(1), ConstZ(d_logits), x, T(1), dw);
}

// dz written over the logits.
template <class T, class X, class W, class Z, class DX, class DW>
void cross_entropy_backward(const ExecSpace& exec, const X& x, const W& w, const ConstTokenMatrix& targets, T softcap,
                            const Z& logits, const ConstVector<T>& lse, T grad_scale, const DX& dx, const DW& dw) {
  cross_entropy_backward(exec, x, w, targets, softcap, logits, lse, grad_scale, logits, dx, dw);
}

// The capped logits z' (N, V) in T of the last forward: what sampling and tests read.
template <class T, class Z>
Matrix<T> capped_logits(const ExecSpace& exec, const Z& logits, T softcap) {
  using InPlace = StoresCapped<T, Z>;
  Matrix<T> out("kgpt::cross_entropy::capped_logits", logits.extent(0), logits.extent(1));
  for_each_element(exec, "kgpt::cross_entropy::cap", logits.extent(0), logits.extent(1),
                   KOKKOS_LAMBDA(const std::size_t row, const std::size_t j) {
                     out(row, j) = capped_logit<InPlace::value>(logits(row, j), softcap);
                   });
  return out;
}

}  // namespace kgpt::model::ops

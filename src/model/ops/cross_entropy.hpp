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
// On a GPU (Packs) each thread takes 16 bytes of a row of logits at a time, and the forward reads
// each row once: every thread keeps a running maximum and the sum of exp(z' - maximum) over its
// logits, rescaling the sum when the maximum grows, and the team combines them. On the host the
// forward takes two plain passes (maximum, then sum), which the compiler vectorises. Tests run both.

#include <type_traits>

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "core/kernel.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/gemm/gemm.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

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

namespace detail {

// exp(z - m) summed over logits z taken one at a time, m the largest so far (s = 0: none yet).
template <class T>
struct RunningSoftmax {
  T m = T(0), s = T(0);
  KOKKOS_INLINE_FUNCTION void add(T z) {
    if (s == T(0)) {
      m = z;
      s = T(1);
    } else if (z > m) {
      s = s * compat::exp(m - z) + T(1);
      m = z;
    } else {
      s += compat::exp(z - m);
    }
  }
};

// lse and losses of every row in two passes over its logits, a team per row: the maximum (fp32
// logits get z' in this pass), then the sum.
template <class T, class Z>
void softmax_rows_two_pass(const ExecSpace& exec, const Z& logits, const ConstTokenMatrix& targets, T softcap,
                           const Vector<T>& lse, const Vector<T>& losses) {
  using InPlace = StoresCapped<T, Z>;
  const int n = static_cast<int>(logits.extent(0)), v = static_cast<int>(logits.extent(1));
  const int seq = static_cast<int>(targets.extent(1));
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
}

// lse and losses of every row in one pass over its logits (fp32 logits get z' as it goes): each
// thread folds 16-byte packs of the row, and the row's tail, into a RunningSoftmax; the team takes
// the largest maximum, then the sum of each thread's sum rescaled to it. Needs packs_aligned logits.
template <class T, class Z>
void softmax_rows_one_pass(const ExecSpace& exec, const Z& logits, const ConstTokenMatrix& targets, T softcap,
                           const Vector<T>& lse, const Vector<T>& losses) {
  using L = typename Z::non_const_value_type;
  using InPlace = StoresCapped<T, Z>;
  constexpr int W = 16 / static_cast<int>(sizeof(L));
  const int n = static_cast<int>(logits.extent(0));
  const std::size_t v = logits.extent(1), packs = v / W;
  const int seq = static_cast<int>(targets.extent(1));
  const RowView<L> z_rows(logits);
  kgpt::parallel_for(
      "kgpt::cross_entropy::forward_one_pass", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int row = team.league_rank();
        RunningSoftmax<T> mine;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, packs), [&](const std::size_t p) {
          L* at = &z_rows(static_cast<std::size_t>(row), p * W);
          T z[W];
          load_pack<W>(at, z);
          for (int k = 0; k < W; ++k) {
            z[k] = capped(z[k], softcap);
            mine.add(z[k]);
          }
          if constexpr (InPlace::value) {
            if (softcap > T(0)) store_pack<W>(at, z);
          }
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, packs * W, v), [&](const std::size_t j) {
          const T z = capped(T(z_rows(static_cast<std::size_t>(row), j)), softcap);
          if constexpr (InPlace::value) {
            if (softcap > T(0)) z_rows(static_cast<std::size_t>(row), j) = z;
          }
          mine.add(z);
        });
        T row_max = mine.s > T(0) ? mine.m : Kokkos::reduction_identity<T>::max();
        team.team_reduce(Kokkos::Max<T>(row_max));  // also a barrier: the z' written above are seen below
        T sum = mine.s > T(0) ? mine.s * compat::exp(mine.m - row_max) : T(0);
        team.team_reduce(Kokkos::Sum<T>(sum));
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          const T log_sum = row_max + compat::log(sum);
          lse(row) = log_sum;
          losses(row) = log_sum - capped_logit<InPlace::value>(logits(row, targets(row / seq, row % seq)), softcap);
        });
      });
}

}  // namespace detail

// From logits z already made: lse, the losses, and the micro-batch's mean loss added to loss_sum.
template <class T, bool Packs = backend::Traits::packed_logits, class Z>
void cross_entropy_loss(const ExecSpace& exec, const ConstTokenMatrix& targets, T softcap, const Z& logits,
                        const Vector<T>& lse, const Vector<T>& losses, const Kokkos::View<double, MemSpace>& loss_sum,
                        const Kokkos::View<double, MemSpace>& scratch) {
  const int n = static_cast<int>(logits.extent(0));
  constexpr int pack = 16 / static_cast<int>(sizeof(typename Z::non_const_value_type));
  if (Packs && detail::packs_aligned<pack>(logits)) {
    detail::softmax_rows_one_pass(exec, logits, targets, softcap, lse, losses);
  } else {
    detail::softmax_rows_two_pass(exec, logits, targets, softcap, lse, losses);
  }
  Kokkos::parallel_reduce(
      "kgpt::cross_entropy::sum", Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
      KOKKOS_LAMBDA(const int row, double& acc) { acc += static_cast<double>(losses(row)); }, scratch);
  kgpt::parallel_for(
      "kgpt::cross_entropy::mean", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1),
      KOKKOS_LAMBDA(const int) { loss_sum() += scratch() / n; });
}

// Adds the micro-batch's mean loss to loss_sum (a device scalar) without waiting for it.
template <class T, bool Packs = backend::Traits::packed_logits, class X, class W, class Z>
void cross_entropy_forward(const ExecSpace& exec, const X& x, const W& w, const ConstTokenMatrix& targets, T softcap,
                           const Z& logits, const Vector<T>& lse, const Vector<T>& losses,
                           const Kokkos::View<double, MemSpace>& loss_sum, const Kokkos::View<double, MemSpace>& scratch) {
  gemm(exec, Op::none, Op::transpose, T(1), x, w, T(0), logits);
  cross_entropy_loss<T, Packs>(exec, targets, softcap, logits, lse, losses, loss_sum, scratch);
}

// The same, returning the micro-batch's mean loss (this waits for the device).
template <class T, bool Packs = backend::Traits::packed_logits, class X, class W, class Z>
double cross_entropy_forward(const ExecSpace& exec, const X& x, const W& w, const ConstTokenMatrix& targets, T softcap,
                             const Z& logits, const Vector<T>& lse, const Vector<T>& losses) {
  const Kokkos::View<double, MemSpace> sum("kgpt::cross_entropy::loss"), scratch("kgpt::cross_entropy::scratch");
  cross_entropy_forward<T, Packs>(exec, x, w, targets, softcap, logits, lse, losses, sum, scratch);
  double host = 0;
  Kokkos::deep_copy(exec, host, sum);
  exec.fence();
  return host;
}

// dz of one logit from its z' (the softmax's gradient, through the cap).
template <class T>
KOKKOS_INLINE_FUNCTION T logit_gradient(T z, T log_sum, bool target, T scale, T softcap) {
  T grad = scale * (compat::exp(z - log_sum) - (target ? T(1) : T(0)));
  if (softcap > T(0)) {
    const T ratio = z / softcap;
    grad *= T(1) - ratio * ratio;
  }
  return grad;
}

// dz of every logit into d_logits (which may be `logits` itself), from the forward's logits and lse.
template <class T, bool Packs = backend::Traits::packed_logits, class Z, class DZ>
void cross_entropy_logit_gradients(const ExecSpace& exec, const ConstTokenMatrix& targets, T softcap, const Z& logits,
                                   const ConstVector<T>& lse, T grad_scale, const DZ& d_logits) {
  using A = typename DZ::value_type;
  using L = typename Z::non_const_value_type;
  const int n = static_cast<int>(logits.extent(0));
  const int seq = static_cast<int>(targets.extent(1));
  const T scale = grad_scale / static_cast<T>(n);
  using InPlace = StoresCapped<T, Z>;
  constexpr int pack = 16 / static_cast<int>(sizeof(A) < sizeof(L) ? sizeof(A) : sizeof(L));
  if (Packs && detail::packs_aligned<pack>(logits) && detail::packs_aligned<pack>(d_logits)) {
    const std::size_t v = logits.extent(1), packs = v / pack;
    const RowView<const L> z_rows(logits);
    const RowView<A> d_rows(d_logits);
    kgpt::parallel_for(
        "kgpt::cross_entropy::backward_packed", Kokkos::TeamPolicy<ExecSpace>(exec, n, Kokkos::AUTO),
        KOKKOS_LAMBDA(const Team& team) {
          const std::size_t row = static_cast<std::size_t>(team.league_rank());
          const T log_sum = lse(row);
          const int target = targets(static_cast<int>(row) / seq, static_cast<int>(row) % seq);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, packs), [&](const std::size_t p) {
            const std::size_t first = p * pack;
            T z[pack];
            detail::load_pack<pack>(&z_rows(row, first), z);
            for (int k = 0; k < pack; ++k) {
              z[k] = logit_gradient(capped_logit<InPlace::value>(z[k], softcap), log_sum,
                                    static_cast<int>(first) + k == target, scale, softcap);
            }
            detail::store_pack<pack>(&d_rows(row, first), z);
          });
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, packs * pack, v), [&](const std::size_t j) {
            d_rows(row, j) = store<A>(logit_gradient(capped_logit<InPlace::value>(z_rows(row, j), softcap), log_sum,
                                                     static_cast<int>(j) == target, scale, softcap));
          });
        });
  } else {
    for_each_element(exec, "kgpt::cross_entropy::backward", logits.extent(0), logits.extent(1),
                     KOKKOS_LAMBDA(const std::size_t row, const std::size_t j) {
                       const T z = capped_logit<InPlace::value>(logits(row, j), softcap);
                       const bool target = static_cast<int>(j) == targets(row / seq, row % seq);
                       d_logits(row, j) = store<A>(logit_gradient(z, lse(row), target, scale, softcap));
                     });
  }
}

template <class T, bool Packs = backend::Traits::packed_logits, class X, class W, class Z, class DZ, class DX, class DW>
void cross_entropy_backward(const ExecSpace& exec, const X& x, const W& w, const ConstTokenMatrix& targets, T softcap,
                            const Z& logits, const ConstVector<T>& lse, T grad_scale, const DZ& d_logits,
                            const DX& dx, const DW& dw) {
  using A = typename DZ::value_type;
  cross_entropy_logit_gradients<T, Packs>(exec, targets, softcap, logits, lse, grad_scale, d_logits);
  using ConstZ = Kokkos::View<const A**, Layout, MemSpace>;
  gemm(exec, Op::none, Op::none, T(1), ConstZ(d_logits), w, T(0), dx);
  gemm(exec, Op::transpose, Op::none, T(1), ConstZ(d_logits), x, T(1), dw);
}

// dz written over the logits.
template <class T, bool Packs = backend::Traits::packed_logits, class X, class W, class Z, class DX, class DW>
void cross_entropy_backward(const ExecSpace& exec, const X& x, const W& w, const ConstTokenMatrix& targets, T softcap,
                            const Z& logits, const ConstVector<T>& lse, T grad_scale, const DX& dx, const DW& dw) {
  cross_entropy_backward<T, Packs>(exec, x, w, targets, softcap, logits, lse, grad_scale, logits, dx, dw);
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

}  // namespace

}  // namespace kgpt::model::ops

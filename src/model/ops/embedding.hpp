#pragma once
// Token and position embeddings.
//   token:    out(n, c) = table(token(n), c)            tokens (B, T), table (V, C), out (N = B*T, C)
//             dtable(v, c) += sum of dout(n, c) over the n with token(n) = v
//   position: x(b*T + t, c) += wpe(t, c)                 wpe (Tmax, C), x (N, C)
//             dwpe(t, c) += sum over b of dx(b*T + t, c)
// The table gradients are summed per channel in increasing n order, without atomics, so they are
// the same bit for bit on every run. On the host one pass per channel over all rows does that; on a
// GPU it would leave all but C threads idle through N dependent steps, so there the rows are first
// sorted by (token, row) and a team per token walks only its own rows, in the same order: the two
// give the same bits.

#include <cstdint>

#include <Kokkos_Sort.hpp>

#include "core/views.hpp"

namespace kgpt::model::ops {

template <class T>
void embedding_forward(const ExecSpace& exec, const ConstTokenMatrix& tokens, const ConstMatrix<T>& table,
                       const Matrix<T>& out) {
  const int seq = static_cast<int>(tokens.extent(1));
  const int n = static_cast<int>(out.extent(0)), c = static_cast<int>(out.extent(1));
  Kokkos::parallel_for(
      "kgpt::embedding::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, c}),
      KOKKOS_LAMBDA(const int row, const int j) { out(row, j) = table(tokens(row / seq, row % seq), j); });
}

// One thread per channel, every row in order: the host's way.
template <class T>
void embedding_backward_by_channel(const ExecSpace& exec, const ConstTokenMatrix& tokens, const ConstMatrix<T>& dout,
                                   const Matrix<T>& dtable) {
  const int seq = static_cast<int>(tokens.extent(1));
  const int n = static_cast<int>(dout.extent(0)), c = static_cast<int>(dout.extent(1));
  Kokkos::parallel_for(
      "kgpt::embedding::backward", Kokkos::RangePolicy<ExecSpace>(exec, 0, c), KOKKOS_LAMBDA(const int j) {
        for (int row = 0; row < n; ++row) dtable(tokens(row / seq, row % seq), j) += dout(row, j);
      });
}

// Rows grouped by token (keys token << 32 | row, sorted), then a team per token over the channels.
template <class T>
void embedding_backward_by_token(const ExecSpace& exec, const ConstTokenMatrix& tokens, const ConstMatrix<T>& dout,
                                 const Matrix<T>& dtable) {
  const int seq = static_cast<int>(tokens.extent(1));
  const int n = static_cast<int>(dout.extent(0)), c = static_cast<int>(dout.extent(1));
  const int vocab = static_cast<int>(dtable.extent(0));
  if (n == 0) return;
  Kokkos::View<std::uint64_t*, MemSpace> keys(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kgpt::embedding::keys"),
                                              static_cast<std::size_t>(n));
  Kokkos::parallel_for(
      "kgpt::embedding::keys", Kokkos::RangePolicy<ExecSpace>(exec, 0, n), KOKKOS_LAMBDA(const int row) {
        keys(row) = (static_cast<std::uint64_t>(tokens(row / seq, row % seq)) << 32) | static_cast<std::uint32_t>(row);
      });
  exec.fence();  // Kokkos::sort runs on the default instance
  Kokkos::sort(keys);  // keys are distinct, so any sort gives this one order
  // start(v) = first sorted position whose token is >= v; start(vocab) = n.
  Kokkos::View<int*, MemSpace> start(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kgpt::embedding::start"),
                                     static_cast<std::size_t>(vocab) + 1);
  Kokkos::parallel_for(
      "kgpt::embedding::starts", Kokkos::RangePolicy<ExecSpace>(exec, 0, n + 1), KOKKOS_LAMBDA(const int i) {
        const int first = i == 0 ? 0 : static_cast<int>(keys(i - 1) >> 32) + 1;
        const int last = i == n ? vocab : static_cast<int>(keys(i) >> 32);
        for (int v = first; v <= last; ++v) start(v) = i;
      });
  using Team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for(
      "kgpt::embedding::backward_by_token", Kokkos::TeamPolicy<ExecSpace>(exec, vocab, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int v = team.league_rank(), begin = start(v), end = start(v + 1);
        if (begin == end) return;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](const int j) {
          T sum = dtable(v, j);
          for (int i = begin; i < end; ++i) sum += dout(static_cast<int>(keys(i) & 0xffffffffu), j);
          dtable(v, j) = sum;
        });
      });
}

template <class T>
void embedding_backward(const ExecSpace& exec, const ConstTokenMatrix& tokens, const ConstMatrix<T>& dout,
                        const Matrix<T>& dtable) {
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    embedding_backward_by_channel<T>(exec, tokens, dout, dtable);
  } else {
    embedding_backward_by_token<T>(exec, tokens, dout, dtable);
  }
}

template <class T>
void position_embedding_forward(const ExecSpace& exec, int seq, const ConstMatrix<T>& wpe, const Matrix<T>& x) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  Kokkos::parallel_for(
      "kgpt::position_embedding::forward", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {n, c}),
      KOKKOS_LAMBDA(const int row, const int j) { x(row, j) += wpe(row % seq, j); });
}

template <class T>
void position_embedding_backward(const ExecSpace& exec, int seq, const ConstMatrix<T>& dx, const Matrix<T>& dwpe) {
  const int batch = static_cast<int>(dx.extent(0)) / seq, c = static_cast<int>(dx.extent(1));
  Kokkos::parallel_for(
      "kgpt::position_embedding::backward",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {seq, c}), KOKKOS_LAMBDA(const int t, const int j) {
        T sum = 0;
        for (int b = 0; b < batch; ++b) sum += dx(b * seq + t, j);
        dwpe(t, j) += sum;
      });
}

}  // namespace kgpt::model::ops

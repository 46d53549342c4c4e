#pragma once
// The token embedding's table gradient on GPUs: the rows sorted by (token, row), then a team per
// token adds its rows in increasing order, per channel: the same additions in the same order as the
// host's pass per channel (embedding_backward_host.hpp), so the same bits, without N dependent steps
// on C threads. Plain Kokkos code: it compiles and is tested on the host too.

#include <cstdint>

#include <Kokkos_Sort.hpp>

#include "core/backend.hpp"
#include "core/views.hpp"

namespace kgpt::model::ops {

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

template <class Backend>
struct EmbeddingBackward;

template <>
struct EmbeddingBackward<backend::Cuda> {
  template <class T>
  static void run(const ExecSpace& exec, const ConstTokenMatrix& tokens, const ConstMatrix<T>& dout,
                  const Matrix<T>& dtable) {
    embedding_backward_by_token<T>(exec, tokens, dout, dtable);
  }
};

}  // namespace kgpt::model::ops

#pragma once
// Token and position embeddings.
//   token:    out(n, c) = table(token(n), c)            tokens (B, T), table (V, C), out (N = B*T, C)
//             dtable(v, c) += sum of dout(n, c) over the n with token(n) = v
//   position: x(b*T + t, c) += wpe(t, c)                 wpe (Tmax, C), x (N, C)
//             dwpe(t, c) += sum over b of dx(b*T + t, c)
// The table gradients are summed per channel in increasing n order, without atomics, so they are
// the same bit for bit on every run. On the host one pass per channel over all rows does that
// (embedding_backward_host.hpp); on a GPU it would leave all but C threads idle through N dependent
// steps, so there the rows are first sorted by (token, row) and a team per token walks only its own
// rows, in the same order (embedding_backward_cuda.hpp): the two give the same bits.

#include "core/backend.hpp"
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

// The table gradient's implementations differ by backend (embedding_backward_host.hpp,
// embedding_backward_cuda.hpp); backend::Current picks one.
template <class Backend>
struct EmbeddingBackward;

}  // namespace kgpt::model::ops

#include "model/ops/embedding_backward_cuda.hpp"
#include "model/ops/embedding_backward_host.hpp"

namespace kgpt::model::ops {

template <class T>
void embedding_backward(const ExecSpace& exec, const ConstTokenMatrix& tokens, const ConstMatrix<T>& dout,
                        const Matrix<T>& dtable) {
  EmbeddingBackward<backend::Current>::template run<T>(exec, tokens, dout, dtable);
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

#pragma once
// SmearGate (model.smear_gate; parameter-golf's records): each position takes a learned share of
// the previous position's value, per channel, with g = sigmoid(gate):
//   forward   y_t = (1 - g) x_t + g x_{t-1},   x_{-1} = 0 at each sequence's start
//   backward  dx_t = (1 - g) dy_t + g dy_{t+1}  (dy_T = 0 past each sequence's end),
//             dgate += g (1 - g) sum_t dy_t (x_{t-1} - x_t)
// Shapes: x, y, dx, dy (N, C) token-major, N = sequences x seq; gate (C). The rows of a sequence
// are consecutive, so row i starts a sequence where i % seq is 0. dx must not be dy (row i reads
// dy's row i + 1).

#include <type_traits>

#include "core/bf16.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::model::ops {

namespace {  // kernels: internal linkage, see core/kernel.hpp

template <class T>
KOKKOS_INLINE_FUNCTION T smear_share(T gate) {
  return T(1) / (T(1) + compat::exp(-gate));
}

template <class T, class X, class Gate, class Y>
void smear_forward(const ExecSpace& exec, const X& x, const Gate& gate, const Y& y, int seq) {
  using A = typename Y::value_type;
  const ConstRows<X> in(x);
  const Rows<Y> out(y);
  const auto* g = gate.data();
  const std::size_t t = static_cast<std::size_t>(seq);
  for_each_element(exec, "kgpt::smear::forward", x.extent(0), x.extent(1),
                   KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
                     const T s = smear_share(T(g[j]));
                     const T prev = i % t == 0 ? T(0) : T(in(i - 1, j));
                     out(i, j) = store<A>((T(1) - s) * T(in(i, j)) + s * prev);
                   });
}

// The backward's terms, for W consecutive columns of row i: dx written, the gate's sum of
// dy_t (x_{t-1} - x_t) into acc (its g (1 - g) applied once per column at the end).
template <class T, class X, class DY, class DX, class Gate>
struct SmearTerms {
  ConstRows<X> x;
  ConstRows<DY> dy;
  Rows<DX> dx;
  const Gate* gate;
  std::size_t seq, rows;
  template <int W>
  KOKKOS_INLINE_FUNCTION void terms(std::size_t i, std::size_t j, T (*acc)[W]) const {
    T here[W], prev[W], d[W], next[W], out[W];
    detail::load_values<W>(&x(i, j), here);
    detail::load_values<W>(&dy(i, j), d);
    const bool first = i % seq == 0, last = (i + 1) % seq == 0 || i + 1 == rows;
    if (first) {
      for (int w = 0; w < W; ++w) prev[w] = T(0);
    } else {
      detail::load_values<W>(&x(i - 1, j), prev);
    }
    if (last) {
      for (int w = 0; w < W; ++w) next[w] = T(0);
    } else {
      detail::load_values<W>(&dy(i + 1, j), next);
    }
    for (int w = 0; w < W; ++w) {
      const T s = smear_share(T(gate[j + w]));
      out[w] = (T(1) - s) * d[w] + s * next[w];
      acc[0][w] += d[w] * (prev[w] - here[w]);
    }
    detail::store_values<W>(&dx(i, j), out);
  }
  template <int W>
  bool packs_fit() const {
    return detail::packs_aligned<W>(x) && detail::packs_aligned<W>(dy) && detail::packs_aligned<W>(dx);
  }
};

template <class T, bool Packs = backend::Traits::packed_elementwise, class X, class Gate, class DY, class DX, class DGate>
void smear_backward(const ExecSpace& exec, const X& x, const Gate& gate, const DY& dy, const DX& dx, const DGate& dgate,
                    int seq, const Workspace<T>& partials = {}) {
  using Terms = SmearTerms<T, X, DY, DX, std::remove_const_t<typename Gate::value_type>>;
  const Terms terms{ConstRows<X>(x), ConstRows<DY>(dy), Rows<DX>(dx), gate.data(), static_cast<std::size_t>(seq),
                    x.extent(0)};
  const auto* g = gate.data();
  ColumnSums<T, 1>::template run_packed<pack_width<X, DY, DX>(), Packs>(
      exec, "kgpt::smear::backward", x.extent(0), x.extent(1), partials, terms,
      KOKKOS_LAMBDA(const int, const std::size_t j, const T sum) {
        const T s = smear_share(T(g[j]));
        dgate(j) += s * (T(1) - s) * sum;
      });
}

}  // namespace

}  // namespace kgpt::model::ops

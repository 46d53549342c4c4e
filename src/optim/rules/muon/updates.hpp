#pragma once
// Muon's kernels (parameter-golf's Muon):
//   buf = mu buf + g;  u = g + mu buf (Nesterov);
//   p *= 1 - lr wd;  p -= lr max(1, rows/cols)^0.5 NewtonSchulz(u)
//   momentum warmup: mu(step) = (1 - f) start + f end, f = min(step / warmup_steps, 1)
// One matrix at a time: muon_update; the rule's way: muon_momentum for each matrix, Newton-Schulz
// for each batch of one shape, then muon_apply_batch, or muon_store_batch and, after the ranks
// sharing the work exchange their results, muon_apply_all for all of them. Gradients are read and
// the norm summed as optim/passes.hpp says.

#include <cmath>

#include "core/backend.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "core/kernel.hpp"
#include "optim/passes.hpp"
#include "optim/rules/muon/newton_schulz.hpp"

namespace kgpt::optim {

// Every matrix Muon updates, for muon_apply_all: its elements at `param` in the parameter buffer
// and at `update` in the buffer of orthogonalised updates, its shape's scale (muon_shape_scale), in
// chunks of kUpdateChunk elements from its `first_chunk`.
struct MuonSegment {
  std::size_t param = 0, update = 0, size = 0, first_chunk = 0;
  double scale = 1.0;
};

namespace {  // kernels: internal linkage, see core/kernel.hpp

inline double muon_momentum_at(int step, double start, double end, int warmup_steps) {
  if (warmup_steps <= 0) return end;
  const double f = std::min(static_cast<double>(step) / warmup_steps, 1.0);
  return (1.0 - f) * start + f * end;
}

// Muon's momentum over n elements: buf = mu buf + g (g read times the clipping factor) and u = g +
// mu buf (Nesterov) written to `update`; with norm_part, the squared raw gradients summed into it by
// the same pass. A rank that shares Muon runs it for the matrices others orthogonalise too (into
// scratch): the same kernel, so its momentum and its norm are the owner's to the bit.
template <class T>
void muon_momentum(const ExecSpace& exec, std::size_t n, const T* g, T* momentum, T* update, double mu,
                   const double* grad_factor = nullptr, double* norm_part = nullptr) {
  const T beta = T(mu);
  const ConstVector<T> g_flat(g, n);
  const GradFactor<T> factor(grad_factor);
  update_pass<T>(exec, "kgpt::muon::momentum", n, g_flat, norm_part, KOKKOS_LAMBDA(const std::size_t e) {
    const T grad = g_flat(e) * factor.get();
    momentum[e] = beta * momentum[e] + grad;
    update[e] = grad + beta * momentum[e];
  });
}

// The step of a matrix of this shape per unit of learning rate: Muon's max(1, rows/cols)^0.5.
inline double muon_shape_scale(std::size_t rows, std::size_t cols) {
  return std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols)));
}

// One element of Muon's update: p (1 - lr wd) - step u, with step = lr times the shape's scale,
// rounded to T once.
template <class T>
KOKKOS_INLINE_FUNCTION void muon_apply_element(T& p, T u, T step, T decay, bool decays) {
  p = decays ? p * decay - step * u : p - step * u;
}

// `update` is a workspace of the parameter's shape (T); Newton-Schulz runs in X (T or bf16).
template <class T, class X = T>
void muon_update(const ExecSpace& exec, const Matrix<T>& p, const ConstMatrix<T>& g, const Matrix<T>& momentum,
                 const Matrix<T>& update, double lr, double mu, double weight_decay, int backend_steps,
                 NewtonSchulzWorkspace<X>& work, const double* grad_factor = nullptr, double* norm_part = nullptr) {
  const std::size_t rows = p.extent(0), cols = p.extent(1);
  // The matrices are slices of the contiguous buffers: flat over their elements.
  muon_momentum<T>(exec, rows * cols, g.data(), momentum.data(), update.data(), mu, grad_factor, norm_part);
  const Orthogonalised<X> o = newton_schulz_core<X, T>(exec, ConstMatrix<T>(update), backend_steps, work);
  const Matrix<X> x = o.item(0);
  const bool transposed = o.transposed;
  const T step = T(lr * muon_shape_scale(rows, cols));
  const T decay = T(1.0 - lr * weight_decay);
  const bool decays = weight_decay > 0;
  kgpt::parallel_for(
      "kgpt::muon::apply", Kokkos::RangePolicy<ExecSpace>(exec, 0, rows * cols), KOKKOS_LAMBDA(const std::size_t e) {
        const std::size_t i = e / cols, j = e % cols;
        muon_apply_element(p(i, j), T(transposed ? x(j, i) : x(i, j)), step, decay, decays);
      });
}

// The batch's orthogonalised matrices written in their own orientation (rows, cols), matrix k at
// out + at[k] (device memory): into the buffer the ranks exchange when they share Muon.
template <class X>
void muon_store_batch(const ExecSpace& exec, const Orthogonalised<X>& o, const std::size_t* at, X* out) {
  const std::size_t size = o.rows() * o.cols();
  kgpt::parallel_for(
      "kgpt::muon::store", Kokkos::RangePolicy<ExecSpace>(exec, 0, o.count * size), KOKKOS_LAMBDA(const std::size_t flat) {
        const std::size_t k = flat / size, e = flat % size;
        out[at[k] + e] = o.at(k, e);
      });
}

// The batch's orthogonalised matrices applied straight from the workspace: matrix k to the
// parameters at p + param[k] (device memory), all of one shape (rows, cols).
template <class T, class X>
void muon_apply_batch(const ExecSpace& exec, const Orthogonalised<X>& o, const std::size_t* param, T* p, double lr,
                      double weight_decay) {
  const std::size_t size = o.rows() * o.cols();
  const bool decays = weight_decay > 0;
  const T step = T(lr * muon_shape_scale(o.rows(), o.cols())), decay = T(1.0 - lr * weight_decay);
  kgpt::parallel_for(
      "kgpt::muon::apply", Kokkos::RangePolicy<ExecSpace>(exec, 0, o.count * size), KOKKOS_LAMBDA(const std::size_t flat) {
        const std::size_t k = flat / size, e = flat % size;
        muon_apply_element(p[param[k] + e], T(o.at(k, e)), step, decay, decays);
      });
}

// p = p (1 - lr wd) - lr scale u for every segment, in one launch: a team per chunk.
template <class T, class X>
void muon_apply_all(const ExecSpace& exec, T* p, const X* u, const Kokkos::View<const MuonSegment*, MemSpace>& segments,
                    std::size_t chunks, double lr, double weight_decay) {
  if (segments.extent(0) == 0 || chunks == 0) return;
  const T decay = T(1.0 - lr * weight_decay);
  const bool decays = weight_decay > 0;
  using Team = Kokkos::TeamPolicy<ExecSpace>::member_type;
  kgpt::parallel_for(
      "kgpt::muon::apply_all", Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(chunks), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        std::size_t begin = 0, end = 0;
        const MuonSegment seg = chunk_of(segments, static_cast<std::size_t>(team.league_rank()), begin, end);
        // As muon_update computes it: the step rounded to T once, from lr and the scale in double.
        const T step = T(lr * seg.scale);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, begin, end), [&](const std::size_t e) {
          muon_apply_element(p[seg.param + e], T(u[seg.update + e]), step, decay, decays);
        });
      });
}

}  // namespace

}  // namespace kgpt::optim

#pragma once
// Parameter updates, one tensor at a time on contiguous slices of the parameter and gradient
// buffers.
//   Adam / AdamW (torch.optim semantics, step t counted from 1):
//     p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//     p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//   Muon (parameter-golf): buf = mu buf + g;  u = g + mu buf (Nesterov);
//     p *= 1 - lr wd;  p -= lr max(1, rows/cols)^0.5 NewtonSchulz(u)
//   momentum warmup: mu(step) = (1 - f) start + f end, f = min(step / warmup_steps, 1)

#include <cmath>

#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "optim/newton_schulz.hpp"

namespace kgpt::optim {

struct AdamSettings {
  double lr = 0.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
};

template <class T>
void adam_update(const ExecSpace& exec, const Vector<T>& p, const ConstVector<T>& g, const Vector<T>& m,
                 const Vector<T>& v, const AdamSettings& s, int t) {
  // torch.optim.Adam's arrangement: p -= (lr / c1) m / (sqrt(v) / sqrt(c2) + eps), one sqrt and one
  // division per element.
  const T b1 = T(s.beta1), b2 = T(s.beta2), eps = T(s.eps);
  const T decay = T(1.0 - s.lr * s.weight_decay);
  const T step_size = T(s.lr / (1.0 - std::pow(s.beta1, t)));
  const T inverse_sqrt_c2 = T(1.0 / std::sqrt(1.0 - std::pow(s.beta2, t)));
  Kokkos::parallel_for(
      "kgpt::adam::update", Kokkos::RangePolicy<ExecSpace>(exec, 0, p.extent(0)), KOKKOS_LAMBDA(const std::size_t i) {
        const T grad = g(i);
        const T m_new = b1 * m(i) + (T(1) - b1) * grad;
        const T v_new = b2 * v(i) + (T(1) - b2) * grad * grad;
        m(i) = m_new;
        v(i) = v_new;
        p(i) = p(i) * decay - step_size * m_new / (compat::sqrt(v_new) * inverse_sqrt_c2 + eps);
      });
}

inline double muon_momentum_at(int step, double start, double end, int warmup_steps) {
  if (warmup_steps <= 0) return end;
  const double f = std::min(static_cast<double>(step) / warmup_steps, 1.0);
  return (1.0 - f) * start + f * end;
}

// `update` is a workspace of the parameter's shape.
template <class T>
void muon_update(const ExecSpace& exec, const Matrix<T>& p, const ConstMatrix<T>& g, const Matrix<T>& momentum,
                 const Matrix<T>& update, double lr, double mu, double weight_decay, int backend_steps,
                 NewtonSchulzWorkspace<T>& work, model::GemmPrecision precision = model::GemmPrecision::fp32) {
  const std::size_t rows = p.extent(0), cols = p.extent(1);
  const T beta = T(mu);
  Kokkos::parallel_for(
      "kgpt::muon::momentum", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {rows, cols}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
        momentum(i, j) = beta * momentum(i, j) + g(i, j);
        update(i, j) = g(i, j) + beta * momentum(i, j);
      });
  newton_schulz<T>(exec, ConstMatrix<T>(update), update, backend_steps, work, precision);
  const T step = T(lr * std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols))));
  if (weight_decay > 0) {
    const T decay = T(1.0 - lr * weight_decay);
    Kokkos::parallel_for(
        "kgpt::muon::apply", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {rows, cols}),
        KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) { p(i, j) = p(i, j) * decay - step * update(i, j); });
    return;
  }
  Kokkos::parallel_for(
      "kgpt::muon::apply", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {rows, cols}),
      KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) { p(i, j) -= step * update(i, j); });
}

}  // namespace kgpt::optim

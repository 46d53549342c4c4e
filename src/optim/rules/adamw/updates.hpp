#pragma once
// Adam / AdamW's kernels (torch.optim semantics, step t counted from 1):
//   p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// One tensor at a time on contiguous slices of the parameter and gradient buffers (adam_update), or
// every tensor of the rule in one launch (adam_update_all); gradients read and the norm summed as
// optim/passes.hpp says.

#include <cmath>

#include "core/backend.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "core/kernel.hpp"
#include "model/ops/launch.hpp"
#include "optim/passes.hpp"

namespace kgpt::optim {

struct AdamSettings {
  double lr = 0.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
};

// Every tensor Adam updates, in one launch: a tensor's elements at `param` in the parameter and
// gradient buffers and at `state` in the moments, in chunks of kUpdateChunk elements from its
// `first_chunk`; `group` picks its learning rate (and decay) among the four ParamGroups.
struct AdamSegment {
  std::size_t param = 0, state = 0, size = 0, first_chunk = 0;
  int group = 0;
};

namespace {  // kernels: internal linkage, see core/kernel.hpp

// One element's AdamW update, torch.optim.Adam's arrangement: p -= (lr / c1) m / (sqrt(v) / sqrt(c2)
// + eps), one sqrt and one division per element; `decay` is 1 - lr * weight_decay.
template <class T>
KOKKOS_INLINE_FUNCTION void adam_element(T& p, T& m, T& v, T grad, T b1, T b2, T eps, T decay, T step_size,
                                         T inverse_sqrt_c2) {
  const T m_new = b1 * m + (T(1) - b1) * grad;
  const T v_new = b2 * v + (T(1) - b2) * grad * grad;
  m = m_new;
  v = v_new;
  p = p * decay - step_size * m_new / (compat::sqrt(v_new) * inverse_sqrt_c2 + eps);
}

template <class T>
void adam_update(const ExecSpace& exec, const Vector<T>& p, const ConstVector<T>& g, const Vector<T>& m,
                 const Vector<T>& v, const AdamSettings& s, int t, const double* grad_factor = nullptr,
                 double* norm_part = nullptr) {
  const T b1 = T(s.beta1), b2 = T(s.beta2), eps = T(s.eps);
  const T decay = T(1.0 - s.lr * s.weight_decay);
  const T step_size = T(s.lr / (1.0 - std::pow(s.beta1, t)));
  const T inverse_sqrt_c2 = T(1.0 / std::sqrt(1.0 - std::pow(s.beta2, t)));
  const GradFactor<T> factor(grad_factor);
  update_pass<T>(exec, "kgpt::adam::update", p.extent(0), g, norm_part, KOKKOS_LAMBDA(const std::size_t i) {
    adam_element(p(i), m(i), v(i), T(g(i) * factor.get()), b1, b2, eps, decay, step_size, inverse_sqrt_c2);
  });
}

// The step's scalars of every group (by ParamGroup's value), as adam_update computes them.
template <class T>
struct AdamStep {
  T b1 = 0, b2 = 0, eps = 0, inverse_sqrt_c2 = 0;
  T decay[4] = {}, step_size[4] = {};
  AdamStep(const AdamSettings (&groups)[4], int t) {
    b1 = T(groups[0].beta1);
    b2 = T(groups[0].beta2);
    eps = T(groups[0].eps);
    inverse_sqrt_c2 = T(1.0 / std::sqrt(1.0 - std::pow(groups[0].beta2, t)));
    for (int k = 0; k < 4; ++k) {
      decay[k] = T(1.0 - groups[k].lr * groups[k].weight_decay);
      step_size[k] = T(groups[k].lr / (1.0 - std::pow(groups[k].beta1, t)));
    }
  }
};

// A team per chunk of a segment, its threads on consecutive elements: the updates of adam_update.
template <class T>
struct AdamChunks {
  using Team = Kokkos::TeamPolicy<ExecSpace>::member_type;
  T* p;
  const T* g;
  T* m;
  T* v;
  Kokkos::View<const AdamSegment*, MemSpace> segments;
  AdamStep<T> s;
  GradFactor<T> factor;

  KOKKOS_INLINE_FUNCTION AdamSegment find(std::size_t chunk, std::size_t& begin, std::size_t& end) const {
    return chunk_of(segments, chunk, begin, end);
  }
  KOKKOS_INLINE_FUNCTION void update(const AdamSegment& seg, std::size_t i) const {
    adam_element(p[seg.param + i], m[seg.state + i], v[seg.state + i], T(g[seg.param + i] * factor.get()), s.b1, s.b2,
                 s.eps, s.decay[seg.group], s.step_size[seg.group], s.inverse_sqrt_c2);
  }
  // Elements i .. i + W of the segment (those before `end`): with W > 1 and all W there, 16-byte
  // loads and stores of each array; the same arithmetic as update().
  template <int W>
  KOKKOS_INLINE_FUNCTION void update_pack(const AdamSegment& seg, std::size_t i, std::size_t end) const {
    if (W == 1 || i + W > end) {
      for (std::size_t e = i; e < i + W && e < end; ++e) update(seg, e);
      return;
    }
    T pv[W], gv[W], mv[W], vv[W];
    model::ops::detail::load_values<W>(p + seg.param + i, pv);
    model::ops::detail::load_values<W>(g + seg.param + i, gv);
    model::ops::detail::load_values<W>(m + seg.state + i, mv);
    model::ops::detail::load_values<W>(v + seg.state + i, vv);
    const T f = factor.get();
    for (int k = 0; k < W; ++k) {
      adam_element(pv[k], mv[k], vv[k], T(gv[k] * f), s.b1, s.b2, s.eps, s.decay[seg.group], s.step_size[seg.group],
                   s.inverse_sqrt_c2);
    }
    model::ops::detail::store_values<W>(p + seg.param + i, pv);
    model::ops::detail::store_values<W>(m + seg.state + i, mv);
    model::ops::detail::store_values<W>(v + seg.state + i, vv);
  }
};

// A thread per element, or (W > 1, a GPU's way) per W consecutive elements read and written 16
// bytes at a time: every segment starts on the buffers' alignment (16 elements) and so does every
// chunk, so packs are aligned; a segment's last few elements go one at a time.
template <class T, int W>
struct AdamChunksUpdate : AdamChunks<T> {
  KOKKOS_INLINE_FUNCTION void operator()(const typename AdamChunks<T>::Team& team) const {
    std::size_t begin = 0, end = 0;
    const AdamSegment seg = this->find(static_cast<std::size_t>(team.league_rank()), begin, end);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, std::size_t(0), (end - begin + W - 1) / W),
                         [&](const std::size_t k) { this->template update_pack<W>(seg, begin + k * W, end); });
  }
};

// The same, and the sum of the squared raw gradients of each chunk.
template <class T, int W>
struct AdamChunksUpdateNorm : AdamChunks<T> {
  KOKKOS_INLINE_FUNCTION void operator()(const typename AdamChunks<T>::Team& team, double& sum) const {
    std::size_t begin = 0, end = 0;
    const AdamSegment seg = this->find(static_cast<std::size_t>(team.league_rank()), begin, end);
    double part = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, std::size_t(0), (end - begin + W - 1) / W),
        [&](const std::size_t k, double& acc) {
          const std::size_t i = begin + k * W;
          this->template update_pack<W>(seg, i, end);
          for (std::size_t e = i; e < i + W && e < end; ++e) {
            const double raw = static_cast<double>(this->g[seg.param + e]);
            acc += raw * raw;
          }
        },
        part);
    Kokkos::single(Kokkos::PerTeam(team), [&]() { sum += part; });
  }
};

// adam_update of every segment in one launch (gpt2-124M's 148 tensors took 4.5 ms on an H100 one
// launch each, for 3.5 GB moved: 1.2 ms at the copy rate), with norm the squared norm of all their
// raw gradients: per chunk, then over the chunks.
// `packs`: 16 bytes of each array per thread (a GPU's way); else an element per thread.
template <class T>
void adam_update_all(const ExecSpace& exec, T* p, const T* g, T* m, T* v,
                     const Kokkos::View<const AdamSegment*, MemSpace>& segments, std::size_t chunks,
                     const AdamStep<T>& s, const double* grad_factor = nullptr, double* norm = nullptr,
                     bool packs = backend::Traits::packed_elementwise) {
  if (segments.extent(0) == 0 || chunks == 0) return;
  constexpr int W = 16 / sizeof(T);
  const AdamChunks<T> all{p, g, m, v, segments, s, GradFactor<T>(grad_factor)};
  const Kokkos::TeamPolicy<ExecSpace> policy(exec, static_cast<int>(chunks), Kokkos::AUTO);
  if (norm == nullptr) {
    if (packs) kgpt::parallel_for("kgpt::adam::update_all", policy, AdamChunksUpdate<T, W>{all});
    else kgpt::parallel_for("kgpt::adam::update_all", policy, AdamChunksUpdate<T, 1>{all});
  } else if (packs) {
    Kokkos::parallel_reduce("kgpt::adam::update_all", policy, AdamChunksUpdateNorm<T, W>{all},
                            Kokkos::View<double, MemSpace>(norm));
  } else {
    Kokkos::parallel_reduce("kgpt::adam::update_all", policy, AdamChunksUpdateNorm<T, 1>{all},
                            Kokkos::View<double, MemSpace>(norm));
  }
}

}  // namespace

}  // namespace kgpt::optim

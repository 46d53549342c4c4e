#pragma once
// Parameter updates, one tensor at a time on contiguous slices of the parameter and gradient
// buffers (Adam's tensors also all in one launch: adam_update_all). Every gradient is read times `grad_factor` (a device scalar: the clipping factor of the
// step; none means 1), so clipping costs no pass of its own; with `norm_part` (a device scalar),
// the same pass also writes the sum of the squared raw gradients there, so that without clipping
// the gradient norm costs no pass either.
//   Adam / AdamW (torch.optim semantics, step t counted from 1):
//     p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//     p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//   Muon (parameter-golf): buf = mu buf + g;  u = g + mu buf (Nesterov);
//     p *= 1 - lr wd;  p -= lr max(1, rows/cols)^0.5 NewtonSchulz(u)
//     (one matrix at a time: muon_update; the optimizer's way: muon_momentum for each matrix,
//     Newton-Schulz for each batch of one shape, muon_store_batch, muon_apply_all for all of them)
//   momentum warmup: mu(step) = (1 - f) start + f end, f = min(step / warmup_steps, 1)

#include <cmath>

#include "core/backend.hpp"
#include "core/kokkos_compat.hpp"
#include "core/views.hpp"
#include "optim/newton_schulz.hpp"
#include "core/kernel.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::optim {

struct AdamSettings {
  double lr = 0.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
};

// The factor gradients are read with. On a GPU it stays a device scalar, read by every thread; on
// the host it is read once here (host memory, already computed: the host runs kernels in order), so
// that the update loops stay vectorisable.
template <class T>
struct GradFactor {
  const double* device = nullptr;
  T value = T(1);
  explicit GradFactor(const double* factor) {
    if constexpr (backend::Traits::device_scalars) {
      device = factor;
    } else if (factor != nullptr) {
      value = static_cast<T>(*factor);
    }
  }
  KOKKOS_INLINE_FUNCTION T get() const {
    if constexpr (backend::Traits::device_scalars) return device != nullptr ? static_cast<T>(*device) : T(1);
    else return value;
  }
};

// Every tensor Adam updates, in one launch: a tensor's elements at `param` in the parameter and
// gradient buffers and at `state` in the moments, in chunks of kAdamChunk elements from its
// `first_chunk`; `group` picks its learning rate (and decay) among the four ParamGroups.
struct AdamSegment {
  std::size_t param = 0, state = 0, size = 0, first_chunk = 0;
  int group = 0;
};
constexpr std::size_t kAdamChunk = 4096;

namespace {  // kernels: internal linkage, see core/kernel.hpp

// Runs body(i) for i < n, and with norm_part also sums g(i)^2 into it, in a fixed order. On a GPU,
// one thread per element does both. On the host, each chunk of the buffer is one loop that updates
// and sums the squares in float, vectorised (the simd reduction: sums in the lanes' order, fixed for
// a build), and the chunks' sums join in double: the norm costs no pass over memory and almost no
// time.
template <class T, class Body>
void update_pass(const ExecSpace& exec, const char* label, std::size_t n, const ConstVector<T>& g, double* norm_part,
                 const Body& body) {
  if (norm_part == nullptr) {
    kgpt::parallel_for(label, Kokkos::RangePolicy<ExecSpace>(exec, 0, n), body);
    return;
  }
  if constexpr (backend::Traits::device_scalars) {
    Kokkos::parallel_reduce(
        label, Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
        KOKKOS_LAMBDA(const std::size_t i, double& acc) {
          body(i);
          const double grad = static_cast<double>(g(i));
          acc += grad * grad;
        },
        Kokkos::View<double, MemSpace>(norm_part));
  } else {
    constexpr std::size_t chunk = 2048;
    const std::size_t chunks = (n + chunk - 1) / chunk;
    Kokkos::parallel_reduce(
        label, Kokkos::RangePolicy<ExecSpace>(exec, 0, chunks),
        [=](const std::size_t c, double& acc) {
          const std::size_t begin = c * chunk, end = begin + chunk < n ? begin + chunk : n;
          T sum = 0;
#if !KGPT_BACKEND_CUDA  // host builds compile with -fopenmp-simd; this branch runs on the host only
#pragma omp simd reduction(+ : sum)
#endif
          for (std::size_t i = begin; i < end; ++i) {
            body(i);
            sum += g(i) * g(i);
          }
          acc += static_cast<double>(sum);
        },
        Kokkos::View<double, MemSpace>(norm_part));
  }
}

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

// The segment a chunk of kAdamChunk elements belongs to (the last one starting at or before it, by
// binary search over a table of segments with `first_chunk` and `size`), and the chunk's elements in it.
template <class Segment>
KOKKOS_INLINE_FUNCTION Segment chunk_of(const Kokkos::View<const Segment*, MemSpace>& segments, std::size_t chunk,
                                        std::size_t& begin, std::size_t& end) {
  int lo = 0, hi = static_cast<int>(segments.extent(0)) - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (segments(mid).first_chunk <= chunk) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const Segment seg = segments(lo);
  begin = (chunk - seg.first_chunk) * kAdamChunk;
  end = begin + kAdamChunk < seg.size ? begin + kAdamChunk : seg.size;
  return seg;
}

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

// Every matrix Muon updates, for muon_apply_all: its elements at `param` in the parameter buffer
// and at `update` in the buffer of orthogonalised updates, its shape's scale (muon_shape_scale), in
// chunks of kAdamChunk elements from its `first_chunk`.
struct MuonSegment {
  std::size_t param = 0, update = 0, size = 0, first_chunk = 0;
  double scale = 1.0;
};

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

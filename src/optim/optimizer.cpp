#include "optim/optimizer.hpp"

#include <cmath>

#include "optim/updates.hpp"

namespace kgpt::optim {

namespace {

std::size_t largest_matrix(const model::ParameterLayout& layout, bool side) {
  std::size_t best = 1;
  for (const auto& e : layout.entries()) {
    if (e.spec.shape.size() != 2) continue;
    const std::size_t value = side ? std::min(e.spec.shape[0], e.spec.shape[1]) : e.size;
    best = std::max(best, value);
  }
  return best;
}

}  // namespace

template <class T>
Optimizer<T>::Optimizer(const model::Parameters<T>& params, const config::Config& config)
    : params_(params),
      optim_(config.optim),
      muon_(config.optim.matrix_optimizer == config::MatrixOptimizer::muon),
      precision_(model::gemm_precision(config.model.precision)),
      m_("kgpt::optim::adam_m", params.layout().buffer_size()),
      v_("kgpt::optim::adam_v", params.layout().buffer_size()),
      momentum_("kgpt::optim::muon_momentum", muon_ ? params.layout().buffer_size() : 0),
      update_("kgpt::optim::muon_update", muon_ ? largest_matrix(params.layout(), false) : 0),
      work_(muon_ ? largest_matrix(params.layout(), false) : 1, muon_ ? largest_matrix(params.layout(), true) : 1) {}

template <class T>
std::vector<std::pair<std::string, Vector<T>>> Optimizer<T>::state_buffers() const {
  std::vector<std::pair<std::string, Vector<T>>> buffers = {{"adam_m", m_}, {"adam_v", v_}};
  if (muon_) buffers.emplace_back("muon_momentum", momentum_);
  return buffers;
}

template <class T>
double Optimizer<T>::group_lr(model::ParamGroup group) const {
  switch (group) {
    case model::ParamGroup::matrix: return optim_.matrix_lr;
    case model::ParamGroup::embedding: return optim_.embed_lr;
    case model::ParamGroup::head: return optim_.head_lr;
    case model::ParamGroup::scalar: return optim_.scalar_lr;
  }
  return 0.0;
}

template <class T>
void Optimizer<T>::step(const ExecSpace& exec, int step, double lr_multiplier) {
  const double mu = muon_momentum_at(step, optim_.muon_momentum_warmup_start, optim_.muon_momentum,
                                     optim_.muon_momentum_warmup_steps);
  for (const auto& e : params_.layout().entries()) {
    const double lr = group_lr(e.spec.group) * lr_multiplier;
    T* p = params_.values().data() + e.offset;
    T* g = params_.grads().data() + e.offset;
    if (muon_ && e.spec.group == model::ParamGroup::matrix) {
      const std::size_t rows = e.spec.shape[0], cols = e.spec.shape[1];
      muon_update<T>(exec, Matrix<T>(p, rows, cols), ConstMatrix<T>(g, rows, cols),
                     Matrix<T>(momentum_.data() + e.offset, rows, cols), Matrix<T>(update_.data(), rows, cols), lr, mu,
                     optim_.weight_decay, optim_.muon_backend_steps, work_, precision_);
      continue;
    }
    AdamSettings settings;
    settings.lr = lr;
    settings.beta1 = optim_.beta1;
    settings.beta2 = optim_.beta2;
    settings.eps = optim_.adam_eps;
    const bool decays = e.spec.group != model::ParamGroup::scalar;
    settings.weight_decay = decays ? optim_.weight_decay : 0.0;
    adam_update<T>(exec, Vector<T>(p, e.size), ConstVector<T>(g, e.size), Vector<T>(m_.data() + e.offset, e.size),
                   Vector<T>(v_.data() + e.offset, e.size), settings, step + 1);
  }
}

template <class T>
double clip_gradients(const ExecSpace& exec, const Vector<T>& grads, double max_norm) {
  double sum_sq = 0;
  Kokkos::parallel_reduce(
      "kgpt::optim::grad_norm", Kokkos::RangePolicy<ExecSpace>(exec, 0, grads.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i, double& acc) { acc += static_cast<double>(grads(i)) * grads(i); }, sum_sq);
  const double norm = std::sqrt(sum_sq);
  if (max_norm > 0 && norm > max_norm) {
    const T scale = static_cast<T>(max_norm / (norm + 1e-6));
    Kokkos::parallel_for(
        "kgpt::optim::clip", Kokkos::RangePolicy<ExecSpace>(exec, 0, grads.extent(0)),
        KOKKOS_LAMBDA(const std::size_t i) { grads(i) *= scale; });
  }
  return norm;
}

template class Optimizer<float>;
template class Optimizer<double>;
template double clip_gradients(const ExecSpace&, const Vector<float>&, double);
template double clip_gradients(const ExecSpace&, const Vector<double>&, double);

}  // namespace kgpt::optim

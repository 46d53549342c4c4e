#include "optim/optimizer.hpp"

#include <cmath>
#include <type_traits>

#include "core/error.hpp"
#include "core/host_copy.hpp"
#include "core/kernel.hpp"
#include "core/kokkos_compat.hpp"
#include "optim/updates.hpp"

namespace kgpt::optim {

namespace {

std::vector<std::string> names_of_state(bool muon) {
  std::vector<std::string> names = {"adam_m", "adam_v"};
  if (muon) names.emplace_back("muon_momentum");
  return names;
}

}  // namespace

Shard whole_layout(const model::ParameterLayout& layout) {
  return Shard{0, layout.entries().size(), 0, layout.buffer_size()};
}

std::vector<Shard> shard_layout(const model::ParameterLayout& layout, int ranks) {
  const auto& entries = layout.entries();
  std::size_t total = 0;
  for (const auto& e : entries) total += e.size;
  std::vector<Shard> shards(static_cast<std::size_t>(ranks));
  std::size_t tensor = 0, taken = 0;
  for (int r = 0; r < ranks; ++r) {
    Shard& s = shards[static_cast<std::size_t>(r)];
    s.first_tensor = tensor;
    s.begin = r == 0 ? 0 : shards[static_cast<std::size_t>(r - 1)].end;
    // Take tensors while that brings the running total nearer to this rank's share.
    const double target = static_cast<double>(total) * (r + 1) / ranks;
    while (tensor < entries.size() &&
           (r == ranks - 1 || std::abs(static_cast<double>(taken + entries[tensor].size) - target) <=
                                  std::abs(static_cast<double>(taken) - target))) {
      taken += entries[tensor].size;
      ++tensor;
    }
    s.end_tensor = tensor;
    s.end = r == ranks - 1 ? layout.buffer_size() : (tensor < entries.size() ? entries[tensor].offset : layout.buffer_size());
  }
  return shards;
}

std::vector<int> muon_owners(const model::ParameterLayout& layout, const config::Config& config, const Shard& shard,
                             int ranks, std::vector<double>* loads) {
  const bool muon = config.optim.matrix_optimizer == config::MatrixOptimizer::muon;
  const auto& entries = layout.entries();
  std::vector<int> owners(shard.end_tensor - shard.first_tensor, -1);
  std::vector<std::pair<double, std::size_t>> costs;  // (arithmetic, tensor)
  for (std::size_t i = shard.first_tensor; i < shard.end_tensor; ++i) {
    const model::TensorEntry& e = entries[i];
    if (!muon || e.spec.group() != model::ParamGroup::matrix) continue;
    costs.emplace_back(newton_schulz_flops(e.spec.shape[0], e.spec.shape[1], config.optim.muon_backend_steps), i);
  }
  std::stable_sort(costs.begin(), costs.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<double> load(static_cast<std::size_t>(std::max(ranks, 1)), 0.0);
  for (const auto& [cost, tensor] : costs) {
    const std::size_t rank = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[rank] += cost;
    owners[tensor - shard.first_tensor] = static_cast<int>(rank);
  }
  if (loads != nullptr) *loads = std::move(load);
  return owners;
}

template <class T>
typename Optimizer<T>::Sizes Optimizer<T>::sizes(const model::ParameterLayout& layout, const config::Config& config,
                                                 const Shard& shard, const MuonSharing& sharing) {
  Sizes s;
  s.muon = config.optim.matrix_optimizer == config::MatrixOptimizer::muon;
  s.bf16_muon = s.muon && config.model.precision == config::Precision::bf16 && std::is_same<T, float>::value;
  const auto aligned = [](std::size_t n) {
    constexpr std::size_t a = model::ParameterLayout::kAlignment;
    return (n + a - 1) / a * a;
  };
  s.owners = muon_owners(layout, config, shard, sharing.ranks);
  double all_flops = 0, own_flops = 0;
  for (std::size_t i = shard.first_tensor; i < shard.end_tensor; ++i) {
    const model::TensorEntry& e = layout.entries()[i];
    const bool muon = updated_by_muon(s.muon, e);
    std::size_t& used = muon ? s.momentum : s.moments;
    s.state_at.push_back(used);
    if (muon && e.size > 0) {
      MuonSegment segment;
      segment.param = e.offset;
      segment.update = used;
      segment.size = e.size;
      segment.first_chunk = s.muon_chunks;
      segment.scale = muon_shape_scale(e.spec.shape[0], e.spec.shape[1]);
      s.muon_segments.push_back(segment);
      s.muon_chunks += (e.size + kAdamChunk - 1) / kAdamChunk;
      const double flops = newton_schulz_flops(e.spec.shape[0], e.spec.shape[1], config.optim.muon_backend_steps);
      all_flops += flops;
      if (s.owners[i - shard.first_tensor] == sharing.rank) {
        // This rank's matrices, by shape in order of first appearance.
        auto batch = std::find_if(s.batches.begin(), s.batches.end(), [&](const MuonBatch& b) {
          return b.rows == e.spec.shape[0] && b.cols == e.spec.shape[1];
        });
        if (batch == s.batches.end()) {
          s.batches.push_back(MuonBatch{e.spec.shape[0], e.spec.shape[1], 0, {}});
          batch = s.batches.end() - 1;
        }
        batch->tensors.push_back(i);
        own_flops += flops;
      }
    }
    if (!muon && e.size > 0) {
      AdamSegment segment;
      segment.param = e.offset;
      segment.state = used;
      segment.size = e.size;
      segment.first_chunk = s.adam_chunks;
      segment.group = static_cast<int>(e.spec.group());
      s.adam_segments.push_back(segment);
      s.adam_chunks += (e.size + kAdamChunk - 1) / kAdamChunk;
    }
    used = aligned(used + e.size);
  }
  s.muon_share = all_flops > 0 ? own_flops / all_flops : 0.0;
  // Each batch's momentum offsets, batch after batch; the workspaces hold the largest batch.
  std::size_t elements = 0, squares = 0, count = 0;
  for (MuonBatch& batch : s.batches) {
    batch.first_offset = s.batch_offsets.size();
    for (const std::size_t i : batch.tensors) {
      s.batch_offsets.push_back(s.state_at[i - shard.first_tensor]);
      s.batch_params.push_back(layout.entries()[i].offset);
    }
    const std::size_t side = std::min(batch.rows, batch.cols);
    elements = std::max(elements, batch.tensors.size() * batch.rows * batch.cols);
    squares = std::max(squares, batch.tensors.size() * side * side);
    count = std::max(count, batch.tensors.size());
  }
  // The Nesterov updates of a batch; under sharing also the scratch of the others' matrices.
  s.update = elements;
  if (sharing.ranks > 1) {
    for (std::size_t i = shard.first_tensor; i < shard.end_tensor; ++i) {
      if (s.owners[i - shard.first_tensor] >= 0) s.update = std::max(s.update, layout.entries()[i].size);
    }
  }
  if (s.muon && !s.bf16_muon && count > 0) {
    s.work_elements = elements;
    s.work_squares = squares;
    s.work_count = count;
  }
  if (s.bf16_muon && count > 0) {
    s.work16_elements = elements;
    s.work16_squares = squares;
    s.work16_count = count;
  }
  // Shared: every matrix's update passes through the exchanged buffer, in Newton-Schulz's type.
  if (s.muon && sharing.ranks > 1) (s.bf16_muon ? s.exchange16 : s.exchange) = s.momentum;
  s.tensors = layout.entries().size();
  return s;
}

template <class T>
std::size_t Optimizer<T>::state_bytes(const model::ParameterLayout& layout, const config::Config& config) {
  return state_bytes(layout, config, whole_layout(layout));
}

template <class T>
std::size_t Optimizer<T>::state_bytes(const model::ParameterLayout& layout, const config::Config& config,
                                      const Shard& shard, const MuonSharing& sharing) {
  const Sizes s = sizes(layout, config, shard, sharing);
  return (2 * s.moments + s.momentum + s.update + s.exchange) * sizeof(T) + s.exchange16 * sizeof(bf16) +
         NewtonSchulzWorkspace<T>::bytes(s.work_elements, s.work_squares, s.work_count) +
         NewtonSchulzWorkspace<bf16>::bytes(s.work16_elements, s.work16_squares, s.work16_count) +
         (s.tensors + 1) * sizeof(double) + s.adam_segments.size() * sizeof(AdamSegment) +
         s.muon_segments.size() * sizeof(MuonSegment) + 2 * s.batch_offsets.size() * sizeof(std::size_t);
}

template <class T>
Optimizer<T>::Optimizer(const model::Parameters<T>& params, const config::Config& config)
    : Optimizer(params, config, whole_layout(params.layout())) {}

template <class T>
Optimizer<T>::Optimizer(const model::Parameters<T>& params, const config::Config& config, const Shard& shard,
                        const MuonSharing& sharing)
    : Optimizer(params, config, shard, sharing, sizes(params.layout(), config, shard, sharing)) {}

template <class T>
Optimizer<T>::Optimizer(const model::Parameters<T>& params, const config::Config& config, const Shard& shard,
                        const MuonSharing& sharing, const Sizes& s)
    : params_(params),
      shard_(shard),
      sharing_(sharing),
      optim_(config.optim),
      muon_(s.muon),
      bf16_muon_(s.bf16_muon),
      state_at_(s.state_at),
      owners_(s.owners),
      batches_(s.batches),
      muon_share_(s.muon_share),
      m_("kgpt::optim::adam_m", s.moments),
      v_("kgpt::optim::adam_v", s.moments),
      momentum_("kgpt::optim::muon_momentum", s.momentum),
      update_("kgpt::optim::muon_update", s.update),
      work_(s.work_elements, s.work_squares, s.work_count),
      work16_(s.work16_elements, s.work16_squares, s.work16_count),
      exchange_buffer_("kgpt::optim::muon_exchange", s.exchange),
      exchange16_buffer_("kgpt::optim::muon_exchange", s.exchange16),
      batch_offsets_("kgpt::optim::muon_batch_offsets", s.batch_offsets.size()),
      batch_params_("kgpt::optim::muon_batch_params", s.batch_params.size()),
      muon_segments_("kgpt::optim::muon_segments", s.muon_segments.size()),
      muon_chunks_(s.muon_chunks),
      norm_parts_("kgpt::optim::norm_parts", s.tensors + 1),
      adam_segments_("kgpt::optim::adam_segments", s.adam_segments.size()),
      adam_chunks_(s.adam_chunks) {
  if (sharing_.ranks < 1 || sharing_.rank < 0 || sharing_.rank >= sharing_.ranks) {
    throw Error(ExitCode::failure, "optimizer: rank " + std::to_string(sharing_.rank) + " of " +
                                       std::to_string(sharing_.ranks) + " sharing Muon");
  }
  const auto copy_table = [](const auto& from, const auto& to) {
    using E = typename std::decay_t<decltype(from)>::value_type;
    const Kokkos::View<const E*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> table(from.data(), from.size());
    Kokkos::deep_copy(to, table);
  };
  copy_table(s.adam_segments, adam_segments_);
  copy_table(s.muon_segments, muon_segments_);
  copy_table(s.batch_offsets, batch_offsets_);
  copy_table(s.batch_params, batch_params_);
}

std::vector<std::string> state_names(const config::Config& config) {
  return names_of_state(config.optim.matrix_optimizer == config::MatrixOptimizer::muon);
}

template <class T>
std::vector<std::string> Optimizer<T>::state_names() const {
  return names_of_state(muon_);
}

template <class T>
const Vector<T>& Optimizer<T>::state_buffer(const std::string& name) const {
  if (name == "adam_m") return m_;
  if (name == "adam_v") return v_;
  if (name == "muon_momentum" && muon_) return momentum_;
  throw Error(ExitCode::failure, "optimizer: no state '" + name + "' under this optimizer");
}

template <class T>
std::vector<typename Optimizer<T>::Placement> Optimizer<T>::placements(const std::string& name) const {
  const bool muon_state = name == "muon_momentum";
  std::vector<Placement> found;
  const auto& entries = params_.layout().entries();
  for (std::size_t i = shard_.first_tensor; i < shard_.end_tensor; ++i) {
    const model::TensorEntry& e = entries[i];
    if (uses_muon(e) != muon_state) continue;
    found.push_back({static_cast<std::ptrdiff_t>(state_at_[i - shard_.first_tensor]),
                     static_cast<std::ptrdiff_t>(e.offset - shard_.begin), static_cast<std::ptrdiff_t>(e.size)});
  }
  return found;
}

template <class T>
std::vector<T> Optimizer<T>::state_to_host(const std::string& name) const {
  const std::vector<T> packed = to_host(state_buffer(name));
  std::vector<T> span(shard_.size(), T(0));
  for (const Placement& p : placements(name)) {
    std::copy(packed.begin() + p.packed, packed.begin() + p.packed + p.size, span.begin() + p.span);
  }
  return span;
}

template <class T>
void Optimizer<T>::state_from_host(const std::string& name, const std::vector<T>& span) {
  const Vector<T>& buffer = state_buffer(name);
  if (span.size() != shard_.size()) {
    throw Error(ExitCode::failure, "optimizer: " + std::to_string(span.size()) + " values of '" + name +
                                       "' for a shard of " + std::to_string(shard_.size()));
  }
  std::vector<T> packed(buffer.extent(0), T(0));
  for (const Placement& p : placements(name)) {
    std::copy(span.begin() + p.span, span.begin() + p.span + p.size, packed.begin() + p.packed);
  }
  from_host(packed, buffer);
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
double Optimizer<T>::group_weight_decay(model::ParamGroup group) const {
  switch (group) {
    case model::ParamGroup::matrix: return optim_.matrix_weight_decay;
    case model::ParamGroup::embedding: return optim_.embed_weight_decay;
    case model::ParamGroup::head: return optim_.head_weight_decay;
    case model::ParamGroup::scalar: return optim_.scalar_weight_decay;
  }
  return 0.0;
}

template <class T>
void Optimizer<T>::step(const ExecSpace& exec, int step, double lr_multiplier, const double* grad_factor,
                        double* norm_sq) {
  const double mu = muon_momentum_at(step, optim_.muon_momentum_warmup_start, optim_.muon_momentum,
                                     optim_.muon_momentum_warmup_steps);
  const auto& entries = params_.layout().entries();
  if (fused_adam_) {
    // Every learning rate by group, as group_lr and the per-tensor settings below give them.
    AdamSettings groups[4];
    for (const model::ParamGroup group :
         {model::ParamGroup::matrix, model::ParamGroup::scalar, model::ParamGroup::embedding, model::ParamGroup::head}) {
      AdamSettings& settings = groups[static_cast<int>(group)];
      settings.lr = group_lr(group) * lr_multiplier;
      settings.beta1 = optim_.beta1;
      settings.beta2 = optim_.beta2;
      settings.eps = optim_.adam_eps;
      settings.weight_decay = group_weight_decay(group);
    }
    double* fused_norm = norm_sq != nullptr ? norm_parts_.data() + entries.size() : nullptr;
    adam_update_all<T>(exec, params_.values().data(), params_.grads().data(), m_.data(), v_.data(),
                       adam_segments_, adam_chunks_, AdamStep<T>(groups, step + 1), grad_factor, fused_norm,
                       packed_adam_);
  }
  if (muon_) {
    const double lr = group_lr(model::ParamGroup::matrix) * lr_multiplier;
    if (bf16_muon_) {
      muon_step<bf16>(exec, lr, mu, grad_factor, norm_sq, work16_, exchange16_buffer_);
    } else {
      muon_step<T>(exec, lr, mu, grad_factor, norm_sq, work_, exchange_buffer_);
    }
  }
  for (std::size_t index = shard_.first_tensor; index < shard_.end_tensor && !fused_adam_; ++index) {
    const model::TensorEntry& e = entries[index];
    if (uses_muon(e)) continue;
    const std::size_t state_at = state_at_[index - shard_.first_tensor];
    double* norm_part = norm_sq != nullptr ? norm_parts_.data() + index : nullptr;
    const double lr = group_lr(e.spec.group()) * lr_multiplier;
    T* p = params_.values().data() + e.offset;
    T* g = params_.grads().data() + e.offset;
    AdamSettings settings;
    settings.lr = lr;
    settings.beta1 = optim_.beta1;
    settings.beta2 = optim_.beta2;
    settings.eps = optim_.adam_eps;
    settings.weight_decay = group_weight_decay(e.spec.group());
    adam_update<T>(exec, Vector<T>(p, e.size), ConstVector<T>(g, e.size), Vector<T>(m_.data() + state_at, e.size),
                   Vector<T>(v_.data() + state_at, e.size), settings, step + 1, grad_factor, norm_part);
  }
  if (norm_sq == nullptr) return;
  const auto parts = norm_parts_;
  const std::size_t count = entries.size() + (fused_adam_ ? 1 : 0);
  kgpt::parallel_for(
      "kgpt::optim::norm_sum", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1), KOKKOS_LAMBDA(const int) {
        double sum = 0;
        for (std::size_t i = 0; i < count; ++i) sum += parts(i);
        *norm_sq = sum;
      });
}

template <class T>
template <class X>
void Optimizer<T>::muon_step(const ExecSpace& exec, double lr, double mu, const double* grad_factor, double* norm_sq,
                             NewtonSchulzWorkspace<X>& work, const Vector<X>& exchanged) {
  const auto& entries = params_.layout().entries();
  T* const values = params_.values().data();
  const T* const grads = params_.grads().data();
  const bool shared = sharing_.ranks > 1;
  // Momentum for every matrix of the shard (replicated under sharing, so checkpoints and resumes
  // need no gather); the Nesterov update u of this rank's matrices into their batch's slots.
  // The batches run one after another through one u buffer: a batch's momentum pass, its
  // Newton-Schulz, then the next batch.
  const auto momentum_of = [&](std::size_t index, T* u) {
    const model::TensorEntry& e = entries[index];
    double* norm_part = norm_sq != nullptr ? norm_parts_.data() + index : nullptr;
    muon_momentum<T>(exec, e.size, grads + e.offset, momentum_.data() + state_at_[index - shard_.first_tensor], u, mu,
                     grad_factor, norm_part);
  };
  // The others' matrices first, their u into the buffer's start (unread), before any batch uses it.
  for (std::size_t index = shard_.first_tensor; index < shard_.end_tensor; ++index) {
    if (uses_muon(entries[index]) && owners_[index - shard_.first_tensor] != sharing_.rank) {
      momentum_of(index, update_.data());
    }
  }
  if (shared) Kokkos::deep_copy(exec, exchanged, X(0.0f));  // the others' matrices stay zero here
  for (const MuonBatch& batch : batches_) {
    const std::size_t count = batch.tensors.size();
    for (std::size_t k = 0; k < count; ++k) momentum_of(batch.tensors[k], update_.data() + k * batch.rows * batch.cols);
    const Orthogonalised<X> o =
        newton_schulz_batch<X, T>(exec, update_.data(), batch.rows, batch.cols, count, optim_.muon_backend_steps, work);
    if (shared) {
      muon_store_batch<X>(exec, o, batch_offsets_.data() + batch.first_offset, exchanged.data());
    } else {
      muon_apply_batch<T, X>(exec, o, batch_params_.data() + batch.first_offset, values, lr,
                             optim_.matrix_weight_decay);
    }
  }
  if (!shared) return;
  if (!exchange_) {
    throw Error(ExitCode::failure, "optimizer: Muon is shared by " + std::to_string(sharing_.ranks) +
                                       " ranks, but no exchange of their updates was given");
  }
  exchange_(exec, exchanged.data(), exchanged.extent(0) * sizeof(X));
  muon_apply_all<T, X>(exec, values, exchanged.data(), muon_segments_, muon_chunks_, lr, optim_.matrix_weight_decay);
}

template <class T>
void gradient_norm_squared(const ExecSpace& exec, const Vector<T>& grads, std::size_t begin, std::size_t end,
                           const Kokkos::View<double, MemSpace>& norm_sq) {
  const ConstVector<T> part(grads.data() + begin, end - begin);
  update_pass<T>(exec, "kgpt::optim::grad_norm", end - begin, part, norm_sq.data(), KOKKOS_LAMBDA(const std::size_t) {});
}

template <class T>
void clip_factor(const ExecSpace& exec, double max_norm, const Kokkos::View<double, MemSpace>& norm_sq,
                 const Kokkos::View<double, MemSpace>& factor) {
  kgpt::parallel_for(
      "kgpt::optim::clip_factor", Kokkos::RangePolicy<ExecSpace>(exec, 0, 1), KOKKOS_LAMBDA(const int) {
        const double norm = compat::sqrt(norm_sq());
        // As the gradients would be scaled in T.
        factor() = max_norm > 0 && norm > max_norm ? static_cast<double>(static_cast<T>(max_norm / (norm + 1e-6))) : 1.0;
      });
}

template class Optimizer<float>;
template class Optimizer<double>;
template void gradient_norm_squared(const ExecSpace&, const Vector<float>&, std::size_t, std::size_t,
                                    const Kokkos::View<double, MemSpace>&);
template void gradient_norm_squared(const ExecSpace&, const Vector<double>&, std::size_t, std::size_t,
                                    const Kokkos::View<double, MemSpace>&);
template void clip_factor<float>(const ExecSpace&, double, const Kokkos::View<double, MemSpace>&,
                                 const Kokkos::View<double, MemSpace>&);
template void clip_factor<double>(const ExecSpace&, double, const Kokkos::View<double, MemSpace>&,
                                  const Kokkos::View<double, MemSpace>&);

}  // namespace kgpt::optim

#pragma once
// Muon's rule as a class a variant of Muon (rules/normuon/) extends: its plan (which matrices this
// rank orthogonalises, in batches of one shape, and where each keeps its momentum), the bytes that
// plan allocates, and the rule, with a hook on each batch's orthogonalised matrices. Internal
// linkage, as the kernels it launches (core/kernel.hpp): each rule's file has its own copy.

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "optim/rule.hpp"
#include "optim/rules/muon/muon.hpp"
#include "optim/rules/muon/newton_schulz.hpp"
#include "optim/rules/muon/updates.hpp"

namespace kgpt::optim {

namespace {

// The rule's matrices of one shape that this rank orthogonalises, together: their places in
// setup.tensors and, from `first_offset` in the offsets table, where each keeps its momentum (and its
// orthogonalised update in the exchanged buffer, which has the momentum's layout).
struct MuonBatch {
  std::size_t rows = 0, cols = 0, first_offset = 0;
  std::vector<std::size_t> tensors;
};

// The sizes of the rule's buffers, in elements, and where each of its tensors keeps its momentum.
struct MuonPlan {
  bool bf16 = false;  // Newton-Schulz in bf16, as the model's products (train.precision: bf16)
  std::size_t momentum = 0, update = 0;
  std::size_t work_elements = 1, work_squares = 1, work_count = 1;  // Newton-Schulz's, in its type
  std::size_t exchange = 0, exchange16 = 0;  // the orthogonalised updates (T, or bf16 in bf16 models)
  std::vector<std::size_t> state_at;         // by the rule's tensors, in their order
  std::vector<MuonSegment> segments;         // for muon_apply_all
  std::size_t chunks = 0;
  std::vector<MuonBatch> batches;
  std::vector<std::size_t> batch_offsets, batch_params;  // each batch item's momentum and parameters
  std::vector<int> owners;
  double own_flops = 0, all_flops = 0;
};

template <class T>
MuonPlan muon_plan(const RuleSetup& setup) {
  const config::Config& config = *setup.config;
  const auto& entries = setup.layout->entries();
  MuonPlan s;
  s.bf16 = config.model.precision == config::Precision::bf16 && std::is_same<T, float>::value;
  s.owners = muon_owners(setup);
  for (std::size_t k = 0; k < setup.tensors.size(); ++k) {
    const model::TensorEntry& e = entries[setup.tensors[k]];
    s.state_at.push_back(s.momentum);
    if (e.size > 0) {
      MuonSegment segment;
      segment.param = e.offset;
      segment.update = s.momentum;
      segment.size = e.size;
      segment.first_chunk = s.chunks;
      segment.scale = muon_shape_scale(e.spec.shape[0], e.spec.shape[1]);
      s.segments.push_back(segment);
      s.chunks += (e.size + kUpdateChunk - 1) / kUpdateChunk;
      const double flops = newton_schulz_flops(e.spec.shape[0], e.spec.shape[1], config.optim.muon_backend_steps);
      s.all_flops += flops;
      if (s.owners[k] == setup.sharing.rank) {
        // This rank's matrices, by shape in order of first appearance.
        auto batch = std::find_if(s.batches.begin(), s.batches.end(), [&](const MuonBatch& b) {
          return b.rows == e.spec.shape[0] && b.cols == e.spec.shape[1];
        });
        if (batch == s.batches.end()) {
          s.batches.push_back(MuonBatch{e.spec.shape[0], e.spec.shape[1], 0, {}});
          batch = s.batches.end() - 1;
        }
        batch->tensors.push_back(k);
        s.own_flops += flops;
      }
    }
    s.momentum = aligned_elements(s.momentum + e.size);
  }
  // Each batch's momentum offsets, batch after batch; the workspaces hold the largest batch.
  std::size_t elements = 0, squares = 0, count = 0;
  for (MuonBatch& batch : s.batches) {
    batch.first_offset = s.batch_offsets.size();
    for (const std::size_t k : batch.tensors) {
      s.batch_offsets.push_back(s.state_at[k]);
      s.batch_params.push_back(entries[setup.tensors[k]].offset);
    }
    const std::size_t side = std::min(batch.rows, batch.cols);
    elements = std::max(elements, batch.tensors.size() * batch.rows * batch.cols);
    squares = std::max(squares, batch.tensors.size() * side * side);
    count = std::max(count, batch.tensors.size());
  }
  // The Nesterov updates of a batch; under sharing also the scratch of the others' matrices.
  s.update = elements;
  if (setup.sharing.ranks > 1) {
    for (std::size_t k = 0; k < setup.tensors.size(); ++k) {
      if (s.owners[k] >= 0) s.update = std::max(s.update, entries[setup.tensors[k]].size);
    }
  }
  if (count > 0) {
    s.work_elements = elements;
    s.work_squares = squares;
    s.work_count = count;
  }
  // Shared: every matrix's update passes through the exchanged buffer, in Newton-Schulz's type.
  if (setup.sharing.ranks > 1) (s.bf16 ? s.exchange16 : s.exchange) = s.momentum;
  return s;
}

template <class T>
class MuonRule : public Rule<T> {
 public:
  // `momentum_name`: what checkpoints call its momentum.
  MuonRule(const model::Parameters<T>& params, const RuleSetup& setup, const MuonPlan& s, std::string momentum_name)
      : params_(params),
        momentum_name_(std::move(momentum_name)),
        setup_(setup),
        bf16_(s.bf16),
        state_at_(s.state_at),
        owners_(s.owners),
        batches_(s.batches),
        own_flops_(s.own_flops),
        all_flops_(s.all_flops),
        momentum_(buffer_of<Vector<T>>("kgpt::optim::muon_momentum", s.momentum)),
        update_(buffer_of<Vector<T>>("kgpt::optim::muon_update", s.update)),
        exchange_buffer_(buffer_of<Vector<T>>("kgpt::optim::muon_exchange", s.exchange)),
        exchange16_buffer_(buffer_of<Vector<bf16>>("kgpt::optim::muon_exchange", s.exchange16)),
        batch_offsets_(table_of("kgpt::optim::muon_batch_offsets", s.batch_offsets)),
        batch_params_(table_of("kgpt::optim::muon_batch_params", s.batch_params)),
        segments_(table_of("kgpt::optim::muon_segments", s.segments)),
        chunks_(s.chunks) {
    // Newton-Schulz's workspace in the one type it runs in.
    if (bf16_) {
      work16_ = std::make_unique<NewtonSchulzWorkspace<bf16>>(s.work_elements, s.work_squares, s.work_count);
    } else {
      work_ = std::make_unique<NewtonSchulzWorkspace<T>>(s.work_elements, s.work_squares, s.work_count);
    }
  }

  void step(const RuleStep& s) override {
    const config::OptimConfig& optim = setup_.config->optim;
    const double mu =
        muon_momentum_at(s.step, optim.muon_momentum_warmup_start, optim.muon_momentum, optim.muon_momentum_warmup_steps);
    const int matrix = static_cast<int>(model::ParamGroup::matrix);
    if (bf16_) {
      step_in<bf16>(s, s.rates.lr[matrix], s.rates.weight_decay[matrix], mu, *work16_, exchange16_buffer_);
    } else {
      step_in<T>(s, s.rates.lr[matrix], s.rates.weight_decay[matrix], mu, *work_, exchange_buffer_);
    }
  }

  const Vector<T>& state(const std::string& name) const override {
    if (name == momentum_name_) return momentum_;
    throw Error(ExitCode::failure, "optimizer: no state '" + name + "' in this rule");
  }

  std::vector<Placement> placements(const std::string&) const override { return placements_of(setup_, state_at_); }

  std::pair<double, double> shared_work() const override { return {own_flops_, all_flops_}; }

 protected:
  // A variant's change to a batch's orthogonalised matrices, in place, before they are applied or
  // exchanged (in the type Newton-Schulz ran in); Muon's own is none.
  virtual void adjust(const ExecSpace& exec, const Orthogonalised<T>& o, const MuonBatch& batch) {
    (void)exec, (void)o, (void)batch;
  }
  virtual void adjust(const ExecSpace& exec, const Orthogonalised<bf16>& o, const MuonBatch& batch) {
    (void)exec, (void)o, (void)batch;
  }
  const RuleSetup& setup() const { return setup_; }

 private:
  // Momentum, Newton-Schulz by batch in X, the exchange, the updates applied.
  template <class X>
  void step_in(const RuleStep& s, double lr, double weight_decay, double mu, NewtonSchulzWorkspace<X>& work,
               const Vector<X>& exchanged) {
    const ExecSpace& exec = s.exec;
    const auto& entries = setup_.layout->entries();
    const int backend_steps = setup_.config->optim.muon_backend_steps;
    T* const values = params_.values().data();
    const T* const grads = params_.grads().data();
    const bool shared = setup_.sharing.ranks > 1;
    // Momentum for every matrix of the shard (replicated under sharing, so checkpoints and resumes
    // need no gather); the Nesterov update u of this rank's matrices into their batch's slots.
    // The batches run one after another through one u buffer: a batch's momentum pass, its
    // Newton-Schulz, then the next batch.
    const auto momentum_of = [&](std::size_t k, T* u) {
      const std::size_t index = setup_.tensors[k];
      const model::TensorEntry& e = entries[index];
      double* norm_part = s.tensor_norms != nullptr ? s.tensor_norms + index : nullptr;
      muon_momentum<T>(exec, e.size, grads + e.offset, momentum_.data() + state_at_[k], u, mu, s.grad_factor, norm_part);
    };
    // The others' matrices first, their u into the buffer's start (unread), before any batch uses it.
    for (std::size_t k = 0; k < setup_.tensors.size(); ++k) {
      if (owners_[k] != setup_.sharing.rank) momentum_of(k, update_.data());
    }
    if (shared) Kokkos::deep_copy(exec, exchanged, X(0.0f));  // the others' matrices stay zero here
    for (const MuonBatch& batch : batches_) {
      const std::size_t count = batch.tensors.size();
      for (std::size_t j = 0; j < count; ++j) momentum_of(batch.tensors[j], update_.data() + j * batch.rows * batch.cols);
      const Orthogonalised<X> o =
          newton_schulz_batch<X, T>(exec, update_.data(), batch.rows, batch.cols, count, backend_steps, work);
      adjust(exec, o, batch);
      if (shared) {
        muon_store_batch<X>(exec, o, batch_offsets_.data() + batch.first_offset, exchanged.data());
      } else {
        muon_apply_batch<T, X>(exec, o, batch_params_.data() + batch.first_offset, values, lr, weight_decay);
      }
    }
    if (!shared) return;
    if (s.exchange == nullptr) {
      throw Error(ExitCode::failure, "optimizer: Muon is shared by " + std::to_string(setup_.sharing.ranks) +
                                         " ranks, but no exchange of their updates was given");
    }
    (*s.exchange)(exec, exchanged.data(), exchanged.extent(0) * sizeof(X));
    muon_apply_all<T, X>(exec, values, exchanged.data(), segments_, chunks_, lr, weight_decay);
  }

  const model::Parameters<T>& params_;
  std::string momentum_name_;
  RuleSetup setup_;
  bool bf16_;
  std::vector<std::size_t> state_at_;
  std::vector<int> owners_;
  std::vector<MuonBatch> batches_;
  double own_flops_ = 0, all_flops_ = 0;
  Vector<T> momentum_, update_;
  std::unique_ptr<NewtonSchulzWorkspace<T>> work_;
  std::unique_ptr<NewtonSchulzWorkspace<bf16>> work16_;
  Vector<T> exchange_buffer_;
  Vector<bf16> exchange16_buffer_;
  Kokkos::View<std::size_t*, MemSpace> batch_offsets_, batch_params_;
  Kokkos::View<MuonSegment*, MemSpace> segments_;
  std::size_t chunks_ = 0;
};

// Bytes of device memory a MuonRule of this plan allocates.
template <class T>
std::size_t muon_plan_bytes(const MuonPlan& s) {
  return (s.momentum + s.update + s.exchange) * sizeof(T) + s.exchange16 * sizeof(bf16) +
         (s.bf16 ? NewtonSchulzWorkspace<bf16>::bytes(s.work_elements, s.work_squares, s.work_count)
                 : NewtonSchulzWorkspace<T>::bytes(s.work_elements, s.work_squares, s.work_count)) +
         s.segments.size() * sizeof(MuonSegment) + 2 * s.batch_offsets.size() * sizeof(std::size_t);
}

}  // namespace

}  // namespace kgpt::optim
